"""Limits of one loop run, and how role calls are retried.

Both are frozen values checked by the runtime before every role call, so a module instance can be
shared by many concurrent runs and a caller can override any limit for one call.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from loops.errors import ConfigurationError

MAX_ITERATIONS_CAP = 1000


@dataclass(frozen=True)
class Budget:
    """What one run may spend before it stops gracefully with its best result.

    `None` means "no limit" for every limit but `max_iterations`, which always has one.
    """

    max_iterations: int = 3
    timeout_s: float | None = 300.0
    max_lm_calls: int | None = None
    max_context_chars: int | None = 256 * 1024
    context_warning_ratio: float = 0.8

    def __post_init__(self) -> None:
        if isinstance(self.max_iterations, bool) or not isinstance(self.max_iterations, int):
            raise ConfigurationError(f"max_iterations must be an int, got {self.max_iterations!r}")
        if not 0 <= self.max_iterations <= MAX_ITERATIONS_CAP:
            raise ConfigurationError(
                f"max_iterations must be between 0 and {MAX_ITERATIONS_CAP}, got {self.max_iterations}; "
                "a loop that needs more should be split or given a different stop condition"
            )
        _require_positive("timeout_s", self.timeout_s)
        _require_positive("max_lm_calls", self.max_lm_calls)
        _require_positive("max_context_chars", self.max_context_chars)
        if not 0 < self.context_warning_ratio <= 1:
            raise ConfigurationError(
                f"context_warning_ratio must be in (0, 1], got {self.context_warning_ratio!r}"
            )

    def override(self, **limits: object) -> Budget:
        """This budget with the given limits replaced; limits passed as `None` are left as they are."""
        unknown = set(limits) - {field.name for field in dataclasses.fields(self)}
        if unknown:
            raise ConfigurationError(
                f"unknown budget limit(s) {sorted(unknown)}; known: "
                f"{[field.name for field in dataclasses.fields(self)]}"
            )
        changes = {name: value for name, value in limits.items() if value is not None}
        return dataclasses.replace(self, **changes) if changes else self


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing role call is tried again before the loop gives up on it.

    Transient LM failures (rate limits, time-outs, dropped connections, server errors) are retried
    with exponential backoff; an answer that cannot be parsed is asked again `parse_retries` times
    with a little temperature, since asking a deterministic model the same question gives the same
    unparseable answer.
    """

    attempts: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    parse_retries: int = 1
    parse_retry_temperature: float = 0.7

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigurationError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        if self.parse_retries < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigurationError("RetryPolicy delays and parse_retries must not be negative")

    def delay_s(self, failed_attempts: int) -> float:
        """Seconds to wait after the given number of failed attempts."""
        return min(self.backoff_s * 2 ** (failed_attempts - 1), self.max_backoff_s)


def _require_positive(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number or None (no limit), got {value!r}")

"""Limits of one loop run, and how role calls are retried.

Both are frozen values checked by the runtime before every role call, so a module instance can be
shared by many concurrent runs and a caller can override any limit for one call.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from loops.errors import ConfigurationError

__all__ = ["MAX_ITERATIONS_CAP", "Budget", "RetryPolicy"]

MAX_ITERATIONS_CAP = 1000


@dataclass(frozen=True)
class Budget:
    """What one run may spend before it stops gracefully with its best result.

    `None` means "no limit" for `timeout_s`, `max_lm_calls`, `max_context_chars`, `max_tokens` (input
    plus output tokens, as the LMs report them) and `max_cost_usd` (LiteLLM's price of each request
    where it knows the model; the embedded model costs 0); `max_iterations` always has a limit.
    """

    max_iterations: int = 3
    timeout_s: float | None = 300.0
    max_lm_calls: int | None = None
    max_context_chars: int | None = 256 * 1024
    context_warning_ratio: float = 0.8
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def __post_init__(self) -> None:
        iterations = self.max_iterations
        _require(self, "max_iterations", f"an int from 0 to {MAX_ITERATIONS_CAP}",
                 _is_int(iterations) and 0 <= iterations <= MAX_ITERATIONS_CAP,
                 "a loop that needs more should be split or given a different stop condition"
                 if _is_int(iterations) and iterations > MAX_ITERATIONS_CAP else "")
        _require(self, "timeout_s", "a positive, finite number of seconds, or None (no limit)",
                 self.timeout_s is None or (_is_finite(self.timeout_s) and self.timeout_s > 0))
        _require(self, "max_cost_usd", "a positive, finite number of US dollars, or None (no limit)",
                 self.max_cost_usd is None or (_is_finite(self.max_cost_usd) and self.max_cost_usd > 0))
        for name in ("max_lm_calls", "max_context_chars", "max_tokens"):
            value = getattr(self, name)
            _require(self, name, "a positive int, or None (no limit)", value is None or (_is_int(value) and value > 0))
        ratio = self.context_warning_ratio
        _require(self, "context_warning_ratio", "a number in (0, 1]", _is_finite(ratio) and 0 < ratio <= 1)

    def override(self, **limits: object) -> Budget:
        """This budget with exactly the given limits replaced.

        `None` means "no limit", as in the constructor: `override(timeout_s=None)` lifts the time
        limit. `max_iterations` and `context_warning_ratio` cannot be None.
        """
        known = [field.name for field in dataclasses.fields(self)]
        unknown = sorted(set(limits) - set(known))
        if unknown:
            raise ConfigurationError(f"unknown budget limit(s) {unknown}; known: {known}")
        if "max_iterations" in limits and limits["max_iterations"] is None:
            raise ConfigurationError(
                f"max_iterations always has a limit; give an int 0..{MAX_ITERATIONS_CAP}, got None")
        if "context_warning_ratio" in limits and limits["context_warning_ratio"] is None:
            raise ConfigurationError("context_warning_ratio cannot be None; give a number in (0, 1]")
        return dataclasses.replace(self, **limits) if limits else self


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing role call is tried again before the loop gives up on it.

    Transient LM failures (rate limits, time-outs, dropped connections, server errors) are retried
    with exponential backoff, or after the wait the server asks for (Retry-After) when that is longer;
    an answer that cannot be parsed is asked again `parse_retries` times with a little temperature,
    since asking a deterministic model the same question gives the same unparseable answer.
    `max_backoff_s` may be `math.inf` (no cap; the run's timeout still cuts it).
    """

    attempts: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    parse_retries: int = 1
    parse_retry_temperature: float = 0.7

    def __post_init__(self) -> None:
        _require(self, "attempts", "an int >= 1", _is_int(self.attempts) and self.attempts >= 1)
        _require(self, "backoff_s", "a finite number of seconds >= 0",
                 _is_finite(self.backoff_s) and self.backoff_s >= 0)
        _require(self, "max_backoff_s", "a number of seconds >= 0 (math.inf: no cap)",
                 _is_number(self.max_backoff_s) and self.max_backoff_s >= 0)
        _require(self, "parse_retries", "an int >= 0", _is_int(self.parse_retries) and self.parse_retries >= 0)
        _require(self, "parse_retry_temperature", "a finite number >= 0",
                 _is_finite(self.parse_retry_temperature) and self.parse_retry_temperature >= 0)

    def delay_s(self, failed_attempts: int, retry_after: float | None = None) -> float:
        """Seconds to wait after the given number of failed attempts: the backoff, or what the server asked
        for (`retry_after`, from its Retry-After header) when that is longer. `max_backoff_s` caps the
        backoff only: a server is never asked again sooner than it said; the run's timeout still cuts it."""
        # The exponent is clamped so that a policy with thousands of attempts cannot overflow a float.
        backoff = min(self.backoff_s * 2 ** min(failed_attempts - 1, 64), self.max_backoff_s)
        if _is_finite(retry_after) and retry_after > backoff:
            return float(retry_after)
        return backoff


def _is_int(value: object) -> bool:
    # bool is an int subclass, but True iterations or attempts is always a mistake.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


def _is_finite(value: object) -> bool:
    return _is_number(value) and math.isfinite(value)


def _require(owner: object, name: str, expected: str, valid: bool, hint: str = "") -> None:
    if not valid:
        value = getattr(owner, name)
        raise ConfigurationError(
            f"{type(owner).__name__}.{name} must be {expected}, got {value!r:.100} ({type(value).__name__})"
            + (f"; {hint}" if hint else ""))

"""Limits of one loop run, and how role calls are retried.

Both are frozen values, so a module instance can be shared by many concurrent runs and a caller can
override any limit for one call. `Budget.check` is the one place a limit is compared with what a run has
spent (`loops.vocabulary.usage.Usage`) and its time: the runtime asks it before every role call and every LM request,
and it returns the limit reached (a `LimitReached`, for the runtime to raise) and what to warn about,
rather than acting itself; a nested run's share of what is left is `Budget.within`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass

from loops.errors import ConfigurationError, LimitReached
from loops.vocabulary.usage import Usage

__all__ = ["MAX_ITERATIONS_CAP", "Budget", "BudgetCheck", "RetryPolicy"]

MAX_ITERATIONS_CAP = 1000


@dataclass(frozen=True)
class Budget:
    """What one run may spend before it stops gracefully with its best result.

    `None` means "no limit" for `timeout_s`, `max_lm_calls`, `max_context_chars`, `max_tokens` (input
    plus output tokens, as the LMs report them) and `max_cost_usd` (LiteLLM's price of each request
    where it knows the model; the embedded model costs 0); `max_iterations` always has a limit.
    """

    max_iterations: int = 3
    """Iterations the loop may start (0 to `MAX_ITERATIONS_CAP`); at the limit it stops with `max_iterations`."""

    timeout_s: float | None = 300.0
    """Seconds of wall clock the run may take (a person's wait apart); None: no limit. Stop reason `timeout`."""

    max_lm_calls: int | None = None
    """LM requests the run may send, those replayed from a checkpoint included; None: no limit."""

    max_context_chars: int | None = 256 * 1024
    """Characters the role histories may put in the prompts; None: no limit. Stop reason `context_limit`."""

    context_warning_ratio: float = 0.8
    """The share of `max_context_chars` at which the run warns, once, that its histories grow (in (0, 1])."""

    max_tokens: int | None = None
    """Input plus output tokens the run may use, as the LMs report them; None: no limit."""

    max_cost_usd: float | None = None
    """US dollars the run may spend (LiteLLM's prices; the embedded model is free); None: no limit."""

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
        if not limits:
            return self
        unknown = sorted(set(limits).difference(_LIMITS))
        if unknown:
            raise ConfigurationError(f"unknown budget limit(s) {unknown}; known: {list(_LIMITS)}")
        if "max_iterations" in limits and limits["max_iterations"] is None:
            raise ConfigurationError(
                f"max_iterations always has a limit; give an int 0..{MAX_ITERATIONS_CAP}, got None")
        if "context_warning_ratio" in limits and limits["context_warning_ratio"] is None:
            raise ConfigurationError("context_warning_ratio cannot be None; give a number in (0, 1]")
        return dataclasses.replace(self, **limits)

    def check(self, usage: Usage, elapsed: float, where: str = "", *,
              warned: Iterable[str] = ()) -> BudgetCheck:
        """Whether a run that has spent `usage` in `elapsed` seconds may go on: the first limit reached (time,
        LM calls, tokens, cost, context) as a `LimitReached` saying it stopped `where`, and what to warn
        about (under a cost budget, models of unknown price not in `warned`)."""
        warnings: tuple[str, ...] = ()
        if self.timeout_s is not None and elapsed >= self.timeout_s:
            return BudgetCheck(LimitReached("timeout", f"stopped{where} after {elapsed:.1f}s: "
                                            f"timeout_s={self.timeout_s} reached"))
        if self.max_lm_calls is not None and usage.lm_calls >= self.max_lm_calls:
            return BudgetCheck(LimitReached("lm_calls", f"stopped{where} after {usage.lm_calls} LM calls: "
                                            f"max_lm_calls={self.max_lm_calls} reached"))
        if self.max_tokens is not None and usage.tokens >= self.max_tokens:
            return BudgetCheck(LimitReached("tokens", f"stopped{where} after {usage.tokens} tokens: "
                                            f"max_tokens={self.max_tokens} reached"))
        if self.max_cost_usd is not None:
            unpriced = sorted(usage.unpriced.difference(warned))
            if unpriced:
                warnings = (f"no price is known for {unpriced}: their requests count as free against "
                            "max_cost_usd",)
            if (usage.cost_usd or 0.0) >= self.max_cost_usd:
                return BudgetCheck(LimitReached("cost", f"stopped{where} after ${usage.cost_usd:.4f}: max_cost_usd="
                                                f"{self.max_cost_usd} reached"), warnings, tuple(unpriced))
            if unpriced:
                return BudgetCheck(None, warnings, tuple(unpriced))
        if self.max_context_chars is not None and usage.context_chars >= self.max_context_chars:
            return BudgetCheck(LimitReached("context_limit", f"stopped{where}: role histories hold "
                                            f"{usage.context_chars} chars, max_context_chars={self.max_context_chars}"))
        return _GO

    def time_left(self, elapsed: float) -> float | None:
        """Seconds left of `timeout_s` after `elapsed` (0 once spent); None without a time limit."""
        return None if self.timeout_s is None else max(0.0, self.timeout_s - elapsed)

    def out_of_time(self, elapsed: float) -> bool:
        """Whether `elapsed` seconds have spent `timeout_s`."""
        return self.timeout_s is not None and elapsed >= self.timeout_s

    def timed_out(self, elapsed: float, where: str = "") -> LimitReached:
        """The stop at the deadline, for a call given up there after `elapsed` seconds."""
        return LimitReached("timeout", f"stopped{where} after {elapsed:.1f}s: timeout_s={self.timeout_s} reached")

    def wait_allowed(self, seconds: float, elapsed: float, before: str) -> LimitReached | None:
        """None when a wait of `seconds` (before a retry) ends before the run's time is up; else the stop that
        says there is no time for it (`before`: what the wait is for)."""
        left = self.time_left(elapsed)
        if left is None or seconds < left:
            return None
        return LimitReached("timeout", f"{before} (the wait before it: {seconds:.1f}s)")

    def allows_iteration(self, iteration: int) -> bool:
        """Whether the run may start its `iteration`-th iteration (counting from 1)."""
        return iteration <= self.max_iterations

    def context_warning(self, chars: int) -> str | None:
        """What to warn about, once, when the role histories hold `chars`: that they near `max_context_chars`."""
        limit = self.max_context_chars
        if limit is None or chars < self.context_warning_ratio * limit:
            return None
        return f"role histories hold {chars} chars, {chars / limit:.0%} of max_context_chars={limit}"

    def within(self, usage: Usage, time_left: float | None, where: str, **limits: object) -> Budget:
        """What is left of this budget, after `usage` and with `time_left` seconds, for a run nested in the one
        it bounds (a DSL loop form's run), with its own `limits` (its iterations); `LimitReached` (its message
        starting with `where`) when nothing is left of a limit."""
        if self.timeout_s is not None:
            limits["timeout_s"] = max(time_left or 0.0, 0.001)
        for name, spent, reason, what in (("max_lm_calls", usage.lm_calls, "lm_calls", "LM calls"),
                                          ("max_tokens", usage.tokens, "tokens", "tokens"),
                                          ("max_cost_usd", usage.cost_usd or 0.0, "cost", "budget")):
            limit = getattr(self, name)
            if limit is not None:
                if limit - spent <= 0:
                    raise LimitReached(reason, f"{where}: no {what} left for the loop")
                limits[name] = limit - spent
        return self.override(**limits)


# The limits' names, in the constructor's order: what `override` takes (read once, not on every call: a nested run's
# budget is made on every run of a DSL loop form).
_LIMITS = tuple(dict.fromkeys(field.name for field in dataclasses.fields(Budget)))


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """What `Budget.check` found: the limit reached, if any (`stop`, for the runtime to raise), what to warn
    about, and the models of unknown price it warned of (`unpriced`, so that they are warned of once)."""

    stop: LimitReached | None = None
    warnings: tuple[str, ...] = ()
    unpriced: tuple[str, ...] = ()


_GO = BudgetCheck()  # no limit reached, nothing to warn about: the common answer, made once


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
    """Attempts of a call that fails transiently, the first included (>= 1)."""

    backoff_s: float = 1.0
    """Seconds to wait after the first failed attempt; the wait doubles after each next one."""

    max_backoff_s: float = 30.0
    """The longest backoff (`math.inf`: no cap); a server's Retry-After may ask for longer, and is obeyed."""

    parse_retries: int = 1
    """How many times an answer that cannot be parsed is asked for again."""

    parse_retry_temperature: float = 0.7
    """The temperature such a re-ask is sent at (a new rollout: the same request would get the same answer)."""

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
    # bool is an int subclass, but True iterations or attempts is always a mistake. A plain int is answered
    # before the ABC's check, which costs ten times more (a budget is built on every run of a DSL loop form).
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def _is_number(value: object) -> bool:
    if type(value) is int:
        return True
    if type(value) is float:
        return not math.isnan(value)
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


def _is_finite(value: object) -> bool:
    return _is_number(value) and math.isfinite(value)


def _require(owner: object, name: str, expected: str, valid: bool, hint: str = "") -> None:
    if not valid:
        value = getattr(owner, name)
        raise ConfigurationError(
            f"{type(owner).__name__}.{name} must be {expected}, got {value!r:.100} ({type(value).__name__})"
            + (f"; {hint}" if hint else ""))

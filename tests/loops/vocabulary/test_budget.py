import math
import re

import pytest

from loops import Budget, ConfigurationError, RetryPolicy
from loops.errors import LimitReached
from loops.vocabulary.usage import Usage

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(("limits", "message"), [
    ({"max_iterations": 1001}, "Budget.max_iterations must be an int from 0 to 1000, got 1001 (int); a loop that"),
    ({"max_iterations": -1}, "Budget.max_iterations must be an int from 0 to 1000, got -1 (int)"),
    ({"max_iterations": True}, "Budget.max_iterations must be an int from 0 to 1000, got True (bool)"),
    ({"max_iterations": 2.5}, "Budget.max_iterations must be an int from 0 to 1000, got 2.5 (float)"),
    ({"max_iterations": 3.0}, "Budget.max_iterations must be an int from 0 to 1000, got 3.0 (float)"),
    ({"max_iterations": "3"}, "Budget.max_iterations must be an int from 0 to 1000, got '3' (str)"),
    ({"max_iterations": None}, "Budget.max_iterations must be an int from 0 to 1000, got None"),
    ({"timeout_s": 0}, "Budget.timeout_s must be a positive, finite number of seconds, or None (no limit), got 0"),
    ({"timeout_s": -5}, "Budget.timeout_s must be a positive, finite number of seconds, or None .*, got -5 "),
    ({"timeout_s": NAN}, "Budget.timeout_s must be .*, got nan (float)"),
    ({"timeout_s": INF}, "Budget.timeout_s must be a positive, finite number .*, or None (no limit), got inf"),
    ({"timeout_s": "300"}, "Budget.timeout_s must be .*, got '300' (str)"),
    ({"timeout_s": False}, "Budget.timeout_s must be .*, got False (bool)"),
    ({"max_lm_calls": -3}, "Budget.max_lm_calls must be a positive int, or None (no limit), got -3 (int)"),
    ({"max_lm_calls": 0}, "Budget.max_lm_calls must be a positive int, or None (no limit), got 0 (int)"),
    ({"max_lm_calls": 3.0}, "Budget.max_lm_calls must be a positive int, or None (no limit), got 3.0 (float)"),
    ({"max_lm_calls": INF}, "Budget.max_lm_calls must be a positive int, or None (no limit), got inf (float)"),
    ({"max_lm_calls": True}, "Budget.max_lm_calls must be a positive int, or None (no limit), got True (bool)"),
    ({"max_context_chars": NAN}, "Budget.max_context_chars must be a positive int, or None (no limit), got nan"),
    ({"max_context_chars": 1e5}, "Budget.max_context_chars must be a positive int, .*, got 100000.0 (float)"),
    ({"max_tokens": 2.5}, "Budget.max_tokens must be a positive int, or None (no limit), got 2.5 (float)"),
    ({"max_tokens": "1000"}, "Budget.max_tokens must be a positive int, or None (no limit), got '1000' (str)"),
    ({"max_cost_usd": NAN}, "Budget.max_cost_usd must be a positive, finite number of US dollars, or None .*, got nan"),
    ({"max_cost_usd": INF}, "Budget.max_cost_usd must be .*, got inf (float)"),
    ({"max_cost_usd": -1}, "Budget.max_cost_usd must be .*, got -1 (int)"),
    ({"context_warning_ratio": 1.5}, "Budget.context_warning_ratio must be a number in (0, 1], got 1.5 (float)"),
    ({"context_warning_ratio": 0}, "Budget.context_warning_ratio must be a number in (0, 1], got 0 (int)"),
    ({"context_warning_ratio": NAN}, "Budget.context_warning_ratio must be a number in (0, 1], got nan (float)"),
    ({"context_warning_ratio": None}, "Budget.context_warning_ratio must be a number in (0, 1], got None"),
])
def test_bad_limits_are_refused_naming_the_field_the_value_and_what_is_expected(limits, message):
    with pytest.raises(ConfigurationError, match=_literal(message)):
        Budget(**limits)


@pytest.mark.parametrize(("settings", "message"), [
    ({"attempts": 0}, "RetryPolicy.attempts must be an int >= 1, got 0 (int)"),
    ({"attempts": 2.0}, "RetryPolicy.attempts must be an int >= 1, got 2.0 (float)"),
    ({"attempts": True}, "RetryPolicy.attempts must be an int >= 1, got True (bool)"),
    ({"attempts": "3"}, "RetryPolicy.attempts must be an int >= 1, got '3' (str)"),
    ({"attempts": INF}, "RetryPolicy.attempts must be an int >= 1, got inf (float)"),
    ({"parse_retries": 1.0}, "RetryPolicy.parse_retries must be an int >= 0, got 1.0 (float)"),
    ({"parse_retries": -1}, "RetryPolicy.parse_retries must be an int >= 0, got -1 (int)"),
    ({"parse_retries": None}, "RetryPolicy.parse_retries must be an int >= 0, got None (NoneType)"),
    ({"backoff_s": -1}, "RetryPolicy.backoff_s must be a finite number of seconds >= 0, got -1 (int)"),
    ({"backoff_s": NAN}, "RetryPolicy.backoff_s must be a finite number of seconds >= 0, got nan (float)"),
    ({"backoff_s": INF}, "RetryPolicy.backoff_s must be a finite number of seconds >= 0, got inf (float)"),
    ({"backoff_s": "1"}, "RetryPolicy.backoff_s must be a finite number of seconds >= 0, got '1' (str)"),
    ({"max_backoff_s": NAN}, "RetryPolicy.max_backoff_s must be a number of seconds >= 0 (math.inf: no cap), got nan"),
    ({"max_backoff_s": -INF}, "RetryPolicy.max_backoff_s must be a number of seconds >= 0 .*, got -inf (float)"),
    ({"parse_retry_temperature": -0.1}, "RetryPolicy.parse_retry_temperature must be a finite number >= 0, got -0.1"),
    ({"parse_retry_temperature": NAN}, "RetryPolicy.parse_retry_temperature must be a finite number >= 0, got nan"),
    ({"parse_retry_temperature": True}, "RetryPolicy.parse_retry_temperature must be a finite number >= 0, got True"),
])
def test_bad_retry_settings_are_refused_naming_the_field_the_value_and_what_is_expected(settings, message):
    with pytest.raises(ConfigurationError, match=_literal(message)):
        RetryPolicy(**settings)


def _literal(message: str) -> str:
    """`message` as a regex in which only `.*` is special."""
    return ".*".join(map(re.escape, message.split(".*")))


@pytest.mark.parametrize("max_iterations", [0, 1, 1000])
def test_the_boundaries_are_allowed(max_iterations):
    assert Budget(max_iterations=max_iterations).max_iterations == max_iterations


def test_what_is_allowed():
    budget = Budget(timeout_s=0.5, max_lm_calls=1, max_context_chars=1, context_warning_ratio=1)
    assert (budget.timeout_s, budget.max_lm_calls, budget.context_warning_ratio) == (0.5, 1, 1)
    assert Budget(timeout_s=None, max_lm_calls=None, max_context_chars=None).timeout_s is None
    policy = RetryPolicy(attempts=1, backoff_s=0, max_backoff_s=math.inf, parse_retries=0, parse_retry_temperature=0)
    assert policy.delay_s(3) == 0


def test_defaults_and_per_call_overrides():
    budget = Budget()
    assert (budget.max_iterations, budget.timeout_s, budget.max_lm_calls, budget.max_context_chars) == (
        3, 300.0, None, 256 * 1024)
    assert budget.override() is budget
    changed = budget.override(max_iterations=7, timeout_s=5)
    assert (changed.max_iterations, changed.timeout_s, changed.max_lm_calls) == (7, 5, None)
    with pytest.raises(AttributeError):
        budget.max_iterations = 4  # frozen: one module instance serves concurrent runs


@pytest.mark.parametrize("name", ["timeout_s", "max_lm_calls", "max_context_chars", "max_tokens", "max_cost_usd"])
def test_none_in_an_override_means_no_limit_as_in_the_constructor(name):
    limited = Budget(timeout_s=10, max_lm_calls=5, max_context_chars=1000, max_tokens=100, max_cost_usd=0.5)
    assert getattr(limited.override(**{name: None}), name) is None
    assert limited.override(**{name: None}) == Budget(**{**_limits(limited), name: None})


def test_an_override_replaces_only_the_names_it_is_given():
    limited = Budget(max_iterations=7, timeout_s=10, max_lm_calls=5)
    assert limited.override(max_lm_calls=None) == Budget(max_iterations=7, timeout_s=10, max_lm_calls=None)


def test_an_override_cannot_lift_the_iteration_limit():
    with pytest.raises(ConfigurationError, match=_literal("max_iterations always has a limit; give an int 0..1000")):
        Budget().override(max_iterations=None)
    with pytest.raises(ConfigurationError, match=r"context_warning_ratio cannot be None; give a number in \(0, 1\]"):
        Budget().override(context_warning_ratio=None)


def test_an_override_checks_its_values_like_the_constructor():
    with pytest.raises(ConfigurationError, match=r"Budget\.timeout_s must be .*, got nan"):
        Budget().override(timeout_s=NAN)
    with pytest.raises(ConfigurationError, match=r"Budget\.max_iterations must be an int from 0 to 1000, got 2\.5"):
        Budget().override(max_iterations=2.5)


def test_unknown_override_names_are_refused_listing_the_known_ones():
    with pytest.raises(ConfigurationError, match=r"unknown budget limit\(s\) \['max_iteration'\]; known: "
                                                 r"\['max_iterations', 'timeout_s', 'max_lm_calls', "):
        Budget().override(max_iteration=7, timeout_s=None)


def test_retry_backoff_doubles_up_to_its_cap():
    policy = RetryPolicy(backoff_s=1, max_backoff_s=5)
    assert [policy.delay_s(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    assert policy.delay_s(10_000) == 5, "many attempts do not overflow a float"


def _limits(budget: Budget) -> dict:
    return {name: getattr(budget, name) for name in budget.__dataclass_fields__}


# --- Budget.check: every limit, checked on a Usage value, returned rather than acted on ---------------------------


@pytest.mark.parametrize(("limits", "usage", "elapsed", "reason", "message"), [
    ({"timeout_s": 10}, Usage(), 10.0, "timeout", "stopped in critic after 10.0s: timeout_s=10 reached"),
    ({"max_lm_calls": 3}, Usage(requests=2, replayed=1), 0, "lm_calls", "stopped in critic after 3 LM calls"),
    ({"max_tokens": 100}, Usage(tokens=100), 0, "tokens", "stopped in critic after 100 tokens: max_tokens=100"),
    ({"max_cost_usd": 0.5}, Usage(cost_usd=0.5), 0, "cost", "stopped in critic after $0.5000: max_cost_usd=0.5"),
    ({"max_context_chars": 50}, Usage(context_chars=60), 0, "context_limit", "role histories hold 60 chars"),
])
def test_budget_check_returns_the_limit_a_usage_reached(limits, usage, elapsed, reason, message):
    checked = Budget(**limits).check(usage, elapsed, " in critic")
    assert isinstance(checked.stop, LimitReached) and checked.stop.reason == reason
    assert message in str(checked.stop) and checked.warnings == ()
    assert Budget(**limits).check(Usage(), 0).stop is None


def test_budget_check_warns_of_each_unpriced_model_once_and_leaves_the_warning_to_the_run():
    budget, usage = Budget(max_cost_usd=1.0), Usage(unpriced=frozenset({"m1", "m2"}))
    first = budget.check(usage, 0)
    assert first.stop is None and first.unpriced == ("m1", "m2")
    assert first.warnings == ("no price is known for ['m1', 'm2']: their requests count as free against max_cost_usd",)
    assert budget.check(usage, 0, warned=first.unpriced).warnings == ()
    assert Budget().check(usage, 0).warnings == ()  # no cost budget: nothing to warn of


def test_a_nested_runs_budget_is_what_is_left_and_nothing_left_is_a_limit():
    budget = Budget(max_lm_calls=5, max_tokens=100, timeout_s=60)
    left = budget.within(Usage(requests=2, replayed=1, tokens=40), 12.5, "1:1", max_iterations=2)
    assert (left.max_iterations, left.max_lm_calls, left.max_tokens, left.timeout_s) == (2, 2, 60, 12.5)
    with pytest.raises(LimitReached, match=r"^1:1: no LM calls left for the loop$"):
        budget.within(Usage(requests=5), 12.5, "1:1", max_iterations=2)


def test_the_other_limits_are_asked_of_the_budget_too():
    budget = Budget(max_iterations=2, timeout_s=10, max_context_chars=100, context_warning_ratio=0.5)
    assert [budget.allows_iteration(n) for n in (1, 2, 3)] == [True, True, False]
    assert (budget.time_left(4), budget.time_left(11), Budget(timeout_s=None).time_left(5)) == (6, 0, None)
    assert budget.out_of_time(10) and not budget.out_of_time(9.9)
    assert budget.context_warning(49) is None
    assert budget.context_warning(50) == "role histories hold 50 chars, 50% of max_context_chars=100"
    assert budget.wait_allowed(5.9, 4, "retry") is None
    late = budget.wait_allowed(6, 4, "stopped: no time left to retry")
    assert late.reason == "timeout" and str(late) == "stopped: no time left to retry (the wait before it: 6.0s)"

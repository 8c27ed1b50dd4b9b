import pytest

from loops import Budget, ConfigurationError, RetryPolicy


@pytest.mark.parametrize(("limits", "message"), [
    ({"max_iterations": 1001}, "between 0 and 1000"),
    ({"max_iterations": -1}, "between 0 and 1000"),
    ({"max_iterations": True}, "must be an int"),
    ({"max_iterations": 2.5}, "must be an int"),
    ({"timeout_s": 0}, "timeout_s must be a positive number or None"),
    ({"max_lm_calls": -3}, "max_lm_calls must be a positive number or None"),
    ({"max_context_chars": float("nan")}, "max_context_chars must be a positive number"),
    ({"context_warning_ratio": 1.5}, "context_warning_ratio must be in"),
])
def test_bad_limits_are_refused_with_the_rule(limits, message):
    with pytest.raises(ConfigurationError, match=message):
        Budget(**limits)


@pytest.mark.parametrize("max_iterations", [0, 1, 1000])
def test_the_boundaries_are_allowed(max_iterations):
    assert Budget(max_iterations=max_iterations).max_iterations == max_iterations


def test_defaults_and_per_call_overrides():
    budget = Budget()
    assert (budget.max_iterations, budget.timeout_s, budget.max_lm_calls, budget.max_context_chars) == (
        3, 300.0, None, 256 * 1024)
    assert budget.override(max_iterations=None) is budget
    assert budget.override(max_iterations=7, timeout_s=5).timeout_s == 5
    with pytest.raises(ConfigurationError, match="unknown budget limit"):
        budget.override(max_iteration=7)
    with pytest.raises(AttributeError):
        budget.max_iterations = 4  # frozen: one module instance serves concurrent runs


def test_retry_backoff_doubles_up_to_its_cap():
    policy = RetryPolicy(backoff_s=1, max_backoff_s=5)
    assert [policy.delay_s(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    with pytest.raises(ConfigurationError):
        RetryPolicy(attempts=0)

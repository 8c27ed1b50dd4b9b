"""`Usage`: what a run spent, a value with arithmetic (a call's share is `after - before`)."""

from loops.vocabulary.usage import Usage


def test_a_calls_share_is_the_difference_of_the_runs_usage_after_and_before_it():
    before = Usage(requests=2, replayed=1, cached=1, tokens=30, cost_usd=0.25, context_chars=100)
    after = Usage(requests=5, replayed=1, cached=3, tokens=80, cost_usd=0.75, context_chars=140,
                  unpriced=frozenset({"m"}))
    share = after - before
    assert share == Usage(requests=3, replayed=0, cached=2, tokens=50, cost_usd=0.5, context_chars=140,
                          unpriced=frozenset({"m"}))
    assert before + share == after
    assert (after.lm_calls, share.lm_calls) == (6, 3)


def test_an_unknown_cost_stays_unknown_and_an_unknown_start_counts_from_zero():
    assert (Usage(cost_usd=None) - Usage(cost_usd=0.5)).cost_usd is None
    assert (Usage(cost_usd=0.5) - Usage(cost_usd=None)).cost_usd == 0.5
    assert (Usage(cost_usd=0.5) + Usage(cost_usd=None)).cost_usd == 0.5


def test_incr_adds_a_nested_runs_usage_in_place():
    outer = Usage(requests=1, tokens=10)
    outer.incr(requests=2, replayed=3, cached=1)
    outer.incr(Usage(tokens=5, cost_usd=0.1, unpriced=frozenset({"m"})))
    assert outer == Usage(requests=3, replayed=3, cached=1, tokens=15, cost_usd=0.1, unpriced=frozenset({"m"}))

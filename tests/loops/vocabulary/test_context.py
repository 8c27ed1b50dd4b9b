"""The run's context (`loops.vocabulary.context`) as every LM request meets it, against a loopback server that counts
what it receives (`FaultyOpenAI`): the deadline bounds every engine, every limit is checked before every
request (retries, re-asks, JSON fallbacks and schema re-sends alike), and `lm_calls` is the requests sent."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import dspy
import pytest
from dspy.utils.callback import BaseCallback

import loops.lm.server
from loops import CreatorCriticIterator, RetryPolicy
from loops.lm import ServerLM, resolve
from tests.loops.fake_openai import faulty_openai

ROOT = Path(__file__).resolve().parents[3]
QUICK = RetryPolicy(backoff_s=0.01)
ENGINES = ["server", "dspy"]  # loops' ServerEngine (run-aware), DSPy's own engine (the runtime asks for it)


@pytest.fixture
def server():
    """A `FaultyOpenAI`; at the end, the connections of the LMs `model` made are closed, once the requests
    given up at a deadline (still waiting in their worker threads) have had their answers."""
    with faulty_openai() as running:
        yield running
    waited = time.monotonic() + 5
    while any(worker.name == "loops-deadline (busy)" for worker in threading.enumerate()) and time.monotonic() < waited:
        time.sleep(0.01)
    for lm in _made:
        (lm.engine.close if isinstance(lm, ServerLM) else lm.close)()
    _made.clear()


@pytest.fixture(autouse=True)
def fresh_server_knowledge(monkeypatch):
    """What `ServerEngine` learnt of a server is kept per address; a later test's server may get the same port."""
    monkeypatch.setattr(loops.lm.server, "_schema_spelling", {})


_made: list[dspy.BaseLM] = []


def model(engine: str, server, tenant: str = "t", adapter: str = "json") -> dspy.BaseLM:
    """An LM on the loopback server, uncached: through loops' server engine or DSPy's own."""
    if engine == "server":
        lm = resolve("openai/x", api_base=server.base_url(tenant), adapter=adapter)
        lm.cache = False
    else:
        lm = resolve(dspy.LM("openai/x", api_base=server.base_url(tenant), api_key="k", num_retries=0, cache=False),
                     adapter=adapter)
    _made.append(lm)
    return lm


def run(lm: dspy.BaseLM, mode: str, requirements: str = "a haiku", **options):
    module = CreatorCriticIterator(max_iterations=2, retry=options.pop("retry", QUICK))
    with dspy.context(lm=lm):
        if mode == "forward":
            return module(requirements=requirements, **options)
        return asyncio.run(_acall(module, lm, requirements=requirements, **options))


async def _acall(module, lm, **inputs):
    try:
        return await module.acall(**inputs)
    finally:
        if not isinstance(lm, ServerLM):  # DSPy's async pools are closed on their own event loop
            await lm.aclose()


# --- 1. the deadline bounds every engine ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["forward", "aforward"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_request_hanging_past_the_deadline_is_given_up_at_it_on_every_engine(server, engine, mode):
    server.faults[("t", 2)] = "hang"  # the critic's request: no answer for 30 s
    lm = model(engine, server)

    started = time.monotonic()
    result = run(lm, mode, timeout_s=1.5)
    elapsed = time.monotonic() - started

    assert elapsed < 1.5 + 3, f"the run overran its 1.5 s timeout by {elapsed - 1.5:.1f}s"
    assert (result.stop_reason, result.final) == ("timeout", "a draft")
    assert result.trace[-1].role == "critic" and result.trace[-1].error == "abandoned at the deadline"
    assert result.lm_calls == server.received["t"] == 2  # the request given up was sent: it counts


def test_a_sync_runs_calls_on_dspys_engine_keep_one_worker_thread(server):
    """A sync run gives each LM call of DSPy's engine (which cannot stop itself) to a deadline worker
    (`loops.vocabulary.context.within_deadline`); the worker is idle again before its caller goes on, so the run's calls
    keep one thread rather than wake others (each new thread builds DSPy's per-thread state again), every one
    counted."""
    threads: list[int] = []

    class Where(BaseCallback):
        def on_lm_start(self, call_id, instance, inputs):
            threads.append(threading.get_ident())

    lm = model("dspy", server)
    with dspy.context(callbacks=[Where()]):
        result = run(lm, "forward")
        again = run(lm, "forward")

    assert {result.stop_reason, again.stop_reason} <= {"approved", "max_iterations"}  # ended by the loop itself
    assert result.lm_calls + again.lm_calls == server.received["t"] == len(threads) >= 4
    assert len(set(threads)) == 1 and threading.get_ident() not in threads


def test_loops_refine_against_a_hanging_server_ends_at_its_timeout(server):
    server.hang_s = 60
    server.faults[("t", 1)] = "hang"

    started = time.monotonic()
    finished = subprocess.run(
        [sys.executable, "-m", "loops", "refine", "A haiku", "--model", "openai/x", "--api-base", server.base_url(),
         "--timeout", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    elapsed = time.monotonic() - started

    assert finished.returncode == 1, finished.stderr
    assert "stop reason: timeout" in finished.stdout
    assert "LM calls: 1 " in finished.stdout
    assert elapsed < 30, f"loops refine --timeout 3 took {elapsed:.1f}s against a server hanging 60 s"


# --- 2. every limit, before every request ------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_the_token_budget_holds_before_a_parse_retry(server, engine):
    # Each request reports 10 tokens. The creator's answer and its JSON fallback do not parse (20 tokens): the
    # re-ask at a little temperature would be a third request, at 20 tokens of max_tokens=20.
    server.faults.update({("t", 1): "unparseable", ("t", 2): "unparseable"})

    result = run(model(engine, server, adapter="chat"), "forward", max_tokens=20)

    assert (result.stop_reason, result.tokens, result.lm_calls, server.received["t"]) == ("tokens", 20, 2, 2)
    assert result.trace[-1].error and result.trace[-1].lm_calls == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_the_json_fallback_is_a_request_the_budget_checks_first(server, engine):
    server.faults[("t", 1)] = "unparseable"  # the creator's answer in ChatAdapter's format does not parse

    result = run(model(engine, server, adapter="chat"), "forward", max_lm_calls=1)

    assert (result.stop_reason, result.lm_calls, server.received["t"]) == ("lm_calls", 1, 1)
    assert result.warnings[-1] == "stopped after 1 LM calls: max_lm_calls=1 reached"


@pytest.mark.parametrize("mode", ["forward", "aforward"])
def test_a_schema_re_send_is_a_request_the_budget_checks_first(server, mode):
    server.faults[("t", 1)] = "schema_refusal"  # the server refuses json_schema: the engine would send it again

    result = run(model("server", server), mode, max_lm_calls=1)

    assert (result.stop_reason, result.lm_calls, server.received["t"]) == ("lm_calls", 1, 1)


# --- 3. lm_calls is the requests this process sent ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["forward", "aforward"])
@pytest.mark.parametrize("fault", ["schema_refusal", "server_error", "truncated", "malformed", "unparseable"])
def test_lm_calls_is_what_the_server_received_whatever_the_fault(server, fault, mode):
    server.faults[("t", 2)] = fault

    result = run(model("server", server), mode)

    assert result.stop_reason == "max_iterations"
    assert result.lm_calls == server.received["t"] == 5  # four role calls, one of them sent twice
    assert sum(step.lm_calls for step in result.trace) == 5


@pytest.mark.parametrize("engine", ENGINES)
def test_an_answer_from_dspys_cache_is_reported_as_cached_not_as_a_request(server, engine):
    lm = model(engine, server)
    lm.cache = True  # in this test session's own cache directory (tests/conftest.py)
    asked = f"a haiku, cached through the {engine} engine"  # no other test's request is in the cache

    first, again = run(lm, "forward", asked), run(lm, "forward", asked)

    assert (first.lm_calls, first.cached) == (4, 0)
    assert (again.lm_calls, again.cached, server.received["t"]) == (0, 4, 4)
    assert [step.cached for step in again.trace] == [1, 1, 1, 1]


def test_a_resumed_run_is_answered_by_its_checkpoint_not_by_dspys_cache(server, tmp_path):
    lm = model("server", server)
    lm.cache = True
    module = CreatorCriticIterator(max_iterations=2, checkpoint=tmp_path / "runs.db")
    asked = "a haiku, resumed with the cache on"  # no other test's request is in the cache
    with dspy.context(lm=lm):
        first = module(requirements=asked, run_id="r1")
        resumed = module(requirements=asked, run_id="r1")  # the same run: replayed from its record
        repeated = module(requirements=asked)  # another run, the same questions: DSPy's cache answers

    assert server.received["t"] == first.lm_calls == 4
    assert (resumed.lm_calls, resumed.replayed, resumed.cached) == (0, 4, 0)
    assert all(step.replayed for step in resumed.trace)
    assert (repeated.lm_calls, repeated.replayed, repeated.cached) == (0, 0, 4)
    assert resumed.final == repeated.final == first.final


# --- 9. a server's Retry-After, within the run's time left -------------------------------------------------


@pytest.mark.parametrize("mode", ["forward", "aforward"])
@pytest.mark.parametrize(("fault", "at_least"), [("rate_limited", 2.9), ("rate_limited_date", 1.9)])
def test_a_429s_retry_after_is_honoured_in_seconds_and_as_an_http_date(server, fault, at_least, mode):
    server.retry_after_s = 3  # an HTTP date has whole seconds: it asks for 2 to 3
    server.faults[("t", 2)] = fault
    lm = model("server", server)

    started = time.monotonic()
    result = run(lm, mode, retry=RetryPolicy(backoff_s=0.01))
    elapsed = time.monotonic() - started

    assert elapsed >= at_least, f"asked again after {elapsed:.2f}s, before the server allowed"
    assert (result.stop_reason, result.lm_calls, server.received["t"]) == ("max_iterations", 5, 5)
    assert result.trace[1].attempts == 2


def test_a_retry_after_beyond_the_time_left_ends_the_run_at_once(server):
    server.retry_after_s = 60
    server.faults[("t", 2)] = "rate_limited"
    lm = model("server", server)

    started = time.monotonic()
    result = run(lm, "forward", retry=RetryPolicy(backoff_s=0.01), timeout_s=20)
    elapsed = time.monotonic() - started

    assert elapsed < 10, "waited for a retry the run had no time for"
    assert (result.stop_reason, result.lm_calls, server.received["t"]) == ("timeout", 2, 2)
    assert result.warnings[-1] == ("stopped in critic: no time left to retry after LMRateLimitError: [openai/x] HTTP "
                                   "429: slow down (the wait before it: 60.0s)")


# --- 12. the budget, all of it, before every retry -------------------------------------------------------------


def test_the_cost_budget_is_checked_before_a_parse_retry():
    import litellm

    from tests.scripted import scripted_lm

    prompt, completion = litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=10, completion_tokens=5)
    lm = scripted_lm(["no fields", "no fields either", "never asked"], name="openai/gpt-4o-mini")
    module = CreatorCriticIterator(retry=QUICK)

    with dspy.context(lm=lm):  # the answer and its JSON fallback do not parse, and spend the budget
        result = module(requirements="a haiku", max_cost_usd=(prompt + completion) * 2)

    assert (result.stop_reason, result.lm_calls, len(lm.engine.requests)) == ("cost", 2, 2)
    assert result.warnings[-1].startswith("stopped in creator before a retry after $")


# --- 13. a role's LM is gated at the LM, with DSPy's callback machinery off ----------------------------------


@pytest.mark.parametrize("mode", ["forward", "aforward"])
def test_a_role_with_an_lm_of_its_own_is_counted_limited_and_timed_at_its_lm(server, mode):
    # The critic's predictor has its own DSPy LM (on tenant "c"); the other roles use the context's (tenant "t").
    module = CreatorCriticIterator(max_iterations=2, retry=QUICK)
    module.critic.set_lm(model("dspy", server, tenant="c"))
    with dspy.context(lm=model("dspy", server)):
        counted = module(requirements="a haiku") if mode == "forward" else asyncio.run(
            _acall(module, module.critic.lm, requirements="a haiku"))
    assert (counted.stop_reason, counted.lm_calls) == ("max_iterations", 4)
    assert (server.received["t"], server.received["c"]) == (2, 2)
    assert [step.lm_calls for step in counted.trace] == [1, 1, 1, 1]

    with dspy.context(lm=model("dspy", server, tenant="u")):
        limited = module(requirements="a haiku", max_lm_calls=1)
    assert (limited.stop_reason, limited.lm_calls, server.received["u"], server.received["c"]) == ("lm_calls", 1, 1, 2)

    server.faults[("c", 3)] = "hang"  # the critic's next request: no answer for 30 s
    started = time.monotonic()
    with dspy.context(lm=model("dspy", server, tenant="v")):
        timed = module(requirements="a haiku", timeout_s=1.5)
    assert time.monotonic() - started < 1.5 + 3
    assert (timed.stop_reason, timed.trace[-1].role, timed.trace[-1].error) == ("timeout", "critic",
                                                                               "abandoned at the deadline")
    assert timed.lm_calls == server.received["v"] + server.received["c"] - 2 == 2


def test_a_roles_lm_call_runs_with_no_dspy_callback_and_a_users_own_callback_still_sees_it():
    from dspy.utils.callback import BaseCallback

    from tests.scripted import scripted_lm

    seen: list[tuple] = []

    def answer(engine, request):
        seen.append(tuple(dspy.settings.callbacks))  # what DSPy's decorated calls of the role call ran with
        return {"reasoning": "r", "draft": "d", "accuracy_passed": True, "completeness_passed": True,
                "quality_passed": True, "feedback": "", "approved": True, "improved_draft": "d"}

    class Count(BaseCallback):
        def __init__(self):
            self.started = self.ended = 0

        def on_lm_start(self, call_id, instance, inputs):
            self.started += 1

        def on_lm_end(self, call_id, outputs, exception=None):
            self.ended += 1

    module = CreatorCriticIterator(max_iterations=2)
    with dspy.context(lm=scripted_lm(answer)):
        alone = module(requirements="a haiku")
    assert (alone.lm_calls, seen) == (2, [(), ()])  # DSPy's callback machinery stayed off

    users = Count()
    with dspy.context(lm=scripted_lm(answer), callbacks=[users]):
        watched = module(requirements="a haiku")
    assert watched.lm_calls == users.started == users.ended == 2
    assert seen[2:] == [(users,), (users,)]

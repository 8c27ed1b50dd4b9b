"""Long loops: bounded per-role context, checkpoint and resume by replay."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dspy
import pytest

import loops
import loops.lm
from loops import Budget, ConfigurationError, CreatorCriticIterator
from loops.errors import ReplayDivergence
from loops.recording import checkpoint
from loops.recording.checkpoint import MemoryStore
from tests.scripted import calls, scripted_lm

ROOT = Path(__file__).resolve().parents[2]


def verdict(ok=False):
    return {"accuracy_passed": ok, "completeness_passed": ok, "quality_passed": ok,
            "feedback": "" if ok else "more detail", "approved": ok}


def never_approving(engine, request):
    """Creator writes D0, the iterator increments the draft's number, the critic never approves."""
    system = request.system or ""
    if "CREATOR" in system:
        return {"reasoning": "plan", "draft": "D0"}
    if "CRITIC" in system:
        return verdict()
    drafts = re.findall(r"\[\[ ## draft ## \]\]\n(D\d+)", request.messages[-1].text or "")
    return {"improved_draft": f"D{int(drafts[-1][1:]) + 1}"}


def history_turns(request) -> int:
    """How many earlier turns a request carries (ChatAdapter renders each as a user/assistant pair)."""
    return (len(request.messages) - 1) // 2


@pytest.mark.parametrize("window", [0, 1, 3])
def test_a_window_keeps_exactly_the_last_k_turns_of_each_role(window):
    lm = scripted_lm(never_approving)
    module = CreatorCriticIterator(max_iterations=6, history_window=window)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = module(requirements="a slogan")
    critic_requests = [request for request in lm.engine.requests if "CRITIC" in (request.system or "")]
    assert [history_turns(request) for request in critic_requests] == [min(n, window) for n in range(6)]
    # What the critic saw last is exactly its last `window` turns, rendered as ChatAdapter renders them.
    turns = result.histories["critic"].messages
    shown = dspy.History(messages=turns[len(turns) - 1 - window:-1] if window else [])
    expected = dspy.ChatAdapter().format(module.critic.signature, demos=[],
                                         inputs={"requirements": "a slogan", "draft": turns[-1]["draft"],
                                                 "history": shown})
    assert [m["content"] for m in expected] == [critic_requests[-1].system,
                                                *(m.text for m in critic_requests[-1].messages)]


def test_a_window_per_role_and_no_window_by_default_for_hosted_models():
    lm = scripted_lm(never_approving)
    module = CreatorCriticIterator(max_iterations=4, history_window={"critic": 1})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        module(requirements="a slogan")
    by_role = {}
    for request in lm.engine.requests:
        role = next(name for name in ("CREATOR", "CRITIC", "ITERATOR") if name in request.system)
        by_role.setdefault(role, []).append(history_turns(request))
    assert by_role["CRITIC"] == [0, 1, 1, 1]
    assert by_role["ITERATOR"] == [0, 1, 2]


def test_a_summary_folds_the_older_turns_into_one():
    lm = scripted_lm(never_approving)
    module = CreatorCriticIterator(max_iterations=5, history_window=2, history_summary=True)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        module(requirements="a slogan")
    last_critic = [request for request in lm.engine.requests if "CRITIC" in request.system][-1]
    assert history_turns(last_critic) == 3  # the digest of turns 1-2, then turns 3 and 4
    assert "[2 earlier turn(s), condensed] D0 | D1" in last_critic.messages[0].text


def test_fifty_iterations_with_a_window_stay_under_the_context_limit():
    lm = scripted_lm(never_approving)
    budget = Budget(max_iterations=50, max_context_chars=3_000)
    without = CreatorCriticIterator(budget=budget, history_window=None)
    windowed = CreatorCriticIterator(budget=budget, history_window=2)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert without(requirements="a slogan").stop_reason == "context_limit"
        result = windowed(requirements="a slogan")
    assert (result.stop_reason, result.iterations, result.final) == ("max_iterations", 50, "D0")  # all alike: the first
    assert not any("max_context_chars" in warning for warning in result.warnings)


def test_the_embedded_model_gets_a_window_by_default():
    from loops.lm import EMBEDDED_HISTORY_WINDOW, local_lm
    from loops.vocabulary.profile import profile_of

    assert profile_of(local_lm()).history_window == EMBEDDED_HISTORY_WINDOW
    assert profile_of(scripted_lm([])).history_window is None


@pytest.mark.parametrize("window", [-1, 1.5, "3", True, {"critic": -2}])
def test_a_malformed_window_is_rejected(window):
    with pytest.raises(ConfigurationError, match="history_window"):
        CreatorCriticIterator(history_window=window)


# --- checkpoint and resume --------------------------------------------------------------------------

def steps(result):
    return [(step.role, step.iteration, step.inputs, step.outputs, step.attempts, step.lm_calls)
            for step in result.trace]


def test_a_finished_run_replays_without_any_lm_call():
    store = MemoryStore()
    module = CreatorCriticIterator(max_iterations=3, checkpoint=store)
    first_lm, second_lm = scripted_lm(never_approving), scripted_lm([])
    with dspy.context(lm=first_lm):
        first = module(requirements="a slogan", run_id="r1")
    with dspy.context(lm=second_lm):
        again = module(requirements="a slogan", run_id="r1")
    assert calls(second_lm) == 0
    assert (again.final, again.stop_reason, again.warnings, again.tokens) == (
        first.final, first.stop_reason, first.warnings, first.tokens)
    # This process sent nothing: every request the run needed was answered from the record.
    assert (again.lm_calls, again.replayed, first.replayed) == (0, first.lm_calls, 0)
    assert steps(again) == steps(first)
    assert all(step.replayed for step in again.trace) and not any(step.replayed for step in first.trace)
    assert [(run.run_id, run.calls, run.stop_reason) for run in store.runs()] == [("r1", 6, "max_iterations")]


def test_a_resumed_run_reads_each_record_once(monkeypatch):
    store = MemoryStore()
    with dspy.context(lm=scripted_lm(never_approving)):
        CreatorCriticIterator(max_iterations=3, checkpoint=store)(requirements="a slogan", run_id="r1")
    read, unpack = [], checkpoint.unpack
    monkeypatch.setattr(checkpoint, "unpack", lambda call: read.append(call.seq) or unpack(call))
    with dspy.context(lm=scripted_lm([])):
        again = CreatorCriticIterator(max_iterations=3, checkpoint=store)(requirements="a slogan", run_id="r1")
    assert (again.lm_calls, len(again.trace)) == (0, 6)
    assert read == [0, 1, 2, 3, 4, 5]


def test_a_checkpointed_run_hashes_each_calls_inputs_once(monkeypatch):
    hashed, stable_hash = [], checkpoint.stable_hash  # `hashed` keeps each value alive: no id is reused
    monkeypatch.setattr(checkpoint, "stable_hash", lambda value: hashed.append(value) or stable_hash(value))
    critic = loops.human(answer=lambda question: {"approved": False, "feedback": "more detail"})  # a person's call too
    with dspy.context(lm=scripted_lm(never_approving)):
        result = CreatorCriticIterator(max_iterations=2, critic=critic, checkpoint=MemoryStore())(
            requirements="a slogan", run_id="r1")
    assert [step.human for step in result.trace] == [False, True, False, True]
    assert len(hashed) >= len(result.trace)
    assert len({id(value) for value in hashed}) == len(hashed)


def test_a_replay_that_diverges_stops_with_a_clear_error():
    store = MemoryStore()
    with dspy.context(lm=scripted_lm(never_approving)):
        CreatorCriticIterator(max_iterations=2, checkpoint=store)(requirements="a slogan", run_id="r1")
        with pytest.raises(ReplayDivergence, match="other inputs"):
            CreatorCriticIterator(max_iterations=2, checkpoint=store)(requirements="a poem", run_id="r1")
        with pytest.raises(ReplayDivergence, match="another program, a CreatorCriticIterator whose roles differ from "
                                                   "this one's: the critic was the built-in LLM role then and "
                                                   "is the phase test_a_replay_that_diverges_stops_with_a_clear_error."
                                                   "<locals>.<lambda> now; resume it with the options it was recorded "
                                                   "with"):
            CreatorCriticIterator(max_iterations=2, checkpoint=store,
                                  critic=lambda requirements, draft, iteration: False)(
                requirements="a slogan", run_id="r1")
        with pytest.raises(ReplayDivergence, match="whose roles differ from this one's: the critic's prompt .its "
                                                   "instructions or fields. differs"):
            changed = CreatorCriticIterator(max_iterations=2, checkpoint=store)
            changed.critic.signature = changed.critic.signature.with_instructions("Judge harshly.")
            changed(requirements="a slogan", run_id="r1")


def test_a_replay_whose_calls_differ_from_the_record_stops_at_that_call(monkeypatch):
    store = MemoryStore()
    with dspy.context(lm=scripted_lm(never_approving)):
        CreatorCriticIterator(max_iterations=2, checkpoint=store)(requirements="a slogan", run_id="r1")
    # The loop's own code changed between the runs: the iterator is now asked something else.
    import dataclasses

    from loops.vocabulary.contracts import judge

    def rewritten(*args, **options):
        return dataclasses.replace(judge(*args, **options), feedback="rewrite it all")

    monkeypatch.setattr("loops.patterns.creator_critic.judge", rewritten)
    with dspy.context(lm=scripted_lm([])), pytest.raises(ReplayDivergence, match="at call 3: the record has "
                                                                                "iterator, .* with other inputs"):
        CreatorCriticIterator(max_iterations=2, checkpoint=store)(requirements="a slogan", run_id="r1")


def test_run_id_without_a_checkpoint_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="needs a checkpoint"):
        CreatorCriticIterator(critic=lambda requirements, draft, iteration: True,
                              creator=lambda requirements, context, iteration: "D0",
                              iterator=lambda requirements, draft, feedback, iteration: draft)(
            requirements="x", run_id="r1")


_KILLED_RUN = textwrap.dedent("""
    import json, os, re, signal, sys
    import dspy
    from loops import CreatorCriticIterator, RetryPolicy
    from tests.loops.test_long_loops import never_approving
    from tests.scripted import scripted_lm

    kill_at, counter = int(sys.argv[2]), sys.argv[3]

    def answer(engine, request):
        with open(counter, "a") as out:
            out.write("request\\n")
        with open(counter) as lines:
            number = len(lines.readlines())  # across the killed and the resumed process
        if number == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if number == 4:
            return "not in any format"  # one unparseable answer: a retry and a warning to replay
        return never_approving(engine, request)

    module = CreatorCriticIterator(max_iterations=4, checkpoint=sys.argv[1], retry=RetryPolicy(backoff_s=0))
    with dspy.context(lm=scripted_lm(answer), adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        result = module(requirements="a slogan", run_id="r1")
    print(json.dumps({"final": result.final, "stop_reason": result.stop_reason, "lm_calls": result.lm_calls,
                      "replayed": result.replayed, "warnings": result.warnings,
                      "trace": [[s.role, s.iteration, s.outputs, s.attempts, s.lm_calls] for s in result.trace]}))
""")


def _run_killable(tmp_path, checkpoint, kill_at, counter):
    script = tmp_path / "killed_run.py"
    script.write_text(_KILLED_RUN)
    return subprocess.run([sys.executable, str(script), str(checkpoint), str(kill_at), str(counter)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_run_killed_with_sigkill_resumes_to_the_same_result_without_repeating_an_lm_call(tmp_path):
    uninterrupted = _run_killable(tmp_path, tmp_path / "whole.db", -1, tmp_path / "whole.count")
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    expected = json.loads(uninterrupted.stdout)
    requests_needed = len((tmp_path / "whole.count").read_text().splitlines())

    killed = _run_killable(tmp_path, tmp_path / "runs.db", 6, tmp_path / "runs.count")
    assert killed.returncode == -signal.SIGKILL
    resumed = _run_killable(tmp_path, tmp_path / "runs.db", -1, tmp_path / "runs.count")
    assert resumed.returncode == 0, resumed.stderr

    outcome = json.loads(resumed.stdout)
    sent, replayed = outcome.pop("lm_calls"), outcome.pop("replayed")
    assert outcome == {key: value for key, value in expected.items() if key not in ("lm_calls", "replayed")}
    # The killed request was made but never answered: it is the only one asked twice.
    assert len((tmp_path / "runs.count").read_text().splitlines()) == requests_needed + 1
    assert (expected["lm_calls"], expected["replayed"]) == (requests_needed, 0)
    # The resumed process counts what it sent; what the record answered is beside it: together, the run.
    assert (sent, replayed) == (4, 5) and sent + replayed == requests_needed
    assert expected["warnings"][0] == "critic: answer could not be parsed; asked again"


# --- token and cost budgets ---------------------------------------------------------------------------

def test_the_token_budget_stops_before_the_call_that_would_exceed_it():
    lm = scripted_lm(never_approving)  # every answer reports 10 input and 5 output tokens
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=10, budget=Budget(max_tokens=40))(requirements="a slogan")
    assert (result.stop_reason, result.lm_calls, result.tokens, calls(lm)) == ("tokens", 3, 45, 3)
    assert result.warnings[-1] == "stopped after 45 tokens: max_tokens=40 reached"


def test_the_cost_budget_uses_litellms_price_of_each_request():
    import litellm

    prompt, completion = litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=10, completion_tokens=5)
    per_request = prompt + completion
    lm = scripted_lm(never_approving, name="openai/gpt-4o-mini")  # scripted: priced, never sent anywhere
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=10, budget=Budget(max_cost_usd=per_request * 2.5))(
            requirements="a slogan")
    assert (result.stop_reason, result.lm_calls) == ("cost", 3)
    assert result.cost_usd == pytest.approx(per_request * 3)


def test_an_unpriced_model_counts_as_free_and_says_so_once():
    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=2, budget=Budget(max_cost_usd=1.0))(requirements="a slogan")
    assert result.stop_reason == "max_iterations"
    assert result.warnings.count("no price is known for ['scripted/test']: their requests count as free "
                                 "against max_cost_usd") == 1
    assert result.cost_usd == 0.0


def test_a_free_model_costs_0_with_no_cost_budget_and_a_price_not_looked_up_is_unknown():
    # The embedded model's requests cost nothing, said without a cost budget; LiteLLM's prices are looked up only
    # under one (its price map takes seconds to load), so a hosted model's cost is unknown (None) without it.
    with dspy.context(lm=scripted_lm(never_approving, name=loops.lm.MODEL)):
        free = CreatorCriticIterator(max_iterations=1)(requirements="a slogan")
    with dspy.context(lm=scripted_lm(never_approving, name="openai/gpt-4o-mini")):
        hosted = CreatorCriticIterator(max_iterations=1)(requirements="a slogan")

    assert (free.cost_usd, [step.cost_usd for step in free.trace]) == (0.0, [0.0, 0.0])
    assert (hosted.cost_usd, [step.cost_usd for step in hosted.trace]) == (None, [None, None])

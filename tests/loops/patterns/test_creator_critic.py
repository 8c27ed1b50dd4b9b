import asyncio
import re
import threading

import dspy
import pytest
from dspy.lm15 import RateLimitError, TransportError
from dspy.streaming import StreamListener, StreamResponse
from dspy.utils import exceptions as dspy_errors

from loops import Budget, ConfigurationError, CreatorCriticIterator, LimitReached, RetryPolicy, RoleFailed, observing
from loops.signatures import CriticSignature, IteratorSignature
from tests.scripted import Phase, calls, request_text, scripted_lm, streaming_lm

NO_WAIT = RetryPolicy(backoff_s=0)


def created(draft="draft 0"):
    return {"reasoning": "plan", "draft": draft}


def verdict(approved=False, passed=0, feedback="make it better"):
    """A critic answer with `passed` of the three criteria met (all three when approved)."""
    flags = [approved or passed > n for n in range(3)]
    return {
        "accuracy_passed": flags[0],
        "completeness_passed": flags[1],
        "quality_passed": flags[2],
        "feedback": "" if approved else feedback,
        "approved": approved,
    }


def revised(draft):
    return {"improved_draft": draft}


def loop_with(creator, critic, iterator, /, **options):
    """A module whose LLM roles each answer from their own scripted LM; a role given as a phase in
    `options` (its script None) is not an LM."""
    module = CreatorCriticIterator(retry=NO_WAIT, **options)
    lms = {}
    for role, script in (("creator", creator), ("critic", critic), ("iterator", iterator)):
        if script is not None:
            lms[role] = scripted_lm(script)
            getattr(module, role).set_lm(lms[role])
    return module, lms


def call_counts(lms):
    return {role: calls(lm) for role, lm in lms.items()}


def test_approved_by_the_first_critic():
    module, lms = loop_with([created("D0")], [verdict(approved=True)], [])

    result = module(requirements="a haiku about rain")

    assert (result.final, result.success, result.iterations) == ("D0", True, 1)
    assert (result.final_draft, result.approved) == (result.final, result.success)  # the aliases
    assert result.stop_reason == "approved"
    assert result.warnings == []
    assert call_counts(lms) == {"creator": 1, "critic": 1, "iterator": 0}
    assert [(step.role, step.iteration) for step in result.trace] == [("creator", 1), ("critic", 1)]
    assert result.best_attempt["iteration"] == 1 and result.best_attempt["draft"] == "D0"
    assert result.best_attempt["verdict"].approved is True


def test_approved_after_two_revisions():
    module, lms = loop_with(
        [created("D0")],
        [verdict(feedback="too long"), verdict(passed=2, feedback="wrong tone"), verdict(approved=True)],
        [revised("D1"), revised("D2")],
    )

    result = module(requirements="a haiku about rain")

    assert (result.final_draft, result.approved, result.iterations, result.stop_reason) == ("D2", True, 3, "approved")
    assert call_counts(lms) == {"creator": 1, "critic": 3, "iterator": 2}
    assert [(step.role, step.iteration) for step in result.trace] == [
        ("creator", 1), ("critic", 1), ("iterator", 2), ("critic", 2), ("iterator", 3), ("critic", 3)]
    iterator_inputs = [step.inputs for step in result.trace if step.role == "iterator"]
    assert [set(inputs) for inputs in iterator_inputs] == [{"requirements", "draft", "feedback"}] * 2
    assert [inputs["feedback"] for inputs in iterator_inputs] == [
        "Failed criteria: accuracy, completeness, quality.\ntoo long", "Failed criteria: quality.\nwrong tone"]
    assert [inputs["draft"] for inputs in iterator_inputs] == ["D0", "D1"]
    assert result.best_attempt["iteration"] == 3


def test_feedback_without_failed_criteria_reaches_the_iterator_unprefixed():
    # All three criteria passed, yet not approved: nothing to name, the feedback alone goes on.
    module, _ = loop_with([created("D0")], [{**verdict(passed=3), "feedback": "tighten it"}, verdict(approved=True)],
                          [revised("D1")])

    result = module(requirements="r")

    assert result.trace[2].inputs["feedback"] == "tighten it"
    assert result.final == "D1"


@pytest.mark.parametrize("max_iterations", [1, 2, 4])
def test_never_approved_stops_at_max_iterations_with_exact_calls(max_iterations):
    drafts = [f"D{n}" for n in range(max_iterations)]
    module, lms = loop_with(
        [created(drafts[0])],
        [verdict(passed=1) for _ in drafts],
        [revised(draft) for draft in drafts[1:]],
        max_iterations=max_iterations,
    )

    result = module(requirements="r")

    # Iteration 1 is creator + critic; each further one is iterator + critic.
    assert call_counts(lms) == {"creator": 1, "critic": max_iterations, "iterator": max_iterations - 1}
    assert result.iterations == max_iterations
    assert result.stop_reason == "max_iterations"
    assert result.approved is False
    assert result.final_draft == drafts[0]  # all judged equal: the earlier draft is kept (a revision must be better)
    assert result.best_attempt["iteration"] == 1
    assert result.warnings == [f"stopped at max_iterations={max_iterations}"]


def test_zero_iterations_run_nothing():
    module, lms = loop_with([], [], [], max_iterations=0)

    result = module(requirements="r")

    assert (result.final, result.success, result.best_attempt, result.iterations) == (None, False, None, 0)
    assert result.stop_reason == "max_iterations"
    assert result.trace == [] and result.lm_calls == 0
    assert call_counts(lms) == {"creator": 0, "critic": 0, "iterator": 0}


def test_never_approved_returns_the_draft_the_critic_judged_best():
    module, _ = loop_with(
        [created("D0")],
        [verdict(passed=1), verdict(passed=2), verdict(passed=0)],
        [revised("D1"), revised("D2")],
        max_iterations=3,
    )

    result = module(requirements="r")

    assert (result.final_draft, result.approved, result.stop_reason) == ("D1", False, "max_iterations")
    assert result.best_attempt["iteration"] == 2 and result.best_attempt["verdict"].completeness_passed


def test_max_iterations_can_be_overridden_per_call():
    module, lms = loop_with([created()], [verdict(), verdict()], [revised("D1")], max_iterations=5)

    result = module(requirements="r", max_iterations=2)

    assert result.iterations == 2
    assert call_counts(lms) == {"creator": 1, "critic": 2, "iterator": 1}
    assert module.budget.max_iterations == 5


def test_a_budget_given_to_the_constructor_is_not_overridden_by_a_default_max_iterations():
    drafts = [f"D{n}" for n in range(7)]
    module, lms = loop_with([created("D0")], [verdict()] * 7, [revised(draft) for draft in drafts[1:]],
                            budget=Budget(max_iterations=7))

    result = module(requirements="r")

    assert (result.iterations, result.stop_reason, result.final) == (7, "max_iterations", "D0")  # all equal
    assert call_counts(lms) == {"creator": 1, "critic": 7, "iterator": 6}
    assert module.budget.max_iterations == 7


def test_an_explicit_max_iterations_overrides_the_constructors_budget():
    module = CreatorCriticIterator(max_iterations=2, budget=Budget(max_iterations=7, timeout_s=9))

    assert (module.budget.max_iterations, module.budget.timeout_s) == (2, 9)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_timeout_ends_the_loop_with_the_best_judged_draft():
    clock = FakeClock()

    def slow(answer):
        def respond(engine, request):
            clock.now += 60  # every LM call "takes" a minute
            return answer
        return respond

    module, lms = loop_with(slow(created("D0")), slow(verdict(passed=2)), slow(revised("D1")), clock=clock)

    result = module(requirements="r", timeout_s=150)

    assert result.stop_reason == "timeout"
    assert (result.final_draft, result.approved) == ("D0", False)
    assert call_counts(lms) == {"creator": 1, "critic": 1, "iterator": 1}
    assert any("timeout" in warning for warning in result.warnings)


def test_lm_call_limit_ends_the_loop():
    module, lms = loop_with([created("D0")], [verdict(passed=1)] * 3, [revised("D1")] * 3)

    result = module(requirements="r", max_lm_calls=3)

    assert result.stop_reason == "lm_calls"
    assert result.lm_calls == 3
    assert call_counts(lms) == {"creator": 1, "critic": 1, "iterator": 1}
    # The revision was never judged, so the judged first draft is the result.
    assert result.final_draft == "D0"


def test_context_limit_ends_the_loop_and_warns_first():
    long = "x" * 400
    module, _ = loop_with([created(long)], [verdict(feedback=long)] * 5, [revised(long)] * 5, max_iterations=5)

    result = module(requirements="r", max_context_chars=2000)

    assert result.stop_reason == "context_limit"
    assert any("% of max_context_chars" in warning for warning in result.warnings)
    assert any("max_context_chars=2000" in warning for warning in result.warnings)
    assert result.final_draft == long


def test_strict_mode_raises_at_a_limit_with_the_partial_result_and_each_warning_once():
    module, _ = loop_with([created("D0")], [verdict()], [], max_iterations=1, strict=True)

    with pytest.raises(LimitReached) as raised:
        module(requirements="r")

    assert raised.value.reason == "max_iterations"
    assert raised.value.prediction.final_draft == "D0"
    assert raised.value.prediction.warnings == ["stopped at max_iterations=1"]
    assert str(raised.value) == "stopped at max_iterations=1"


def test_a_transient_lm_error_is_retried():
    module, lms = loop_with([created("D0")], [RateLimitError("slow down"), verdict(approved=True)], [])

    result = module(requirements="r")

    assert (result.stop_reason, result.approved) == ("approved", True)
    critic_step = result.trace[1]
    assert (critic_step.role, critic_step.attempts, critic_step.error) == ("critic", 2, None)
    assert calls(lms["critic"]) == 2
    assert critic_step.lm_calls == 2 and result.lm_calls == 3  # the failed request counts too


def test_transient_errors_beyond_the_retries_end_the_loop_with_the_work_kept():
    module, lms = loop_with([created("D0")], [TransportError("connection reset")] * 3, [])

    result = module(requirements="r")

    assert result.stop_reason == "error"
    assert result.final_draft == "D0"  # the unjudged draft is better than nothing
    assert result.best_attempt == {"iteration": 1, "draft": "D0", "verdict": None}
    assert result.approved is False
    assert isinstance(result.error.__cause__, dspy_errors.LMTransportError)
    assert "critic failed after 3 attempt(s)" in str(result.error)
    assert result.trace[-1].role == "critic" and "connection reset" in result.trace[-1].error
    assert result.lm_calls == sum(call_counts(lms).values()) == 4


def test_an_unparseable_answer_is_asked_again_once():
    # ChatAdapter falls back to JSONAdapter on a parse failure: garbage costs two LM calls.
    module, lms = loop_with([created("D0")], ["no idea", "still none", verdict(approved=True)], [])

    result = module(requirements="r")

    assert (result.stop_reason, result.approved) == ("approved", True)
    assert calls(lms["critic"]) == 3
    assert result.lm_calls == 4  # the JSON fallback and the retry are requests too
    assert result.warnings == ["critic: answer could not be parsed; asked again"]


def test_an_answer_that_stays_unparseable_ends_the_loop_gracefully():
    module, lms = loop_with([created("D0")], ["garbage"] * 4, [])

    result = module(requirements="r")

    assert result.stop_reason == "error"
    assert result.final_draft == "D0"
    assert "critic failed after 2 attempt(s): its answer could not be parsed" in str(result.error)
    assert [step.role for step in result.trace] == ["creator", "critic"]
    assert result.lm_calls == sum(call_counts(lms).values()) == 5


# --- the critic's verdict ------------------------------------------------------------------------


def test_a_verdict_that_approves_but_fails_a_criterion_is_not_approved_and_is_noted():
    contradicting = {**verdict(passed=2), "approved": True}  # "approved", yet quality failed
    module, lms = loop_with([created("D0")], [contradicting, verdict(approved=True)], [revised("D1")])

    result = module(requirements="r")

    assert (result.final, result.success, result.iterations) == ("D1", True, 2)
    assert call_counts(lms) == {"creator": 1, "critic": 2, "iterator": 1}
    first_review = result.trace[1]
    assert first_review.role == "critic"
    assert first_review.note == "the critic approved, but quality failed: not approved"
    assert first_review.outputs["approved"] is True  # the trace shows what the critic said
    assert result.trace[3].note is None
    assert result.warnings == ["iteration 1: the critic's verdict contradicts itself (approved, but quality "
                               "failed); treated as not approved"]
    assert result.trace[2].inputs["feedback"].startswith("Failed criteria: quality.\n")
    assert result.trace[1].to_dict()["note"] == first_review.note


def test_a_contradicting_verdict_at_the_last_iteration_does_not_count_as_success():
    contradicting = {**verdict(passed=0), "approved": True}
    module, _ = loop_with([created("D0")], [contradicting], [], max_iterations=1)

    result = module(requirements="r")

    assert (result.final, result.success, result.stop_reason) == ("D0", False, "max_iterations")
    assert result.best_attempt["verdict"].approved is False
    assert len(result.warnings) == 2  # the contradiction, then max_iterations


def test_all_criteria_passed_without_approved_contradicts_itself_too_and_the_iterator_is_told_what_to_do():
    # What a notebook hit: all three criteria true, `approved: false`, feedback "True". It is caught as the
    # other direction is: not approved, noted and warned of, and the iterator gets an instruction, not "True".
    rejecting = {**verdict(passed=3), "approved": False, "feedback": "True"}
    module, _ = loop_with([created("D0")], [rejecting, rejecting], [revised("D1")], max_iterations=2)

    result = module(requirements="r")

    assert (result.success, result.stop_reason) == (False, "max_iterations")
    assert result.trace[1].note == "the critic not approved, but every criterion passed: not approved"
    assert result.warnings[0] == ("iteration 1: the critic's verdict contradicts itself (not approved, but every "
                                  "criterion passed); treated as not approved")
    assert result.trace[2].inputs["feedback"].startswith("The critic gave no reason: check the draft")


# --- forward and aforward, concurrency, histories ------------------------------------------------


def scripts():
    return (
        [created("D0")],
        [verdict(passed=1, feedback="f1"), verdict(passed=2, feedback="f2"), verdict(approved=True)],
        [revised("D1"), revised("D2")],
    )


def summary(result):
    return (
        result.final_draft, result.approved, result.iterations, result.stop_reason, result.warnings,
        [(step.role, step.iteration, step.inputs, step.outputs, step.attempts) for step in result.trace],
    )


def test_forward_and_aforward_run_the_same_loop():
    sync_module, sync_lms = loop_with(*scripts())
    async_module, async_lms = loop_with(*scripts())

    sync_result = sync_module(requirements="r", context="c")
    async_result = asyncio.run(async_module.acall(requirements="r", context="c"))

    assert summary(sync_result)[:4] == ("D2", True, 3, "approved")
    assert summary(sync_result) == summary(async_result)
    assert call_counts(sync_lms) == call_counts(async_lms) == {"creator": 1, "critic": 3, "iterator": 2}


async def test_twenty_concurrent_runs_keep_their_histories_apart():
    def respond(engine, request):
        text = request_text(request)
        task = re.search(r"task-\d+", text).group()
        assert set(re.findall(r"task-\d+", text)) == {task}, "another run's content leaked into this call"
        if "You are the CREATOR" in text:
            return created(f"{task} v0")
        if "You are the ITERATOR" in text:
            own_earlier_turns = sum(message.role == "assistant" for message in request.messages)
            return revised(f"{task} v{own_earlier_turns + 1}")
        return verdict(approved=f"{task} v2" in text.split("[[ ## draft ## ]]")[-1])

    module = CreatorCriticIterator(retry=NO_WAIT)
    lm = scripted_lm(respond)

    with dspy.context(lm=lm):
        results = await asyncio.gather(*(module.acall(requirements=f"write task-{n}") for n in range(20)))

    assert [result.final_draft for result in results] == [f"task-{n} v2" for n in range(20)]
    assert all(result.approved and result.iterations == 3 for result in results)
    assert calls(lm) == 20 * 6
    assert sum(result.lm_calls for result in results) == calls(lm)


def test_each_role_history_holds_its_own_earlier_turns():
    module, lms = loop_with(*scripts())

    result = module(requirements="r")

    critic_turns = result.histories["critic"].messages
    assert [turn["draft"] for turn in critic_turns] == ["D0", "D1", "D2"]
    assert [turn["feedback"] for turn in critic_turns[:2]] == ["f1", "f2"]
    assert "reasoning" not in critic_turns[0] and "improved_draft" not in critic_turns[0]  # no other role's fields
    messages = dspy.ChatAdapter().format(
        CriticSignature,
        demos=[],
        inputs={"requirements": "r", "draft": "D3", "history": result.histories["critic"]},
    )
    rendered = "\n".join(str(message["content"]) for message in messages)
    for earlier in ("D0", "D1", "D2", "f1", "f2"):
        assert earlier in rendered
    iterator_messages = dspy.ChatAdapter().format(
        IteratorSignature,
        demos=[],
        inputs={"requirements": "r", "draft": "D2", "feedback": "f3", "history": result.histories["iterator"]},
    )
    rendered = "\n".join(str(message["content"]) for message in iterator_messages)
    for earlier in ("D0", "D1", "f1", "f2"):
        assert earlier in rendered
    # And what the LM actually received on the third critic call carried the first two drafts.
    last_critic_request = request_text(lms["critic"].engine.requests[-1])
    assert "D0" in last_critic_request and "f1" in last_critic_request


def test_roles_are_named_predictors_and_save_load_round_trips(tmp_path):
    module = CreatorCriticIterator()
    module.critic.demos = [dspy.Example(requirements="r", draft="d", **verdict(approved=True))]

    assert [name for name, _ in module.named_predictors()] == ["creator.predict", "critic", "iterator"]
    assert isinstance(module.creator, dspy.ChainOfThought)
    assert list(module.creator.predict.signature.output_fields) == ["reasoning", "draft"]

    path = tmp_path / "cci.json"
    module.save(path)
    loaded = CreatorCriticIterator()
    loaded.load(path)

    assert loaded.dump_state() == module.dump_state()
    assert loaded.critic.demos[0]["draft"] == "d"


def test_observers_see_every_role_start_and_finish():
    module, _ = loop_with(*scripts())
    events = []

    class Recorder:
        def role_started(self, role, iteration):
            events.append(("start", role, iteration))

        def step_finished(self, step):
            events.append(("end", step.role, step.iteration))

    with observing(Recorder()):
        module(requirements="r")

    assert events[:4] == [("start", "creator", 1), ("end", "creator", 1), ("start", "critic", 1), ("end", "critic", 1)]
    assert len(events) == 12
    assert events[-1] == ("end", "critic", 3)


def test_trace_steps_are_json_ready():
    module, _ = loop_with(*scripts())

    result = module(requirements="r")

    step = result.trace[0].to_dict()
    assert step["role"] == "creator" and step["outputs"]["draft"] == "D0"
    assert step["tokens"] == {"input": 10, "output": 5}
    assert step["note"] is None


def test_a_whole_budget_can_be_passed_per_call():
    module, _ = loop_with([created("D0")], [verdict()], [])

    result = module(requirements="r", budget=Budget(max_iterations=1))

    assert (result.stop_reason, result.iterations, result.final) == ("max_iterations", 1, "D0")


def test_a_retry_is_not_made_once_the_time_is_up():
    clock = FakeClock()

    def rate_limited(engine, request):
        clock.now += 200  # the failing call alone outlasts the timeout
        return RateLimitError("slow down")

    module, lms = loop_with([created("D0")], rate_limited, [], clock=clock)

    result = module(requirements="r", timeout_s=150)

    assert (result.stop_reason, result.final_draft) == ("timeout", "D0")
    assert calls(lms["critic"]) == 1


# --- a developer's mistakes ----------------------------------------------------------------------


@pytest.mark.parametrize(("inputs", "message"), [
    ({"requirements": None}, "requirements must be a non-empty str, got None"),
    ({"requirements": "  "}, "requirements must be a non-empty str"),
    ({"requirements": 42}, "requirements must be a non-empty str, got 42"),
    ({"requirements": "r", "context": None}, "context must be a str"),
])
def test_a_malformed_input_raises_before_any_lm_call(inputs, message):
    module, lms = loop_with([created()], [verdict()], [])

    with pytest.raises(ConfigurationError, match=message):
        module(**inputs)

    assert call_counts(lms) == {"creator": 0, "critic": 0, "iterator": 0}


# --- pluggable phases ----------------------------------------------------------------------------


def test_python_phases_get_the_contracts_arguments_positionally_whatever_their_names():
    creator = Phase("draft 1")
    critic = Phase((False, "shorter"), (True, ""))
    iterator = Phase("draft 2")
    module = CreatorCriticIterator(creator=creator, critic=critic, iterator=iterator)

    result = module(requirements="r", context="c")

    assert creator.args == [("r", "c", 1)]
    assert critic.args == [("r", "draft 1", 1), ("r", "draft 2", 2)]
    assert iterator.args == [("r", "draft 1", "shorter", 2)]  # the critic's feedback, as text
    assert (result.final, result.success, result.iterations, result.stop_reason) == ("draft 2", True, 2, "approved")
    assert result.best_attempt == {"iteration": 2, "draft": "draft 2", "verdict": (True, "")}
    assert result.lm_calls == 0
    assert [name for name, _ in module.named_predictors()] == []  # no LLM role was built


def test_a_loop_shows_its_roles_custom_phases_included():
    def create(requirements, context, iteration):
        return "d"

    custom = CreatorCriticIterator(creator=create, critic=Phase(True), iterator=Phase("d2"))
    mixed = CreatorCriticIterator(max_iterations=2, critic=Phase(True))

    assert repr(custom).splitlines() == [
        "CreatorCriticIterator(max_iterations=3)",
        f"  creator = {create.__qualname__} (custom phase)",
        "  critic = Phase (custom phase)",
        "  iterator = Phase (custom phase)"]
    assert repr(mixed).splitlines() == [
        "CreatorCriticIterator(max_iterations=2)",
        "  creator = ChainOfThought(requirements, context, history -> reasoning, draft)",
        "  critic = Phase (custom phase)",
        "  iterator = Predict(requirements, draft, feedback, history -> improved_draft)"]


class Verdict:
    def __init__(self, approved, feedback):
        self.approved, self.feedback = approved, feedback


@pytest.mark.parametrize("approving", [True, (True, "fine"), Verdict(True, "fine"), {"approved": True}])
def test_a_custom_critic_may_return_a_bool_a_pair_or_an_object(approving):
    module, lms = loop_with([created("D0")], None, [revised("D1")], critic=Phase(False, approving))

    result = module(requirements="r")

    assert (result.final, result.success, result.iterations) == ("D1", True, 2)
    assert calls(lms["creator"]) == 1 and calls(lms["iterator"]) == 1


def test_the_builtin_iterator_gets_a_custom_critics_feedback_as_text():
    module, lms = loop_with([created("D0")], None, [revised("D1")], critic=Phase(Verdict(False, "too long"), True))

    result = module(requirements="r")

    assert result.trace[2].inputs["feedback"] == "too long"
    assert "too long" in request_text(lms["iterator"].engine.requests[0])


def test_a_custom_iterator_gets_the_feedback_as_text_and_an_error_in_it_points_at_its_line():
    def revise(requirements, draft, feedback, iteration):
        return draft + " " + feedback  # what the README's contract promises: text

    def broken(requirements, draft, feedback, iteration):
        return draft + iteration  # a bug of the caller's

    critic = Phase((False, "make it longer"), True)
    result = CreatorCriticIterator(creator=Phase("short"), critic=critic, iterator=revise)(requirements="r")
    failed = CreatorCriticIterator(creator=Phase("short"), critic=Phase(False), iterator=broken)(requirements="r")

    assert (result.final, result.success) == ("short make it longer", True)
    assert result.best_attempt["verdict"] is True and result.trace[1].outputs == {"result": (False, "make it longer")}
    assert failed.stop_reason == "error" and isinstance(failed.error, RoleFailed)
    line = broken.__code__.co_firstlineno + 1
    assert str(failed.error).endswith(f"TypeError: can only concatenate str (not \"int\") to str "
                                      f"(at {__file__}:{line} in broken: return draft + iteration  # a bug of the "
                                      "caller's)")


@pytest.mark.parametrize("max_iterations", [0, 1])
def test_a_role_that_will_not_run_needs_no_lm(max_iterations):
    # Custom creator and critic: the built-in iterator revises from iteration 2 on, so it needs no LM before.
    module = CreatorCriticIterator(max_iterations=max_iterations, creator=Phase("d"), critic=Phase(False))

    with dspy.context(lm=None):
        result = module(requirements="r")

        assert (result.stop_reason, result.iterations, result.lm_calls) == ("max_iterations", max_iterations, 0)
        with pytest.raises(ConfigurationError, match="no LM is configured for the iterator role"):
            module(requirements="r", max_iterations=2)


def test_a_custom_critic_returning_something_else_raises_saying_what_to_return():
    module, _ = loop_with([created("D0")], None, [], critic=Phase("looks good"))

    with pytest.raises(ConfigurationError, match=r"the critic returned 'looks good'; a verdict: a bool"):
        module(requirements="r")


async def test_async_phases_are_awaited_by_aforward():
    async def create(requirements, context, iteration):
        await asyncio.sleep(0)
        return f"{requirements}!"

    module, lms = loop_with(None, [verdict(approved=True)], [], creator=create)

    result = await module.acall(requirements="r")

    assert (result.final, result.success, result.iterations) == ("r!", True, 1)
    assert calls(lms["critic"]) == 1


# --- the junk floor (loops.vocabulary.junk) under the built-in critic ---------------------------------------------


@pytest.mark.parametrize("junk", ["Your original content", "][", "A haiku about rain.", "{draft}"])
def test_the_critic_never_approves_junk_whatever_it_says(junk):
    module, lms = loop_with([created(junk)], [verdict(approved=True)], [], max_iterations=1)

    result = module(requirements="A haiku about rain.")

    assert (result.final, result.success) == (junk, False)
    assert calls(lms["critic"]) == 1  # judged by the LLM, overruled by the floor
    critic_step = next(step for step in result.trace if step.role == "critic")
    assert critic_step.note.startswith("junk (")
    assert any("the draft is junk" in warning and "the critic approved it" in warning for warning in result.warnings)


def test_observers_see_the_junk_note_on_the_critics_step():
    module, _ = loop_with([created("][")], [verdict(approved=True)], [], max_iterations=1)
    seen = []

    class Recorder:
        def step_finished(self, step):
            seen.append((step.role, step.note))

    with observing(Recorder()):
        module(requirements="A haiku about rain.")

    assert seen == [("creator", None), ("critic", "junk (no letters): not approved")]


def test_an_empty_draft_is_rejected_without_asking_the_critic_and_the_iterator_is_told_why():
    module, lms = loop_with([created("")], [verdict(approved=True)], [revised("Rain on the roof")],
                            max_iterations=2)

    result = module(requirements="A haiku about rain.")

    assert calls(lms["critic"]) == 1  # only the revision was shown to it
    assert (result.final, result.success, result.stop_reason) == ("Rain on the roof", True, "approved")
    first_review = [step for step in result.trace if step.role == "critic"][0]
    assert first_review.lm_calls == 0 and first_review.note == "junk (empty): not approved"
    assert "the critic was not asked" in result.warnings[0]
    assert "not the content asked for (empty)" in request_text(lms["iterator"].engine.requests[0])


def test_a_real_draft_is_left_to_the_critic():
    module, lms = loop_with([created("Rain taps the window")], [verdict(approved=True)], [])

    result = module(requirements="A haiku about rain.")

    assert result.success and result.warnings == []
    assert next(step for step in result.trace if step.role == "critic").note is None


# --- a user's checks (loops.vocabulary.checks) drive the loop ---------------------------------------------------------


def roles(result):
    return [step.role for step in result.trace]


def test_a_failing_check_overrides_the_critics_approval_and_its_message_is_the_feedback():
    module, lms = loop_with([created("A long slogan with many words")], [verdict(approved=True)] * 2,
                            [revised("Short slogan")], checks=["max-words=3"], max_iterations=2)

    result = module(requirements="A slogan.")

    assert roles(result) == ["creator", "checks", "critic", "iterator", "checks", "critic"]
    first_checks = result.trace[1]
    assert first_checks.outputs["failed"] == [{"rule": "Use at most 3 words.", "message": "has 6 words; use at most 3"}]
    assert first_checks.lm_calls == 0 and first_checks.outputs["held"] == 0
    assert result.trace[3].inputs["feedback"] == "Fix these problems of the draft:\n- has 6 words; use at most 3"
    assert (result.final, result.success, result.stop_reason) == ("Short slogan", True, "approved")
    assert call_counts(lms) == {"creator": 1, "critic": 2, "iterator": 1}


def test_the_critics_approval_counts_for_nothing_while_a_check_fails():
    module, _ = loop_with([created("A long slogan with many words")], [verdict(approved=True)], [],
                          checks=["max-words=3"], max_iterations=1)

    result = module(requirements="A slogan.")

    assert (result.success, result.stop_reason) == (False, "max_iterations")
    assert result.best_attempt["checks"].failures == ["has 6 words; use at most 3"]
    assert result.best_attempt["verdict"].approved is True  # what the critic said, overruled by the check


def test_with_critic_checks_the_checks_alone_approve_and_no_critic_is_asked():
    module, lms = loop_with([created("Every wheel true")], None, [], critic="checks", checks=["include=wheel"])

    result = module(requirements="A slogan for a bicycle shop.")

    assert (result.final, result.success, result.stop_reason) == ("Every wheel true", True, "approved")
    assert roles(result) == ["creator", "checks"] and result.lm_calls == 1
    assert not hasattr(module, "critic") and [name for name, _ in module.named_predictors()] == [
        "creator.predict", "iterator"]


def test_checks_only_mode_makes_no_critic_request_counted_at_a_loopback_server():
    from loops.lm.server import ServerLM
    from loops.vocabulary.adapters import ADAPTERS
    from tests.loops.fake_openai import FaultyOpenAI

    server = FaultyOpenAI()  # answers in shape: the creator's draft is "a draft", the critic approves
    server.approve = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        for critic, requests in (("checks", 1), ("llm", 2)):
            lm = ServerLM("openai/served", api_base=server.base_url(critic), cache=False, num_retries=0)
            with dspy.context(lm=lm, adapter=ADAPTERS["compact"]):  # as `--api-base` does: one request a call
                result = CreatorCriticIterator(critic=critic, checks=["include=draft"], retry=NO_WAIT)(
                    requirements="A draft.")
            lm.close()
            assert (result.success, result.final) == (True, "a draft")
            assert server.received[critic] == requests == result.lm_calls  # the creator's; and the critic's
    finally:
        server.closing.set()
        server.shutdown()
        server.server_close()


def test_the_rules_reach_the_creators_iterators_and_critics_prompts_once():
    module, lms = loop_with([created("A slogan with far too many words in it")], [verdict(passed=1)],
                            [revised("Wheels")], checks=["max-words=4", "include=wheel"], max_iterations=2)

    module(requirements="A slogan for a bicycle shop. Use at most 4 words.")

    for role in ("creator", "critic", "iterator"):
        asked = request_text(lms[role].engine.requests[0])
        assert asked.count("Use at most 4 words.") == 1 and "Include the word 'wheel'." in asked, role


def test_the_best_attempt_ranks_checks_held_first_then_the_critic_and_keeps_the_earlier_of_equals():
    # D0 holds 1 of 2 checks (the critic passes 2 criteria); D1 holds 2 (rejected, 0 criteria); D2 holds 1 (approved
    # by the critic, overruled). Checks held come first: D1, though the critic liked it least.
    module, _ = loop_with([created("wheel wheel wheel wheel wheel")],
                          [verdict(passed=2), verdict(passed=0), verdict(approved=True)],
                          [revised("Wheel on"), revised("Wheel wheel wheel wheel wheel")],
                          checks=["max-words=3", "include=wheel"], max_iterations=3)

    result = module(requirements="A slogan.")

    assert (result.final, result.success, result.best_attempt["iteration"]) == ("Wheel on", False, 2)
    assert result.best_attempt["checks"].held == 2

    tie, _ = loop_with([created("wheel wheel wheel wheel")], [verdict(passed=1)] * 2,
                       [revised("wheel wheel wheel wheel wheel")],
                       checks=["max-words=3", "include=wheel"], max_iterations=2)
    assert tie(requirements="A slogan.").final == "wheel wheel wheel wheel"  # equal on every count: the earlier


def test_no_draft_is_ever_edited_to_hold_a_check():
    long = " ".join(["This draft runs on and on well past the forty words the rule allows."] * 4)
    module, lms = loop_with([created(long)], [verdict(approved=True)] * 2, [revised(long + " More.")],
                            checks=["max-words=40", "include=BPA-free"], max_iterations=2)

    result = module(requirements="A product description.")

    written = [step.outputs.get("draft") or step.outputs.get("improved_draft") for step in result.trace
               if step.role in ("creator", "iterator")]
    assert result.final == long and result.final in written  # the text a role wrote, not cut to 40 words
    assert not result.success


def test_samples_draw_candidates_until_one_holds_every_check_then_fresh_drafts_are_told_what_failed():
    creator = scripted_lm([created("No match here"), created("Still no match"), created("A wheel")])
    iterator = scripted_lm([revised("Revised, no match")])
    module = CreatorCriticIterator(retry=NO_WAIT, samples=2, critic="checks", checks=["include=wheel"],
                                   max_iterations=2)
    module.creator.set_lm(creator)
    module.iterator.set_lm(iterator)

    result = module(requirements="A slogan.")

    assert roles(result) == ["creator", "checks", "creator.2", "checks", "iterator", "checks", "creator.2", "checks"]
    assert (result.final, result.success, result.iterations) == ("A wheel", True, 2)
    first, second, fresh = creator.engine.requests
    assert first.config.temperature in (None, 0.0) and second.config.temperature == 0.7  # greedy, then a sample
    assert second.config.seed == 2 and fresh.config.seed == 4  # seeded by their number: a rerun draws the same
    assert "does not include the word 'wheel'" in request_text(fresh)  # the failed rule, restated
    assert "does not include the word 'wheel'" in request_text(iterator.engine.requests[0])


def test_the_calls_checks_add_to_the_modules():
    module, _ = loop_with([created("Every wheel")], [verdict(approved=True)], [], checks=["include=wheel"],
                          max_iterations=1)

    result = module(requirements="A slogan.", checks=["max-words=1"])

    assert result.trace[1].outputs["total"] == 2 and not result.success


def test_junk_is_never_approved_by_the_checks_alone():
    module, _ = loop_with([created("Your original content")], None, [], critic="checks", checks=["max-words=5"],
                          max_iterations=1)

    result = module(requirements="A slogan.")

    assert result.success is False and result.trace[1].outputs["floor"].startswith("a placeholder")
    assert result.trace[1].note == "junk (a placeholder ('your original content'), not a draft): not approved"


def test_a_check_that_raises_ends_the_run_with_the_draft_kept():
    def broken(draft):
        raise KeyError("oops")

    module, _ = loop_with([created("D0")], [verdict(approved=True)], [], checks=[broken])

    result = module(requirements="r")

    assert (result.stop_reason, result.final) == ("error", "D0")
    assert isinstance(result.error, RoleFailed) and "a check raised KeyError" in str(result.error)
    assert result.trace[-1].role == "checks" and result.trace[-1].error


@pytest.mark.parametrize(("options", "call", "message"), [
    ({"critic": "checks"}, {}, "critic='checks' approves a draft when every check holds, and no checks were given"),
    ({"critic": "cheks"}, None, "the critic phase must be callable as critic.*or be 'checks'"),
    ({"checks": [42]}, None, "is neither a check"),
    ({"checks": ["max-wordz=4"]}, None, "did you mean max-words"),
    ({}, {"checks": "words=9..3"}, "Count min 9 is above max 3"),
    ({"samples": 0}, None, "samples must be an int >= 1"),
])
def test_check_mistakes_are_refused_before_any_lm_call(options, call, message):
    lm = scripted_lm([])
    with dspy.context(lm=lm), pytest.raises(ConfigurationError, match=message):
        CreatorCriticIterator(**options)(requirements="r", **(call or {}))
    assert calls(lm) == 0


def test_on_the_embedded_model_with_checks_the_checks_alone_approve_from_several_candidates():
    from loops.patterns.prose import EMBEDDED_PROSE
    from tests.loops.patterns.test_code_loop import embedded_lookalike

    lm = embedded_lookalike(lambda engine, request: "A wheel" if len(engine.requests) == 3 else "No match")
    with dspy.context(lm=lm):
        module = CreatorCriticIterator(checks=["include=wheel"], max_iterations=1)
        result = module(requirements="A slogan.")
        assert module.settings()["critic"] == "checks" and module.settings()["samples"] == EMBEDDED_PROSE.samples

    assert (result.final, result.success) == ("A wheel", True)
    assert roles(result) == ["creator", "checks", "creator.2", "checks", "creator.3", "checks"]  # no critic


@pytest.mark.parametrize("timeout_s", [None, 60])
def test_dspy_streamify_streams_the_chosen_fields_of_each_role_as_they_are_written(timeout_s):
    """The creator's draft and the iterator's revision stream chunk by chunk, the result last; with a deadline the
    LM call stays on the thread `dspy.streamify` runs the loop on, which is where it sends the chunks from."""
    loop = CreatorCriticIterator(max_iterations=2, critic=lambda requirements, draft, iteration: draft == "short")
    streamed = dspy.streamify(loop, stream_listeners=[StreamListener("draft"), StreamListener("improved_draft")])

    async def chunks():
        return [chunk async for chunk in streamed(requirements="Write.", timeout_s=timeout_s)]

    with dspy.context(lm=streaming_lm([created("a long first draft"), revised("short")])):
        received = asyncio.run(chunks())
    pieces = [chunk for chunk in received if isinstance(chunk, StreamResponse)]
    by_role = {name: "".join(chunk.chunk for chunk in pieces if chunk.predict_name == name)
               for name in ("creator.predict", "iterator")}
    assert by_role == {"creator.predict": "a long first draft", "iterator": "short"}
    assert len(pieces) > 4 and received[-1].final == "short" and received[-1].success

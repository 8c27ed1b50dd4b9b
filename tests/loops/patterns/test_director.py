"""Director–Executor–Evaluator–Controller through its public surface: a scripted LM per role."""

import asyncio
import re

import dspy
import pytest
from dspy.lm15 import TransportError

from loops import (
    ConfigurationError,
    ControllerDecision,
    DecisionError,
    DirectorExecutorEvaluatorController,
    RetryPolicy,
    RoleFailed,
)
from loops.signatures.director import DirectorSignature, LoopControllerSignature, PlanExecutorSignature
from tests.scripted import Phase, calls, request_text, scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)
ROLES = ("director", "executor", "evaluator", "controller")


def planned(plan):
    return {"plan": plan}


def done(result):
    return {"result": result}


def judged(status="FAIL", feedback="needs a title"):
    return {"status": status, "feedback": "" if status == "PASS" else feedback}


def decided(action="continue", next_input="add a title"):
    return {"action": action, "next_input": next_input}


def loop_with(scripts, **options):
    """A module whose LLM roles each answer from their own scripted LM; other roles are given in `options`."""
    module = DirectorExecutorEvaluatorController(retry=NO_WAIT, **options)
    lms = {role: scripted_lm(script) for role, script in scripts.items()}
    for role, lm in lms.items():
        getattr(module, role).set_lm(lm)
    return module, lms


def call_counts(lms):
    return {role: calls(lm) for role, lm in lms.items()}


def rendered(signature, **inputs):
    messages = dspy.ChatAdapter().format(signature, demos=[], inputs=inputs)
    return "\n".join(str(message["content"]) for message in messages)


def roles_and_iterations(result):
    return [(step.role, step.iteration) for step in result.trace]


# --- stopping ------------------------------------------------------------------------------------


def test_an_evaluator_pass_stops_the_first_iteration_without_asking_the_controller():
    module, lms = loop_with({"director": [planned("P1")], "executor": [done("R1")],
                             "evaluator": [judged("PASS")], "controller": []})

    result = module(initial_input="a poem")

    assert (result.final, result.success, result.iterations, result.stop_reason) == ("R1", True, 1, "stopped")
    assert call_counts(lms) == {"director": 1, "executor": 1, "evaluator": 1, "controller": 0}
    assert roles_and_iterations(result) == [("director", 1), ("executor", 1), ("evaluator", 1)]
    assert result.best_attempt == {"iteration": 1, "plan": "P1", "result": "R1",
                                   "feedback": {"status": "PASS", "feedback": ""}}
    assert result.warnings == []


def test_the_controllers_next_input_feeds_the_next_plan_then_a_pass_stops():
    module, lms = loop_with({
        "director": [planned("P1"), planned("P2")],
        "executor": [done("R1"), done("R2")],
        "evaluator": [judged("FAIL", "needs a title"), judged("PASS")],
        "controller": [decided("continue", "add a title")],
    })

    result = module(initial_input="a poem")

    assert (result.final, result.success, result.iterations, result.stop_reason) == ("R2", True, 2, "stopped")
    assert call_counts(lms) == {"director": 2, "executor": 2, "evaluator": 2, "controller": 1}
    controller_step = result.trace[3]
    assert controller_step.role == "controller"
    assert controller_step.inputs == {"goal": "a poem", "plan": "P1", "result": "R1", "status": "FAIL",
                                      "feedback": "needs a title"}
    second_plan = result.trace[4]
    assert (second_plan.role, second_plan.iteration) == ("director", 2)
    assert second_plan.inputs == {"goal": "a poem", "current_input": "a poem\n\nNext: add a title"}
    assert "Next: add a title" in request_text(lms["director"].engine.requests[1])


def test_the_llm_controller_can_stop_a_failing_loop():
    module, lms = loop_with({"director": [planned("P1")], "executor": [done("R1")],
                             "evaluator": [judged("FAIL")], "controller": [decided("stop", "")]})

    result = module(initial_input="a poem")

    assert (result.final, result.success, result.iterations) == ("R1", False, 1)
    assert result.stop_reason == "stopped"
    assert call_counts(lms) == {"director": 1, "executor": 1, "evaluator": 1, "controller": 1}


@pytest.mark.parametrize("max_iterations", [0, 1, 4])
def test_never_passing_stops_at_max_iterations_with_exact_llm_calls(max_iterations):
    n = range(1, max_iterations + 1)
    module, lms = loop_with({
        "director": [planned(f"P{i}") for i in n],
        "executor": [done(f"R{i}") for i in n],
        "evaluator": [judged("FAIL", f"flaw {i}") for i in n],
        "controller": [decided("continue", f"fix {i}") for i in n],
    }, max_iterations=max_iterations)

    result = module(initial_input="a poem")

    assert call_counts(lms) == dict.fromkeys(ROLES, max_iterations)
    assert (result.iterations, result.stop_reason) == (max_iterations, "max_iterations")
    assert result.success is False
    assert any(f"max_iterations={max_iterations}" in warning for warning in result.warnings)
    assert result.final == (f"R{max_iterations}" if max_iterations else None)
    assert [step.role for step in result.trace] == list(ROLES) * max_iterations
    directors = [step.inputs["current_input"] for step in result.trace if step.role == "director"]
    assert directors == ["a poem", *(f"a poem\n\nNext: fix {i}" for i in n)][:max_iterations]


@pytest.mark.parametrize("max_iterations", [0, 1, 4])
def test_at_max_iterations_final_and_best_attempt_are_the_last_result(max_iterations):
    n = range(1, max_iterations + 1)
    evaluator = Phase("FAIL")  # a PASS would have ended the loop
    controller = Phase(("continue", "go on"))
    scripts = {"director": [planned(f"P{i}") for i in n], "executor": [done(f"R{i}") for i in n]}
    module, lms = loop_with(scripts, evaluator=evaluator, controller=controller,
                            max_iterations=max_iterations)

    result = module(initial_input="a poem")

    assert call_counts(lms) == {"director": max_iterations, "executor": max_iterations}
    assert (evaluator.calls, controller.calls) == (max_iterations, max_iterations)
    assert evaluator.args == [(f"R{i}", f"P{i}", i) for i in n]
    assert (result.iterations, result.stop_reason) == (max_iterations, "max_iterations")
    if max_iterations == 0:
        assert (result.final, result.best_attempt, result.success) == (None, None, False)
        return
    assert result.final == f"R{max_iterations}"  # the LAST result...
    assert result.success is False  # ...judged by its own verdict
    # ...and of equal verdicts the best is the earlier (loops.vocabulary.contracts.attempt_rank)
    best = result.best_attempt
    assert (best["iteration"], best["result"], best["feedback"]) == (1, "R1", "FAIL")


# --- what the controller decides -----------------------------------------------------------------


def test_an_unparseable_controller_answer_continues_with_the_evaluators_feedback():
    # ChatAdapter falls back to JSONAdapter and the runtime asks once more: four garbage answers.
    module, lms = loop_with({
        "director": [planned("P1"), planned("P2")],
        "executor": [done("R1"), done("R2")],
        "evaluator": [judged("FAIL", "needs a title"), judged("PASS")],
        "controller": ["no idea"] * 4,
    })

    result = module(initial_input="a poem")

    assert (result.final, result.success, result.iterations, result.stop_reason) == ("R2", True, 2, "stopped")
    assert result.error is None
    assert call_counts(lms) == {"director": 2, "executor": 2, "evaluator": 2, "controller": 4}
    assert "controller: answer could not be parsed; asked again" in result.warnings
    assert any("iteration 1: controller failed after 2 attempt(s): its answer could not be parsed; "
               "continuing with the evaluator's feedback" in warning for warning in result.warnings)
    assert result.trace[3].role == "controller" and result.trace[3].error
    assert result.trace[4].inputs["current_input"] == "a poem\n\nThe last attempt fell short: needs a title"


@pytest.mark.parametrize("malformed", [("maybe", 1), 42, "stop", None, ("stop", 1, 2)])
def test_a_malformed_controller_decision_raises_decision_error(malformed):
    # A controller that returns no decision is a developer's bug: it raises, it is not a graceful stop.
    controller = Phase(malformed)
    module, lms = loop_with({"director": [planned("P1")], "executor": [done("R1")], "evaluator": [judged()]},
                            controller=controller)

    with pytest.raises(DecisionError, match=re.escape(f"controller returned {malformed!r}, which is not a decision")):
        module(initial_input="a poem")

    assert controller.calls == 1 and call_counts(lms) == {"director": 1, "executor": 1, "evaluator": 1}


@pytest.mark.parametrize("decision", [("stop", "done"), ["stop", "done"], ControllerDecision.stop("done"),
                                      {"action": "stop", "value": "done"}])
def test_a_decision_may_be_a_pair_a_list_or_a_controller_decision(decision):
    module = DirectorExecutorEvaluatorController(director=Phase("p"), executor=Phase("r"), evaluator=Phase(False),
                                                 controller=Phase(decision))

    result = module(initial_input="goal")

    assert (result.final, result.success, result.stop_reason, result.iterations) == ("done", False, "stopped", 1)


def test_a_malformed_controller_decision_raises_when_strict_too():
    module, _ = loop_with({"director": [planned("P1")], "executor": [done("R1")], "evaluator": [judged()]},
                          controller=Phase(42), strict=True)

    with pytest.raises(DecisionError, match="controller returned 42"):
        module(initial_input="a poem")


# --- failures in a phase -------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ROLES)
def test_an_exception_in_any_phase_ends_the_loop_with_the_earlier_work_kept(failing):
    boom = ValueError(f"{failing} broke")
    answers = {
        "director": ["plan 1", "plan 2"],
        "executor": ["result 1", "result 2"],
        "evaluator": ["FAIL", "FAIL"],
        "controller": [("continue", "input 2"), ("continue", "input 3")],
    }
    answers[failing][1] = boom
    phases = {role: Phase(*answer) for role, answer in answers.items()}
    module = DirectorExecutorEvaluatorController(max_iterations=3, retry=NO_WAIT, **phases)

    result = module(initial_input="goal")

    assert result.stop_reason == "error"
    assert isinstance(result.error, RoleFailed) and result.error.role == failing
    assert result.error.__cause__ is boom
    assert f"{failing} failed after 1 attempt(s): ValueError: {failing} broke" in str(result.error)
    assert result.iterations == 2
    expected = [(role, 1) for role in ROLES] + [(role, 2) for role in ROLES[: ROLES.index(failing) + 1]]
    assert roles_and_iterations(result) == expected
    assert result.trace[-1].error == f"ValueError: {failing} broke"
    # Once the second result exists it is `final` (unjudged when the evaluator failed on it); the best
    # attempt stays the first, judged: the second, judged as well (FAIL), is no better.
    assert result.best_attempt == {"iteration": 1, "plan": "plan 1", "result": "result 1", "feedback": "FAIL"}
    failed_late = failing in ("evaluator", "controller")
    assert (result.final, result.success) == ("result 2" if failed_late else "result 1", False)
    assert phases["director"].args == [("goal", 1), ("input 2", 2)]


def test_an_exception_in_a_phase_raises_when_strict():
    boom = RuntimeError("evaluator crashed")
    module = DirectorExecutorEvaluatorController(
        director=Phase("p"), executor=Phase("r"), evaluator=Phase(boom), controller=Phase(("stop", None)),
        strict=True, retry=NO_WAIT,
    )

    with pytest.raises(RoleFailed) as raised:
        module(initial_input="goal")

    assert raised.value.__cause__ is boom
    assert raised.value.prediction.stop_reason == "error"


@pytest.mark.parametrize("crash", ["phase", "llm"])
def test_an_evaluator_that_crashes_keeps_the_result_it_was_judging(crash):
    # Today's lost work: the evaluator fails on the first result, and nothing may be lost.
    if crash == "phase":
        module, lms = loop_with({"director": [planned("P1")], "executor": [done("R1")], "controller": []},
                                evaluator=Phase(RuntimeError("judge down")))
    else:
        module, lms = loop_with({"director": [planned("P1")], "executor": [done("R1")],
                                 "evaluator": [TransportError("connection reset")] * 3, "controller": []})

    result = module(initial_input="a poem")

    assert (result.stop_reason, result.iterations) == ("error", 1)
    assert (result.final, result.success) == ("R1", False)
    assert result.best_attempt == {"iteration": 1, "plan": "P1", "result": "R1", "feedback": None}
    assert isinstance(result.error, RoleFailed) and result.error.role == "evaluator"
    assert call_counts(lms)["controller"] == 0


@pytest.mark.parametrize("goal", [None, "", "   "])
def test_a_missing_goal_raises_before_any_lm_call(goal):
    module, lms = loop_with({role: [] for role in ROLES})

    with pytest.raises(ConfigurationError, match="initial_input must be a goal"):
        module(initial_input=goal)

    assert call_counts(lms) == dict.fromkeys(ROLES, 0)


def test_a_configuration_error_raised_inside_a_phase_propagates():
    module, lms = loop_with({"director": [planned("P1")], "evaluator": [], "controller": []},
                            executor=Phase(ConfigurationError("the executor's tool is not set up")))

    with pytest.raises(ConfigurationError, match="the executor's tool is not set up"):
        module(initial_input="a poem")

    assert call_counts(lms) == {"director": 1, "evaluator": 0, "controller": 0}


def test_a_custom_phases_value_reaches_the_next_phase_unchanged():
    plan, outcome = {"steps": ["a", "b"]}, object()
    executor, evaluator = Phase(outcome), Phase(True)
    controller = Phase(("stop", "done"))
    module = DirectorExecutorEvaluatorController(director=Phase(plan), executor=executor, evaluator=evaluator,
                                                 controller=controller)

    result = module(initial_input="goal")

    assert executor.args[0][0] is plan
    assert evaluator.args[0][0] is outcome and evaluator.args[0][1] is plan
    assert controller.args == [(True, plan, outcome, 1)]  # the evaluator's bool, not a wrapped verdict
    assert (result.final, result.success) == ("done", True)
    assert result.best_attempt["result"] is outcome


@pytest.mark.parametrize(("feedback", "success"), [
    (True, True), (False, False), ("pass", True), ("FAIL", False), ({"status": "PASS"}, True),
    ({"success": False}, False), (dspy.Prediction(status="PASS"), True),
])
def test_the_builtin_controller_reads_any_evaluator_verdict_shape(feedback, success):
    scripts = {"director": [planned("P1")], "executor": [done("R1")], "controller": [decided("stop", "")]}
    module, lms = loop_with(scripts, evaluator=Phase(feedback), max_iterations=1)

    result = module(initial_input="a poem")

    assert (result.success, result.stop_reason, result.final) == (success, "stopped", "R1")
    assert calls(lms["controller"]) == (0 if success else 1)  # a pass stops without asking it


@pytest.mark.parametrize("passed", [True, "PASS", {"status": "PASS"}])
def test_an_evaluators_pass_ends_the_loop_whatever_a_custom_controller_says(passed):
    # A controller that always goes on: after a PASS the loop stops all the same, and says so honestly.
    controller = Phase(("continue", "once more"))
    module = DirectorExecutorEvaluatorController(max_iterations=3, director=Phase("plan"), executor=Phase("result"),
                                                 evaluator=Phase(passed), controller=controller)

    result = module(initial_input="goal")

    assert (result.final, result.success, result.stop_reason, result.iterations) == ("result", True, "stopped", 1)
    assert controller.calls == 1 and "max_iterations" not in " ".join(result.warnings)
    assert "the evaluator passed" in result.trace[-1].note


def test_only_the_llm_roles_that_run_are_built():
    module = DirectorExecutorEvaluatorController(evaluator=Phase(True), controller=Phase(("stop", None)))

    assert [name for name, _ in module.named_predictors()] == ["director", "executor"]
    assert module.evaluator.__class__ is Phase


# --- phases --------------------------------------------------------------------------------------


def test_python_phases_get_the_contracts_arguments_positionally_whatever_their_names():
    seen = []

    def plan_for(aim, round_no):
        seen.append(("director", aim, round_no))
        return f"plan for {aim}"

    async def carry_out(steps, round_no):
        await asyncio.sleep(0)
        seen.append(("executor", steps, round_no))
        return f"did {steps}"

    def judge(outcome, steps, round_no):
        seen.append(("evaluator", outcome, steps, round_no))
        return {"status": "PASS" if round_no == 2 else "FAIL", "note": "ok"}

    def steer(notes, steps, outcome, round_no):
        seen.append(("controller", notes["status"], steps, outcome, round_no))
        return ("stop", f"final {outcome}") if notes["status"] == "PASS" else ("continue", "again")

    module = DirectorExecutorEvaluatorController(director=plan_for, executor=carry_out, evaluator=judge,
                                                 controller=steer, retry=NO_WAIT)

    result = module(initial_input="goal")

    assert seen == [
        ("director", "goal", 1), ("executor", "plan for goal", 1),
        ("evaluator", "did plan for goal", "plan for goal", 1),
        ("controller", "FAIL", "plan for goal", "did plan for goal", 1),
        ("director", "again", 2), ("executor", "plan for again", 2),
        ("evaluator", "did plan for again", "plan for again", 2),
        ("controller", "PASS", "plan for again", "did plan for again", 2),
    ]
    assert (result.final, result.success, result.stop_reason, result.iterations) == (
        "final did plan for again", True, "stopped", 2)


async def test_async_phases_are_awaited_by_aforward():
    async def plan_for(aim, round_no):
        await asyncio.sleep(0)
        return f"plan {round_no}"

    async def judge(outcome, steps, round_no):
        return {"status": "PASS" if round_no == 2 else "FAIL", "feedback": "too short"}

    scripts = {"executor": [done("R1"), done("R2")], "controller": [decided("continue", "longer")]}
    module, lms = loop_with(scripts, director=plan_for, evaluator=judge)

    result = await module.acall(initial_input="goal")

    assert (result.final, result.success, result.stop_reason, result.iterations) == ("R2", True, "stopped", 2)
    assert call_counts(lms) == {"executor": 2, "controller": 1}
    assert result.trace[3].inputs["feedback"] == "too short"
    assert result.trace[4].inputs == {"current_input": "goal\n\nNext: longer", "iteration": 2}


class Judge(dspy.Module):
    """A user's evaluator module: no LLM, just the contract."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, outcome, steps, round_no):
        self.seen.append((outcome, steps, round_no))
        passed = "title" in outcome
        return dspy.Prediction(status="PASS" if passed else "FAIL", feedback="" if passed else "no title")


def test_a_dspy_module_phase_is_called_with_the_contract():
    judge = Judge()
    module, lms = loop_with({
        "director": [planned("P1"), planned("P2")],
        "executor": [done("a poem"), done("a poem with a title")],
        "controller": [decided("continue", "add a title")],
    }, evaluator=judge)

    result = module(initial_input="a poem")

    assert judge.seen == [("a poem", "P1", 1), ("a poem with a title", "P2", 2)]
    assert (result.final, result.success, result.stop_reason) == ("a poem with a title", True, "stopped")
    assert call_counts(lms) == {"director": 2, "executor": 2, "controller": 1}
    assert result.trace[2].outputs["result"].toDict() == {"status": "FAIL", "feedback": "no title"}
    assert result.best_attempt["feedback"].status == "PASS"


# --- histories -----------------------------------------------------------------------------------


def test_role_histories_hold_their_earlier_turns_and_render():
    module, _ = loop_with({
        "director": [planned("plan one"), planned("plan two")],
        "executor": [done("result one"), done("result two")],
        "evaluator": [judged("FAIL", "flaw one"), judged("FAIL", "flaw two")],
        "controller": [decided("continue", "add a title"), decided("continue", "shorter lines")],
    }, max_iterations=2)

    result = module(initial_input="a poem")

    director_turns = result.histories["director"].messages
    assert [turn["plan"] for turn in director_turns] == ["plan one", "plan two"]
    assert director_turns[1]["current_input"] == "a poem\n\nNext: add a title"
    assert "result" not in director_turns[0]  # no other role's fields
    text = rendered(DirectorSignature, goal="a poem", current_input="x", history=result.histories["director"])
    for earlier in ("plan one", "plan two", "Next: add a title"):
        assert earlier in text
    text = rendered(PlanExecutorSignature, plan="p", history=result.histories["executor"])
    for earlier in ("result one", "result two", "plan one"):
        assert earlier in text
    text = rendered(LoopControllerSignature, goal="a poem", plan="p", result="r", status="FAIL", feedback="f",
                    history=result.histories["controller"])
    for earlier in ("add a title", "shorter lines", "flaw one", "flaw two"):
        assert earlier in text


# --- forward and aforward ------------------------------------------------------------------------


def scripts():
    return {
        "director": [planned("P1"), planned("P2"), planned("P3")],
        "executor": [done("R1"), done("R2"), done("R3")],
        "evaluator": [judged("FAIL", "f1"), judged("FAIL", "f2"), judged("PASS")],
        "controller": [decided("continue", "n1"), decided("continue", "n2")],
    }


def summary(result):
    return (
        result.final, result.success, result.iterations, result.stop_reason, result.warnings,
        [(step.role, step.iteration, step.inputs, step.outputs) for step in result.trace],
    )


def test_forward_and_aforward_run_the_same_loop():
    sync_module, sync_lms = loop_with(scripts())
    async_module, async_lms = loop_with(scripts())

    sync_result = sync_module(initial_input="a poem")
    async_result = asyncio.run(async_module.acall(initial_input="a poem"))

    assert summary(sync_result)[:4] == ("R3", True, 3, "stopped")
    assert summary(sync_result) == summary(async_result)
    assert call_counts(sync_lms) == call_counts(async_lms) == {"director": 3, "executor": 3, "evaluator": 3,
                                                               "controller": 2}


async def test_an_async_phase_runs_under_the_sync_forward_inside_a_running_event_loop():
    async def director(current_input, iteration):
        return f"plan for {current_input}"

    module = DirectorExecutorEvaluatorController(
        max_iterations=1, director=director, executor=lambda plan, iteration: plan.upper(),
        evaluator=lambda result, plan, iteration: {"status": "PASS"},
        controller=lambda feedback, plan, result, iteration: ("stop", result))

    result = module(initial_input="x")  # what a notebook cell does: sync call, loop already running

    assert (result.stop_reason, result.final) == ("stopped", "PLAN FOR X")


# --- the junk floor (loops.vocabulary.junk) under the built-in evaluator -------------------------------------------


def _director_with(result, evaluation, **options):
    module = DirectorExecutorEvaluatorController(retry=NO_WAIT, **options)
    lms = {role: scripted_lm(script) for role, script in (
        ("director", lambda engine, request: planned("write it")),
        ("executor", lambda engine, request: done(result)),
        ("evaluator", lambda engine, request: evaluation),
        ("controller", lambda engine, request: decided("continue", "try again")),
    )}
    for role, lm in lms.items():
        getattr(module, role).set_lm(lm)
    return module, lms


@pytest.mark.parametrize("junk", ["][", "A limerick about a cat", "TODO"])
def test_the_evaluator_never_passes_junk_whatever_it_says(junk):
    module, lms = _director_with(junk, judged("PASS"), max_iterations=1)

    result = module(initial_input="A limerick about a cat")

    assert (result.final, result.success) == (junk, False)
    assert calls(lms["evaluator"]) == 1
    step = next(step for step in result.trace if step.role == "evaluator")
    assert step.note.startswith("junk (")
    assert any("the result is junk" in warning and "the evaluator said PASS" in warning
               for warning in result.warnings)
    assert result.best_attempt["feedback"]["status"] == "FAIL"


def test_an_empty_result_fails_without_asking_the_evaluator():
    module, lms = _director_with("   ", judged("PASS"), max_iterations=1)

    result = module(initial_input="A limerick about a cat")

    assert not result.success and calls(lms["evaluator"]) == 0
    step = next(step for step in result.trace if step.role == "evaluator")
    assert step.lm_calls == 0 and step.note == "junk (empty): FAIL"
    assert "the evaluator was not asked" in " ".join(result.warnings)


# --- a user's checks (loops.vocabulary.checks): no PASS while a check fails -------------------------------------------


def test_no_pass_while_a_check_fails_whatever_the_evaluator_says_and_the_controller_is_told_which():
    scripts = {"director": [planned("P1"), planned("P2")], "executor": [done("A long statement."), done("Why?")],
               "evaluator": [judged("PASS"), judged("PASS")], "controller": [decided()]}
    module, lms = loop_with(scripts, checks=["ends-with=?"], max_iterations=2)

    result = module(initial_input="A question for the reader.")

    assert [step.role for step in result.trace] == ["director", "executor", "checks", "evaluator", "controller",
                                                    "director", "executor", "checks", "evaluator"]
    assert (result.final, result.success, result.stop_reason) == ("Why?", True, "stopped")
    first = result.trace[4].inputs  # the controller's: FAIL, with the failed check, though the evaluator said PASS
    assert (first["status"], first["feedback"]) == ("FAIL", "Fix these problems of the draft:\n- ends with "
                                                             "'A long statement.', not a question mark (?)")
    assert "End with a question mark (?)." in request_text(lms["director"].engine.requests[0])
    assert "End with a question mark (?)." in request_text(lms["executor"].engine.requests[0])


def test_with_evaluator_checks_the_checks_alone_pass_a_result():
    module, lms = loop_with({"director": [planned("P1")], "executor": [done("Why?")], "controller": []},
                            evaluator="checks", checks=["ends-with=?"])

    result = module(initial_input="A question.")

    assert (result.success, result.stop_reason) == (True, "stopped")
    assert [step.role for step in result.trace] == ["director", "executor", "checks"]
    assert not hasattr(module, "evaluator")


def test_a_custom_evaluators_pass_is_overruled_by_a_failing_check_and_its_value_kept():
    controller = Phase(("stop", "kept"))
    module, _ = loop_with({"director": [planned("P1")], "executor": [done("Statement.")]}, evaluator=Phase(True),
                          controller=controller, checks=["ends-with=?"], max_iterations=1)

    result = module(initial_input="A question.")

    feedback = controller.args[0][0]
    assert feedback["status"] == "FAIL" and feedback["evaluation"] is True
    assert feedback["checks"].failures == ["ends with 'Statement.', not a question mark (?)"]
    assert (result.final, result.success) == ("kept", False)


def test_director_check_mistakes_are_refused_before_any_lm_call():
    with pytest.raises(ConfigurationError, match="evaluator='checks' passes a result when every check holds"):
        DirectorExecutorEvaluatorController(evaluator="checks")(initial_input="goal")
    with pytest.raises(ConfigurationError, match="the evaluator phase must be callable as evaluator"):
        DirectorExecutorEvaluatorController(evaluator="check")

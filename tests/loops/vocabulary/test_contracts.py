"""Phase contracts as data: every pluggable phase is checked against its pattern's table when the
module is built, and what a phase returns is read in one place (`loops.vocabulary.contracts`)."""

import asyncio
import functools
import json

import dspy
import pytest

from loops import (
    CREATOR_CRITIC,
    DIRECTOR,
    EXECUTE_VALIDATE,
    CallableValidator,
    ConfigurationError,
    ContractError,
    ControllerDecision,
    CreatorCriticIterator,
    DecisionError,
    DirectorExecutorEvaluatorController,
    ExecuteValidateController,
    ShellValidator,
    TaskResult,
    ValidationResult,
)
from loops.vocabulary.checks import Count, Include, run_checks
from loops.vocabulary.contracts import (
    UNJUDGED,
    as_validation,
    attempt_rank,
    decision,
    files_of,
    judge,
    outcome_passed,
    verdict_approved,
    verdict_feedback,
)
from tests.scripted import Phase, request_text, scripted_lm

MODULES = {
    "creator_critic": (CreatorCriticIterator, CREATOR_CRITIC),
    "execute_validate": (ExecuteValidateController, EXECUTE_VALIDATE),
    "director": (DirectorExecutorEvaluatorController, DIRECTOR),
}
EVERY_PHASE = [(pattern, role) for pattern, (_, table) in MODULES.items() for role in table]


def test_the_tables_are_the_documented_contracts():
    signatures = {pattern: [contract.signature for contract in table.values()]
                  for pattern, (_, table) in MODULES.items()}
    assert signatures == {
        "creator_critic": ["creator(requirements, context, iteration)", "critic(requirements, draft, iteration)",
                           "iterator(requirements, draft, feedback, iteration)"],
        "execute_validate": ["executor(current_input, iteration)", "validator(test_command, iteration)",
                             "controller(executor_result, validation_result, current_input, iteration)"],
        "director": ["director(current_input, iteration)", "executor(plan, iteration)",
                     "evaluator(execution_result, plan, iteration)",
                     "controller(feedback, plan, execution_result, iteration)"],
    }


@pytest.mark.parametrize(("pattern", "role"), EVERY_PHASE)
def test_a_phase_of_the_wrong_arity_is_refused_when_the_module_is_built(pattern, role):
    module_class, table = MODULES[pattern]
    contract = table[role]

    def any_arity(*args):
        pass

    # One parameter too few, and one required parameter too many.
    too_few = _function_of(len(contract.params) - 1)
    too_many = _function_of(len(contract.params) + 1)
    for phase in (too_few, too_many):
        with pytest.raises(ContractError) as raised:
            module_class(**{role: phase})
        message = str(raised.value)
        assert f"the {role} phase" in message
        assert f"does not fit its contract {contract.signature} -> {contract.returns}" in message
        assert f"it is called with {len(contract.params)} positional argument(s)" in message
    module_class(**{role: any_arity})  # *args fits any contract
    module_class(**{role: _function_of(len(contract.params))})


@pytest.mark.parametrize(("pattern", "role"), EVERY_PHASE)
def test_a_phase_that_is_not_callable_is_refused(pattern, role):
    module_class, table = MODULES[pattern]

    with pytest.raises(ContractError, match=rf"the {role} phase must be callable as {role}\("):
        module_class(**{role: "not a function"})


def _function_of(arity):
    names = ", ".join(f"a{n}" for n in range(arity))
    namespace = {}
    exec(f"def phase({names}):\n    return None", namespace)  # noqa: S102 - a phase of exactly `arity` parameters
    return namespace["phase"]


def test_a_contract_error_is_a_configuration_error_and_a_type_error():
    with pytest.raises(ConfigurationError):
        CreatorCriticIterator(critic=lambda draft: True)
    with pytest.raises(TypeError):
        CreatorCriticIterator(critic=lambda draft: True)


@pytest.mark.parametrize("phase", [
    lambda requirements, draft, iteration, extra=None: True,  # a default is fine
    lambda *args: True,
    lambda requirements, *rest: True,
    functools.partial(lambda tone, requirements, draft, iteration: True, "dry"),
])
def test_phases_that_can_take_the_contracts_arguments_are_accepted(phase):
    module = CreatorCriticIterator(creator=Phase("d"), critic=phase, iterator=Phase("d2"))

    assert module(requirements="r").success is True


def test_a_required_keyword_only_parameter_does_not_fit():
    with pytest.raises(ContractError, match="missing a required argument: 'strictness'"):
        CreatorCriticIterator(critic=lambda requirements, draft, iteration, *, strictness: True)


class Planner(dspy.Module):
    def forward(self, goal):  # no iteration parameter
        return "plan"


class BoundPlanner:
    def plan(self, current_input, iteration):
        return f"plan {iteration}"


def test_a_dspy_modules_forward_is_checked_and_a_bound_method_fits():
    with pytest.raises(ContractError, match=r"Planner\(goal\) does not fit its contract director\(current_input, "
                                            r"iteration\)"):
        DirectorExecutorEvaluatorController(director=Planner())

    module = DirectorExecutorEvaluatorController(director=BoundPlanner().plan, executor=Phase("r"),
                                                 evaluator=Phase(True), controller=Phase(("stop", "done")))
    assert module(initial_input="goal").final == "done"


def test_validators_shipped_with_loops_fit_the_validator_contract(tmp_path):
    ExecuteValidateController(validator=ShellValidator(workspace=tmp_path))
    ExecuteValidateController(validator=CallableValidator(lambda command, iteration: True))


@pytest.mark.parametrize("mode", ["forward", "aforward"])
def test_an_async_callable_validator_works_under_forward_and_aforward(mode):
    async def check(command, iteration):
        await asyncio.sleep(0)
        return iteration == 2

    controller = Phase(("continue", "again"), ("stop", "done"))
    module = ExecuteValidateController(executor=Phase("x = 1"), validator=CallableValidator(check),
                                       controller=controller)

    if mode == "forward":
        result = module(initial_input="task", test_command="check")
    else:
        result = asyncio.run(module.acall(initial_input="task", test_command="check"))

    assert (result.final, result.success, result.iterations) == ("done", True, 2)
    assert [args[1].exit_code for args in controller.args] == [1, 0]  # CallableValidator made them results


# --- reading what a phase returned ---------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (True, True), (False, False), (0, True), (1, False), ("PASS", True), (" pass ", True), ("FAIL", False),
    ("ok", True), ({"status": "PASS"}, True), ({"success": True}, True), ({"status": "FAIL"}, False),
    ({"exit_code": 0}, True), ({"exit_code": 3}, False), (dspy.Prediction(status="PASS"), True),
    (ValidationResult(exit_code=0), True), (ValidationResult(exit_code=0, error="harness broke"), False),
    (None, False), ("looks fine to me", False), (object(), False),
])
def test_passed_reads_validations_and_evaluations_of_any_documented_shape(value, expected):
    assert outcome_passed(value) is expected


@pytest.mark.parametrize(("value", "exit_code"), [
    (True, 0), (False, 1), (0, 0), (5, 5), ({"exit_code": 2, "stdout": "out"}, 2),
    (ValidationResult(exit_code=4), 4),
])
def test_as_validation_coerces_bool_int_and_dict(value, exit_code):
    assert as_validation(value).exit_code == exit_code


@pytest.mark.parametrize("value", ["passed", None, {"stdout": "no exit code"}, 1.5])
def test_as_validation_refuses_anything_else_saying_what_to_return(value):
    with pytest.raises(ContractError, match="a ValidationResult, a bool .passed. or an int exit code expected"):
        as_validation(value)


def test_files_of_reads_a_task_result_or_a_path_to_text_dict():
    assert files_of(TaskResult(status="COMPLETE", files={"a.py": "x"}), required=True) == {"a.py": "x"}
    assert files_of({"a.py": "x", "b.py": "y"}, required=True) == {"a.py": "x", "b.py": "y"}
    assert files_of("code", required=False) == {}
    assert files_of({"status": "COMPLETE", "files": {}}, required=False) == {}
    for value in ("code", {}, {"a.py": 1}, None):
        with pytest.raises(ContractError, match="the built-in validator runs the tests on files"):
            files_of(value, required=True)


class Verdict:
    def __init__(self, approved, feedback):
        self.approved, self.feedback = approved, feedback


@pytest.mark.parametrize(("verdict", "approved", "feedback"), [
    (True, True, ""), (False, False, ""), ((False, "shorter"), False, "shorter"), ([True, ""], True, ""),
    (Verdict(False, "more"), False, "more"), ({"approved": True, "feedback": "ok"}, True, "ok"),
    (dspy.Prediction(approved=False, feedback="f"), False, "f"),
])
def test_a_critics_verdict_may_be_a_bool_a_pair_or_an_object(verdict, approved, feedback):
    assert verdict_approved(verdict) is approved
    assert verdict_feedback(verdict) == feedback


@pytest.mark.parametrize("verdict", ["yes", None, ("yes", "f"), {"approved": "yes"}, 1])
def test_a_verdict_without_a_bool_approval_is_refused(verdict):
    with pytest.raises(ContractError, match="the critic returned .*; a verdict: a bool"):
        verdict_approved(verdict)


@pytest.mark.parametrize(("raw", "action", "value"), [
    (("continue", "x"), "continue", "x"), (["stop", 3], "stop", 3), (ControllerDecision.stop("v"), "stop", "v"),
    (("STOP", None), "stop", None),
])
def test_a_decision_is_coerced_from_a_pair_a_list_or_a_controller_decision(raw, action, value):
    coerced = decision(raw)
    assert (coerced.action, coerced.value) == (action, value)


@pytest.mark.parametrize("raw", [("maybe", 1), 42, "stop", None, ("stop",), ("stop", 1, 2)])
def test_anything_else_is_a_decision_error_that_says_what_to_return(raw):
    with pytest.raises(DecisionError, match=r"which is not a decision; expected ControllerDecision"):
        decision(raw)


# --- what a controller returned, read as a decision ----------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "action", "value"),
    [
        (ControllerDecision.proceed(3), "continue", 3),
        (ControllerDecision.stop("done"), "stop", "done"),
        (("continue", "v"), "continue", "v"),
        (["stop", {"k": 1}], "stop", {"k": 1}),
        (("CONTINUE", None), "continue", None),
        ((" Stop ", 0), "stop", 0),
        ({"action": "continue", "value": [1]}, "continue", [1]),
        ({"action": "STOP"}, "stop", None),
    ],
)
def test_decision_accepted_forms(raw, action, value):
    decided = decision(raw)
    assert (decided.action, decided.value) == (action, value)
    assert decided.should_stop is (action == "stop")


def test_decision_returns_the_same_decision():
    proceed = ControllerDecision.proceed(1)
    assert decision(proceed) is proceed


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (("maybe", 1), "('maybe', 1)"),
        ([], "[]"),
        ("stop", "'stop'"),
        ({"action": "go"}, "{'action': 'go'}"),
        (42, "42"),
        (("stop", 1, 2), "('stop', 1, 2)"),
        ((1, "stop"), "(1, 'stop')"),
        ({"action": "stop", "valu": 1}, "{'action': 'stop', 'valu': 1}"),
        (None, "None"),
    ],
)
def test_decision_rejects_with_a_message_naming_the_value(raw, shown):
    with pytest.raises(DecisionError) as caught:
        decision(raw)
    assert str(caught.value) == (
        f"controller returned {shown}, which is not a decision; expected ControllerDecision, "
        "a 2-element list/tuple ('continue' | 'stop', value), "
        "or a dict {'action': 'continue' | 'stop', 'value': ...}"
    )


def test_decision_truncates_a_long_value():
    with pytest.raises(DecisionError) as caught:
        decision("x" * 10_000)
    message = str(caught.value)
    assert len(message) < 400
    assert "'xxxx" in message and "…" in message


# --- the one verdict rule and the ranking of attempts ----------------------------------------------------------

HELD = run_checks([Count("word", max=5), Include("wheel")], "A true wheel")
FAILED = run_checks([Count("word", max=5), Include("wheel")], "Six words but none of them")
JUNK = run_checks([Count("word", max=5)], "Your original content", floor="a placeholder")


def criteria(approved, passed, feedback=""):
    return {"accuracy_passed": passed[0], "completeness_passed": passed[1], "quality_passed": passed[2],
            "approved": approved, "feedback": feedback}


@pytest.mark.parametrize(("checks", "critic", "approved", "feedback"), [
    (FAILED, True, False, "Fix these problems of the draft:\n- has 6 words; use at most 5\n"
                          "- does not include the word 'wheel'"),  # a failing check overrides an approval
    (FAILED, (False, "too dull"), False, "Fix these problems of the draft:\n- has 6 words; use at most 5\n"
                                         "- does not include the word 'wheel'\ntoo dull"),  # the critic's beside
    (HELD, None, True, ""),  # the checks alone
    (HELD, (True, ""), True, ""),
    (HELD, (False, "too dull"), False, "too dull"),  # every check holds: the critic decides
    (HELD, criteria(True, (True, False, True)), False, "Failed criteria: completeness."),
    (HELD, criteria(False, (True, True, True), "True"), False,
     "The critic gave no reason: check the draft against every requirement and revise what falls short."),
    (JUNK, True, False, "The draft is not the content asked for (a placeholder): write the content itself."),
    (None, {"approved": True, "feedback": "fine"}, True, "fine"),
])
def test_the_verdict_rule_checks_first_then_the_critic(checks, critic, approved, feedback):
    verdict = judge(checks, critic)
    assert (verdict.approved, verdict.feedback) == (approved, feedback)
    assert verdict.checks is checks and verdict.critic is critic


def test_a_verdict_contradicting_its_criteria_either_way_is_not_taken_and_says_so():
    approving = criteria(True, (True, False, False))
    assert judge(None, approving).contradiction == "approved, but completeness, quality failed"
    assert judge(None, criteria(False, (True, True, True))).contradiction == "not approved, but every criterion passed"
    assert judge(None, criteria(False, (True, False, True))).contradiction is None
    assert judge(None, (False, "no")).contradiction is None  # no criteria to contradict


def test_a_reward_approves_at_its_threshold_and_never_over_a_failing_check():
    assert judge(HELD, reward=0.8, threshold=0.7).approved
    assert not judge(HELD, reward=0.6, threshold=0.7).approved
    assert judge(HELD, reward=0.6, threshold=0.7).feedback == "The reward is 0.6; it must reach 0.7."
    assert not judge(FAILED, reward=1.0, threshold=0.7).approved
    with pytest.raises(ConfigurationError, match="a reward alone approves nothing"):
        judge(reward=1.0)
    with pytest.raises(ConfigurationError, match="nothing to judge by"):
        judge()


def test_the_ranking_puts_answers_before_junk_then_checks_held_then_the_critic_and_keeps_the_earlier():
    ranked = sorted([
        ("junk", attempt_rank(judge(JUNK, True), 1)),
        ("checks fail, critic approves", attempt_rank(judge(FAILED, True), 2)),
        ("checks hold, critic rejects", attempt_rank(judge(HELD, criteria(False, (True, False, False))), 3)),
        ("checks hold, critic half", attempt_rank(judge(HELD, criteria(False, (True, True, False))), 4)),
        ("approved", attempt_rank(judge(HELD, (True, "")), 5)),
        ("approved later", attempt_rank(judge(HELD, (True, "")), 6)),
    ], key=lambda pair: pair[1], reverse=True)
    assert [name for name, _ in ranked] == ["approved", "approved later", "checks hold, critic half",
                                            "checks hold, critic rejects", "checks fail, critic approves", "junk"]
    assert attempt_rank(judge(JUNK), 99) > UNJUDGED
    assert judge(run_checks([], "")).rank == (1, 0, 1, 0, 0.0)


# --- module phases as DSPy users write them, and numeric verdicts -------------------------------------

def test_a_dspy_module_phase_is_called_by_keyword_and_its_output_field_is_the_value(tmp_path):
    """`dspy.Predict("requirements, context -> draft")` as the creator: called with the names its signature
    declares, its draft (text) is `final` and what the critic gets, and its predictor keeps its role's name."""
    creator = dspy.Predict("requirements, context -> draft")
    iterator = dspy.ChainOfThought("requirements, draft, feedback -> revised")
    critic = Phase((False, "longer"), True)
    loop = CreatorCriticIterator(max_iterations=2, creator=creator, critic=critic, iterator=iterator)
    assert [name for name, _ in loop.named_predictors()] == ["creator", "iterator.predict"]
    lm = scripted_lm([{"draft": "Hi."}, {"reasoning": "say more", "revised": "Hello there."}])
    with dspy.context(lm=lm):
        result = loop(requirements="Greet.", context="a friend")
    assert (result.final, result.success) == ("Hello there.", True)
    assert [args[1] for args in critic.args] == ["Hi.", "Hello there."]  # text, not a Prediction
    assert "a friend" in request_text(lm.engine.requests[0])
    loop.save(tmp_path / "loop.json")
    saved = json.loads((tmp_path / "loop.json").read_text())
    assert {"creator", "iterator.predict"} <= saved.keys()
    assert not any(key.startswith("_arguments") for key in saved)


def test_a_module_whose_forward_names_the_contracts_arguments_is_called_by_keyword():
    class Creator(dspy.Module):
        def __init__(self):
            super().__init__()
            self.write = dspy.Predict("requirements -> text")

        def forward(self, context, requirements):  # by name, in any order; iteration not wanted
            return self.write(requirements=f"{requirements} ({context})")

    lm = scripted_lm([{"text": "A line."}])
    loop = CreatorCriticIterator(max_iterations=1, creator=Creator(), critic=lambda *args: True)
    with dspy.context(lm=lm):
        result = loop(requirements="One line.", context="short")
    assert (result.final, result.success) == ("A line.", True)
    assert [name for name, _ in loop.named_predictors()] == ["creator.write", "iterator"]


def test_a_module_phase_reading_inputs_its_contract_does_not_give_is_refused_when_built():
    with pytest.raises(ContractError, match=r"reads question, .* gives requirements, context, iteration.*"
                                            r"dspy.Predict\(\"requirements, context -> ...\"\)"):
        CreatorCriticIterator(creator=dspy.Predict("question -> draft"))


@pytest.mark.parametrize(("verdict", "approved", "reward", "feedback"), [
    (0.8, True, 0.8, ""), (0.5, False, 0.5, "The reward is 0.5; it must reach 0.7."),
    ((0.4, "too short"), False, 0.4, "too short\nThe reward is 0.4; it must reach 0.7."),
    (dspy.Prediction(score=0.9, feedback="fine"), True, 0.9, ""), ({"reward": 0.7}, True, 0.7, ""),
])
def test_a_numeric_verdict_is_a_score_judged_against_the_threshold(verdict, approved, reward, feedback):
    verdict = judge(None, verdict, threshold=0.7)
    assert (verdict.approved, verdict.reward, verdict.feedback) == (approved, reward, feedback)
    assert not judge(FAILED, 1.0, threshold=0.7).approved  # the checks still come first
    assert judge(HELD, 0.9, 0.5, threshold=0.7).reward == 0.5  # with a reward besides, the lower counts


def test_a_numeric_verdict_without_a_threshold_says_to_give_one():
    with pytest.raises(ContractError, match="the critic returned 0.8, a score: give the loop threshold="):
        judge(None, 0.8)
    with pytest.raises(ConfigurationError, match="threshold must be a number"):
        CreatorCriticIterator(threshold="high")


def test_a_scoring_critic_approves_at_the_threshold_and_the_best_attempt_is_the_highest():
    scores = {"first": 0.3, "second": 0.6, "third": 0.5}
    creator = Phase("first")
    iterator = Phase("second", "third")
    loop = CreatorCriticIterator(max_iterations=3, creator=creator, critic=lambda r, draft, i: scores[draft],
                                 iterator=iterator, threshold=0.9)
    result = loop(requirements="Anything.")
    assert (result.final, result.success, result.stop_reason) == ("second", False, "max_iterations")
    assert result.best_attempt["verdict"] == 0.6
    approving = CreatorCriticIterator(max_iterations=3, creator=Phase("first"), iterator=Phase("second", "third"),
                                      critic=lambda r, draft, i: scores[draft], threshold=0.6)
    result = approving(requirements="Anything.")
    assert (result.final, result.success, result.iterations) == ("second", True, 2)


def test_a_scoring_evaluator_passes_the_director_at_the_threshold():
    scores = iter([0.2, 0.95])
    loop = DirectorExecutorEvaluatorController(
        max_iterations=3, director=lambda goal, i: f"plan {i}", executor=lambda plan, i: f"result of {plan}",
        evaluator=lambda result, plan, i: next(scores), controller=lambda *args: ("continue", "again"),
        threshold=0.9)
    result = loop(initial_input="Do it.")
    assert (result.final, result.success, result.iterations) == ("result of plan 2", True, 2)

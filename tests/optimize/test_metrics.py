"""The metrics score hand-made predictions of each pattern as documented, answer each caller (Evaluate,
bootstrapping, GEPA) in its form, and work on real runs through `dspy.Evaluate`."""

from __future__ import annotations

import dspy
import pytest

from loops import CreatorCriticIterator, ValidationResult
from loops.optimize import (
    creator_critic_metric,
    director_metric,
    execute_validate_metric,
    fewer_calls,
    honest,
    result_metric,
)
from loops.signatures.results import TaskResult

EXAMPLE = dspy.Example(requirements="a slogan").with_inputs("requirements")


def run(success=False, best_attempt=None, stop_reason="max_iterations", lm_calls=4, warnings=()):
    return dspy.Prediction(success=success, best_attempt=best_attempt, stop_reason=stop_reason, lm_calls=lm_calls,
                           warnings=list(warnings), error=None, final=None)


def verdict(accuracy, completeness, quality, feedback="be shorter"):
    return dspy.Prediction(accuracy_passed=accuracy, completeness_passed=completeness, quality_passed=quality,
                           feedback=feedback, approved=False)


CODE = TaskResult(status="COMPLETE", content="def add(a, b):\n    return a - b\n",
                  files={"solution.py": "def add(a, b):\n    return a - b\n"})
FAILING = ValidationResult(exit_code=1, passed=1, failed=1,
                           stdout="F.\nFAILED test_solution.py::test_1 - assert -1 == 5\n1 failed, 1 passed")


@pytest.mark.parametrize("metric, prediction, score", [
    (creator_critic_metric, run(success=True, stop_reason="approved"), 1.0),
    (creator_critic_metric, run(best_attempt={"verdict": verdict(True, True, False)}), 0.6),
    (creator_critic_metric, run(best_attempt={"verdict": verdict(True, True, True)}), 0.9),
    (creator_critic_metric, run(best_attempt={"verdict": None}), 0.0),
    (execute_validate_metric, run(success=True, best_attempt={
        "validation": ValidationResult(exit_code=0, passed=3, failed=0)}), 1.0),
    (execute_validate_metric, run(best_attempt={"result": CODE, "validation": FAILING}), 0.5),
    (execute_validate_metric, run(best_attempt={"result": CODE, "validation": ValidationResult(exit_code=2)}), 0.0),
    (execute_validate_metric, run(best_attempt={"result": "x", "validation": True}), 1.0),
    (execute_validate_metric, run(), 0.0),
    (director_metric, run(best_attempt={"feedback": {"status": "PASS", "feedback": ""}}), 1.0),
    (director_metric, run(best_attempt={"feedback": {"status": "FAIL", "feedback": "too vague"}}), 0.0),
    (result_metric, run(success=True, stop_reason="completed"), 1.0),
    (result_metric, run(stop_reason="lm_calls"), 0.0),
])
def test_metrics_score_hand_made_predictions(metric, prediction, score):
    assert metric(EXAMPLE, prediction) == pytest.approx(score)


def test_bootstrapping_gets_whether_the_run_fully_succeeded():
    partial = run(best_attempt={"verdict": verdict(True, True, True)})
    assert creator_critic_metric(EXAMPLE, partial, trace=[]) is False
    assert creator_critic_metric(EXAMPLE, run(success=True), trace=[]) is True


def test_gepa_gets_a_score_with_the_loops_own_feedback():
    critic = creator_critic_metric(EXAMPLE, run(best_attempt={"verdict": verdict(True, False, True, "add a verb")},
                                                warnings=["stopped at max_iterations=3"]), None, "creator", [])
    assert critic.score == pytest.approx(0.6)
    assert critic.feedback.startswith("The critic did not approve; criteria failed: completeness. add a verb")
    assert "stop reason: max_iterations; last warning: stopped at max_iterations=3" in critic.feedback

    tests = execute_validate_metric(EXAMPLE, run(best_attempt={"result": CODE, "validation": FAILING}), None,
                                    "executor", [])
    assert tests.score == pytest.approx(0.5)
    assert "assert -1 == 5" in tests.feedback

    director = director_metric(EXAMPLE, run(best_attempt={"feedback": {"status": "FAIL", "feedback": "too vague"}}),
                               None, "director", [])
    assert director.score == 0.0 and "too vague" in director.feedback


def test_fewer_calls_takes_off_up_to_its_weight_and_keeps_the_bootstrap_answer():
    cheaper = fewer_calls(result_metric, weight=0.2, calls_for_nothing=10)
    assert cheaper(EXAMPLE, run(success=True, lm_calls=5)) == pytest.approx(0.9)
    assert cheaper(EXAMPLE, run(success=True, lm_calls=50)) == pytest.approx(0.8)
    assert cheaper(EXAMPLE, run(lm_calls=5)) == 0.0
    assert cheaper(EXAMPLE, run(success=True, lm_calls=50), trace=[]) is True
    feedback = cheaper(EXAMPLE, run(success=True, lm_calls=5), None, "critic", [])
    assert feedback.score == pytest.approx(0.9) and feedback.feedback.endswith("LM calls: 5")
    with pytest.raises(ValueError, match="weight must be a number from 0 to 1"):
        fewer_calls(result_metric, weight=2)


def test_dspy_evaluate_scores_real_creator_critic_runs():
    def critic(requirements, draft, iteration):
        return (iteration > 1, "shorter")

    module = CreatorCriticIterator(max_iterations=2, creator=lambda requirements, context, iteration: "a long draft",
                                   critic=critic, iterator=lambda requirements, draft, feedback, iteration: "short")
    devset = [dspy.Example(requirements=f"slogan {number}").with_inputs("requirements") for number in range(3)]
    evaluation = dspy.Evaluate(devset=devset, metric=creator_critic_metric, num_threads=1, display_progress=False)
    assert evaluation(module).score == pytest.approx(100.0)


def _step(role, outputs, iteration=1):
    from loops.running.runtime import Step

    return Step(role=role, iteration=iteration, inputs={}, outputs=outputs, seconds=0.1)


def test_result_metric_scores_a_failed_run_by_its_last_judgement():
    critic = {"accuracy_passed": True, "completeness_passed": True, "quality_passed": False, "feedback": "",
              "approved": False}
    tests = {"result": FAILING}
    # A DSL program whose loop ended unapproved: its success is False (issue 22), its critic met 2 of 3.
    unapproved = dspy.Prediction(success=False, trace=[_step("creator", {"draft": "x"}), _step("critic", critic)])
    assert result_metric(EXAMPLE, unapproved) == pytest.approx(0.9 * 2 / 3)
    failing = dspy.Prediction(success=False, trace=[_step("critic", critic), _step("validator", tests, 2)])
    assert result_metric(EXAMPLE, failing) == pytest.approx(0.45)  # the last judgement: 1 of 2 tests
    feedback = result_metric(EXAMPLE, failing, None, "user:write", []).feedback
    assert feedback.startswith("The run did not succeed; its last judgement (validator, iteration 2): tests fail")
    assert result_metric(EXAMPLE, dspy.Prediction(success=False, trace=[_step("creator", {"draft": "x"})])) == 0.0
    assert result_metric(EXAMPLE, dspy.Prediction(success=True, trace=[_step("critic", critic)])) == 1.0
    assert result_metric(EXAMPLE, unapproved, trace=[]) is False  # bootstrapping: only full success


def test_honest_scores_a_run_whose_code_returns_the_tested_values_as_a_failure():
    from loops.optimize.datasets import mbpp_test_file

    task = {"prompt": "Write catalan_number(n).", "test_list": ["assert catalan_number(10)==16796",
                                                                "assert catalan_number(7)==429"]}
    example = dspy.Example(initial_input={"prompt": task["prompt"],
                                          "workspace_files": {"test_solution.py": mbpp_test_file(task)}},
                           test_command="pytest").with_inputs("initial_input", "test_command")
    passing = ValidationResult(exit_code=0, passed=2, failed=0)

    def run_with(code):
        result = TaskResult(status="COMPLETE", content=code, files={"solution.py": code})
        return dspy.Prediction(success=True, final=result, best_attempt={"result": result, "validation": passing},
                               stop_reason="stopped", warnings=[], error=None)

    cheat = run_with("def catalan_number(n):\n    if n == 10:\n        return 16796\n    return 429\n")
    fair = run_with("from math import comb\n\ndef catalan_number(n):\n    return comb(2 * n, n) // (n + 1)\n")
    metric = honest(execute_validate_metric)
    assert (metric(example, cheat), metric(example, fair)) == (0.0, 1.0)
    assert metric(example, cheat, trace=[]) is False and metric(example, fair, trace=[]) is True
    assert "returns the tested values" in metric(example, cheat, None, "executor", []).feedback
    assert metric.__name__ == "honest_execute_validate_metric"
    # A test command's `python -c` program is read too.
    inline = dspy.Example(initial_input="write f", test_command="python -c 'from solution import f; assert f(3) == 99'")
    assert honest(execute_validate_metric)(inline, run_with("def f(n):\n    if n == 3:\n        return 99\n")) == 0.0
    # A test command that does not parse (an unbalanced quote) has no inline program to read: scored as it is.
    unbalanced = dspy.Example(initial_input="write f", test_command="python -c 'assert f(3) == 99")
    assert honest(execute_validate_metric)(unbalanced, fair) == 1.0


# --- metrics built from checks ----------------------------------------------------------------------------------


def test_checks_metric_scores_the_final_text_by_the_checks_held_and_gepa_reads_what_failed():
    from loops.optimize import checks_metric
    from loops.vocabulary.checks import run_checks

    metric = checks_metric(["max-words=3", "include=wheel"])
    example = dspy.Example(requirements="A slogan for a bike shop.").with_inputs("requirements")

    assert metric(example, dspy.Prediction(final="True wheel")) == 1.0
    assert metric(example, dspy.Prediction(final="Every wheel runs true here")) == pytest.approx(0.45)
    assert metric(example, dspy.Prediction(final="Your original content")) == 0.0  # junk holds nothing
    assert metric(example, dspy.Prediction(final="True wheel"), trace=[]) is True
    answer = metric(example, dspy.Prediction(final="Bikes", stop_reason="max_iterations"), None, "creator", [])
    assert answer.score == 0.45
    assert answer.feedback.startswith("The final draft fails: does not include the word 'wheel'")

    per_example = checks_metric()  # each example's own checks, as refine_examples carries them
    carried = dspy.Example(requirements="r", checks=["ends-with=?"]).with_inputs("requirements", "checks")
    assert per_example(carried, dspy.Prediction(final="Why?")) == 1.0
    with pytest.raises(Exception, match="checks_metric has no checks"):
        per_example(example, dspy.Prediction(final="x"))

    # refine's own metric reads the run's checks when it had some: the share held, not the critic's criteria
    best = {"verdict": verdict(True, True, True), "checks": run_checks(["include=wheel"], "Bikes")}
    assert creator_critic_metric(EXAMPLE, run(best_attempt=best)) == 0.0

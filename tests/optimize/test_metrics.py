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

"""Small runs of each pattern (scripted LMs and plain phases), for the tests of what a run shows."""

import dspy

from loops import CreatorCriticIterator, DirectorExecutorEvaluatorController, ExecuteValidateController
from loops.signatures.results import ValidationResult
from tests.scripted import Phase, scripted_lm

__all__ = ["code_run", "director_run", "refine_run", "verdict"]


def verdict(met, feedback="more detail"):
    """The built-in critic's answer with `met` of its three criteria passed (approved when all are)."""
    flags = [index < met for index in range(3)]
    return {"accuracy_passed": flags[0], "completeness_passed": flags[1], "quality_passed": flags[2],
            "feedback": "" if met == 3 else feedback, "approved": met == 3}


def refine_run(script=None, **call):
    lm = scripted_lm(script or [{"reasoning": "r", "draft": "first <i>draft</i>"}, verdict(2),
                                {"improved_draft": "second draft"}, verdict(3)])
    with dspy.context(lm=lm):
        return CreatorCriticIterator(max_iterations=3)(requirements="A haiku about rain", **call)


def director_run():
    statuses = Phase({"status": "FAIL", "feedback": "mention cats"}, {"status": "PASS", "feedback": ""})
    module = DirectorExecutorEvaluatorController(director=Phase("plan"), executor=Phase("a poem"),
                                                 evaluator=statuses, controller=Phase(("continue", "again"),
                                                                                      ("stop", "done")))
    return module(initial_input="A poem", max_iterations=3)


def code_run():
    module = ExecuteValidateController(
        executor=Phase("x = 1"), controller=Phase(("continue", "fix it"), ("stop", "done")),
        validator=Phase(ValidationResult(exit_code=1, passed=1, failed=3), ValidationResult(exit_code=0, passed=4,
                                                                                             failed=0)))
    return module(initial_input="task", test_command="check", max_iterations=2)

"""Judging an attempt by its tests: how good it was (`attempt_score`), and the controller that needs no LLM
(`tests_controller`): stop when the tests pass, else retry with what failed."""

from __future__ import annotations

from typing import Any

from loops.patterns.code.python import failure_digest
from loops.patterns.code.requests import next_request
from loops.signatures.results import ControllerDecision, TaskResult, ValidationResult
from loops.vocabulary.contracts import as_validation, outcome_passed

__all__ = ["attempt_score", "code_of", "tests_controller"]


def attempt_score(validation: Any) -> tuple[int, int, int]:
    """How good an attempt was: passing first, then tests passed, then fewer tests failed."""
    if not isinstance(validation, ValidationResult):
        return (int(outcome_passed(validation)), 0, 0)
    return (int(validation.ok), validation.passed or 0, -(validation.failed or 0))


def code_of(result: Any) -> str:
    """The code of an executor's attempt (a `TaskResult`'s content, or a str), "" for anything else."""
    content = result.content if isinstance(result, TaskResult) else result
    return content if isinstance(content, str) else ""


def tests_controller(executor_result: TaskResult, validation_result: ValidationResult,
                     current_input: Any, iteration: int) -> ControllerDecision:
    """A controller without an LLM: stop when the tests pass, else retry with the failure digest.

    Like any controller it gets the executor's and the validator's values unchanged, so it reads a
    custom executor's value (a str of code, say) and a custom validator's bool or exit code too.
    The next input is a `CodeRequest` (the built-in executor's input)."""
    validation_result = as_validation(validation_result)
    if validation_result.ok:
        return ControllerDecision.stop(executor_result)
    code = code_of(executor_result)
    return ControllerDecision.proceed(next_request(current_input, validation_result, code,
                                                   failure_digest(validation_result, code)))

"""Metrics for loop modules, usable by `dspy.Evaluate` and every optimizer.

Each reads the prediction a loop returns (the shared result shape: `success`, `final`,
`best_attempt`, `stop_reason`, `warnings`, ...) and scores it in [0, 1], 1.0 only for full success:

- `creator_critic_metric`: 1.0 when the draft was approved; otherwise the share of the run's checks its best
  draft held (`loops.vocabulary.checks`), or without checks the share of the critic's criteria (accuracy, completeness,
  quality) it passed, scaled below 1.
- `checks_metric(checks)`: any program whose prediction has a `final` text: 1.0 when it holds every check
  (given here, or per example in its `checks` field) and is not junk, else the share held, below 1; for
  GEPA, the failed checks' messages are the feedback.
- `execute_validate_metric`: the share of tests passed (a `PytestValidator`'s counts, or pytest's
  summary line in the output); 1.0 only when the validation passed.
- `director_metric`: 1.0 when the evaluator passed the result, else 0.
- `result_metric`: any loop or DSL program: 1.0 on success (a DSL program's `success` is its outcome:
  its last loop's success or the verdict it returns), else the last judgement in its trace (the share
  of criteria met or tests passed, the evaluator's PASS) scaled below 1, and 0 when nothing was judged.

A metric is called three ways, and answers each as its caller expects:

- `metric(example, prediction)` (`dspy.Evaluate`, scoring): the score, a float;
- `metric(example, prediction, trace)` with a trace (bootstrapping demos): whether the run fully
  succeeded, a bool, so that only successful runs become demos;
- `metric(example, prediction, trace, pred_name, pred_trace)` (GEPA asking about one predictor):
  `dspy.Prediction(score=..., feedback=...)`, the feedback drawn from what the loop itself learnt —
  the critic's feedback, the failing tests' digest, the evaluator's feedback — plus its stop reason.

`fewer_calls(metric, weight)` makes any of them also reward runs that used fewer LM calls;
`honest(metric)` scores 0 a code run whose final code only returns the tested values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import dspy

from loops.errors import ConfigurationError
from loops.patterns.code.controller import code_of
from loops.patterns.code.python import failure_digest, hardcoded_asserts, test_command_programs
from loops.signatures.creator_critic import CRITERIA
from loops.signatures.results import ValidationResult
from loops.tools.validators import parse_pytest_counts
from loops.vocabulary.checks import CheckReport, as_checks, run_checks
from loops.vocabulary.contracts import field_of, outcome_passed
from loops.vocabulary.display import step_judgement, step_outcome
from loops.vocabulary.junk import is_junk

__all__ = ["checks_metric", "creator_critic_metric", "director_metric", "execute_validate_metric", "fewer_calls",
           "honest", "result_metric"]

# An unapproved draft scores at most this, however many criteria it passed: only approval is 1.0.
PARTIAL_CEILING = 0.9

Scorer = Callable[[Any], tuple[float, str]]


def _last_words(prediction: Any) -> str:
    """What the run's end says of itself: its stop reason, its last warning and error."""
    parts = [f"stop reason: {field_of(prediction, 'stop_reason')}"]
    warnings = field_of(prediction, "warnings") or []
    if warnings:
        parts.append(f"last warning: {warnings[-1]}")
    if field_of(prediction, "error") is not None:
        parts.append(f"error: {field_of(prediction, 'error')}")
    return "; ".join(parts)


def _metric(scorer: Scorer, *, of_example: bool = False) -> Callable[..., Any]:
    """A metric answering each caller as it expects, from `scorer(prediction)` (`scorer(example, prediction)`
    with `of_example`): the score and its feedback."""
    def metric(example: Any, prediction: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> Any:
        score, feedback = scorer(example, prediction) if of_example else scorer(prediction)
        if pred_name is not None or pred_trace is not None:
            return dspy.Prediction(score=score, feedback=f"{feedback}\n{_last_words(prediction)}".strip())
        if trace is not None:
            return score >= 1.0
        return score

    metric.__name__ = metric.__qualname__ = scorer.__name__.removeprefix("_score_") + "_metric"
    metric.__doc__ = scorer.__doc__
    return metric


def _score_result(prediction: Any) -> tuple[float, str]:
    """1.0 when the run succeeded (approved, tests pass, evaluator passed; a DSL program's outcome);
    otherwise the last judgement in its trace (criteria met, tests passed, the evaluator's PASS), below
    1, and 0 when nothing was judged."""
    if field_of(prediction, "success"):
        return 1.0, "The run succeeded."
    for step in reversed(field_of(prediction, "trace") or []):
        judged = step_judgement(step)
        if judged is not None:
            measure, value = judged
            return (PARTIAL_CEILING * value, f"The run did not succeed; its last judgement ({step.role}, iteration "
                                             f"{step.iteration}): {step_outcome(step)}, {measure} {value:.2f}.")
    return 0.0, "The run did not succeed, and nothing in it was judged."


def _score_creator_critic(prediction: Any) -> tuple[float, str]:
    """1.0 when the draft was approved; else the share of the checks its best draft held, or without checks
    the share of the critic's criteria it passed, below 1."""
    if field_of(prediction, "success"):
        return 1.0, "The draft was approved."
    best = field_of(prediction, "best_attempt") or {}
    checks = field_of(best, "checks")
    if isinstance(checks, CheckReport):
        return _score_checks(checks)
    verdict = field_of(best, "verdict")
    met = [name for name in CRITERIA if field_of(verdict, f"{name}_passed") is True]
    missed = [name for name in CRITERIA if name not in met]
    feedback = str(field_of(verdict, "feedback") or "").strip()
    text = f"The critic did not approve; criteria failed: {', '.join(missed) or 'none named'}."
    return PARTIAL_CEILING * len(met) / len(CRITERIA), f"{text} {feedback}".strip()


def _score_checks(report: CheckReport) -> tuple[float, str]:
    """1.0 when every check held and the text is no junk; else the share held, below 1 (junk: 0)."""
    if report.passed:
        return 1.0, "The final draft holds every check."
    share = 0.0 if report.floor or not report.total else report.held / report.total
    return PARTIAL_CEILING * share, "The final draft fails: " + "; ".join(report.failures) + "."


def _score_execute_validate(prediction: Any) -> tuple[float, str]:
    """The share of tests passed by the final attempt; 1.0 only when its validation passed."""
    best = field_of(prediction, "best_attempt") or {}
    validation = field_of(best, "validation")
    if validation is None:
        return 0.0, "No attempt was validated."
    if not isinstance(validation, ValidationResult):
        ok = outcome_passed(validation)
        return (1.0 if ok else 0.0), ("The validation passed." if ok else f"The validation failed: {validation!r:.200}")
    if validation.ok:
        return 1.0, "All tests pass."
    code = field_of(field_of(best, "result"), "content") or ""
    counted, failed = validation.passed, validation.failed
    if counted is None:  # a plain shell validator: the counts are in pytest's summary line, if it ran pytest
        counted, failed = parse_pytest_counts(validation.stdout)
    total = (counted or 0) + (failed or 0)
    share = (counted or 0) / total if total else 0.0
    return min(share, PARTIAL_CEILING), failure_digest(validation, str(code))


def _score_director(prediction: Any) -> tuple[float, str]:
    """1.0 when the evaluator passed the final result, else 0."""
    feedback = field_of(field_of(prediction, "best_attempt") or {}, "feedback")
    if bool(field_of(prediction, "success")) or (feedback is not None and outcome_passed(feedback)):
        return 1.0, "The evaluator passed the result."
    details = field_of(feedback, "feedback") if isinstance(feedback, Mapping) else feedback
    return 0.0, f"The evaluator did not pass the result: {details if details is not None else 'no evaluation'}"


result_metric = _metric(_score_result)
creator_critic_metric = _metric(_score_creator_critic)
execute_validate_metric = _metric(_score_execute_validate)
director_metric = _metric(_score_director)


def checks_metric(checks: Any = None, field: str = "final") -> Callable[..., Any]:
    """A metric of the program's `field` (its final text) by checks (`loops.vocabulary.checks`: callables or short forms
    such as "max-words=40"): `checks` given here, else each example's own `checks` field (as
    `loops.optimize.writing.refine_examples` carries them). 1.0 when every check holds and the text is no junk
    (`loops.vocabulary.junk.is_junk` against the example's `requirements`); else the share held, below 1. For GEPA the
    feedback is the failed checks' messages: what an optimizer tunes the creator and iterator toward."""
    given = as_checks(checks) if checks is not None else None

    def score(example: Any, prediction: Any) -> tuple[float, str]:
        chosen = given if given is not None else as_checks(field_of(example, "checks"))
        if not chosen:
            raise ConfigurationError("checks_metric has no checks: give checks_metric(checks=[...]) or examples "
                                     "with a `checks` field")
        value = field_of(prediction, field)
        requirements = field_of(example, "requirements")
        floor = is_junk(requirements, value) if isinstance(requirements, str) else None
        return _score_checks(run_checks(chosen, "" if value is None else value, floor=floor))

    score.__name__, score.__doc__ = "_score_checks", checks_metric.__doc__
    return _metric(score, of_example=True)


def fewer_calls(metric: Callable[..., Any], weight: float = 0.1, calls_for_nothing: int = 20) -> Callable[..., Any]:
    """`metric`, less up to `weight` for the LM calls the run made (sent, or answered from DSPy's cache or
    a checkpoint; `weight` at `calls_for_nothing` calls or more): among equally good runs, the cheaper scores
    higher. Bootstrapping still asks only whether the run succeeded."""
    if not (isinstance(weight, (int, float)) and 0 <= weight <= 1 and math.isfinite(weight)):
        raise ValueError(f"weight must be a number from 0 to 1, got {weight!r}")
    if not (isinstance(calls_for_nothing, int) and calls_for_nothing >= 1):
        raise ValueError(f"calls_for_nothing must be an int >= 1, got {calls_for_nothing!r}")

    def calls(prediction: Any) -> int:
        # The calls the program made, wherever they were answered: a cached or replayed answer is one too.
        return sum(field_of(prediction, name) or 0 for name in ("lm_calls", "cached", "replayed"))

    def cost(prediction: Any) -> float:
        return weight * min(calls(prediction), calls_for_nothing) / calls_for_nothing

    def cheaper(example: Any, prediction: Any, trace: Any = None, pred_name: str | None = None,
                pred_trace: Any = None) -> Any:
        if pred_name is None and pred_trace is None:
            value = metric(example, prediction, trace)
            return value if trace is not None else max(0.0, float(value) - cost(prediction))
        value = metric(example, prediction, trace, pred_name, pred_trace)
        return dspy.Prediction(score=max(0.0, float(value.score) - cost(prediction)),
                               feedback=f"{value.feedback}\nLM calls: {calls(prediction)}")

    cheaper.__name__ = cheaper.__qualname__ = f"{getattr(metric, '__name__', 'metric')}_fewer_calls"
    return cheaper


def honest(metric: Callable[..., Any]) -> Callable[..., Any]:
    """`metric`, except that a code run whose final code answers the example's tests with their expected
    values (`loops.patterns.code.hardcoded_asserts`: `if n == 10: return 16796`) scores 0: the tests pass, the
    task is not solved. The tests are read from the example's `initial_input` `workspace_files`
    (MBPP examples carry theirs) and its `test_command`."""

    def checked(example: Any, prediction: Any, trace: Any = None, pred_name: str | None = None,
                pred_trace: Any = None) -> Any:
        hardcoded = _hardcoded(example, prediction)
        if pred_name is None and pred_trace is None:
            value = metric(example, prediction, trace) if trace is not None else metric(example, prediction)
            return (False if trace is not None else 0.0) if hardcoded else value
        value = metric(example, prediction, trace, pred_name, pred_trace)
        if not hardcoded:
            return value
        return dspy.Prediction(score=0.0, feedback=f"The code returns the tested values instead of computing them "
                                                   f"({'; '.join(hardcoded)}): write the general solution.")

    checked.__name__ = checked.__qualname__ = f"honest_{getattr(metric, '__name__', 'metric')}"
    return checked


def _hardcoded(example: Any, prediction: Any) -> list[str]:
    code = code_of(field_of(prediction, "final"))
    if not code:
        return []
    task = field_of(example, "initial_input")
    files = field_of(task, "workspace_files") if isinstance(task, Mapping) else None
    sources = [text for text in (files or {}).values() if isinstance(text, str)]
    command = field_of(example, "test_command")
    sources += test_command_programs(command) if isinstance(command, str) else []
    return [found for source in sources for found in hardcoded_asserts(code, source)]

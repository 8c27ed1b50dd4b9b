"""Writing tasks whose every requirement a program can check: ground truth for the Creator–Critic loop.

The embedded model is a weak critic (it approves nothing, or approves junk), and an LLM judge cannot
grade another LLM judge. Here each `WritingTask` is a request a user could give `loops refine` ("A
slogan for a bicycle repair shop. Use at most 8 words. Include the word 'wheel'.") made only of
checks a program runs (`loops.vocabulary.checks`, carried as data: `task.checks`), and each check writes its own
sentence of the request (its `rule`), so the writer sees every rule that `check(task, draft)` applies.
On top of the checks, `check` fails junk (`loops.vocabulary.junk.is_junk`: empty, an echo of the request, a
placeholder), and every task requires a word of its topic, so an off-topic draft fails too.

Two splits with no topic in common: `train` to optimize on, `heldout` to measure on. For half of
each split's tasks, `labeled_drafts(split)` holds hand-written drafts (good ones, ones that break
exactly one rule, off-topic ones and junk) whose label is what `check` computes, never typed in.

    critic_examples(split)   critic inputs (requirements, draft) and the truth (approved, failures);
                             score a critic with `agreement`
    refine_examples(split)   refine inputs (requirements, context, checks) and the task_id;
                             score a refine loop with `draft_passes`

The tasks and the drafts are data, in `loops.optimize.writing_tasks`; this module is the code that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dspy

from loops.errors import ConfigurationError, ContractError
from loops.optimize.writing_tasks import DRAFTS, ECHO, TASKS
from loops.vocabulary.checks import Check, CheckReport, rule_of, run_checks
from loops.vocabulary.contracts import field_of, judge
from loops.vocabulary.junk import is_junk

__all__ = ["SPLITS", "LabeledDraft", "WritingTask", "agreement", "check", "critic_examples", "draft_passes",
           "labeled_drafts", "refine_examples", "task_by_id", "tasks"]

SPLITS = ("train", "heldout")

# ---------------------------------------------------------------- tasks and the check


@dataclass(frozen=True)
class WritingTask:
    """A request as a user would give it (`requirements`: the brief, then each check's rule, `loops.vocabulary.checks`),
    and its checks as data."""

    id: str
    requirements: str
    checks: tuple[Check, ...]
    split: str
    topic: str


def check(task: WritingTask, draft: str | None) -> CheckReport:
    """Whether `draft` meets every check of `task` and is not junk (`loops.vocabulary.junk.is_junk`): the report's
    `passed`, and its `failures`, one line per failed rule (junk first)."""
    draft = "" if draft is None else str(draft)
    return run_checks(task.checks, draft, floor=is_junk(task.requirements, draft))


_BY_ID = {task_id: WritingTask(task_id, " ".join([brief, *(rule_of(c) for c in checks)]), checks, split, topic)
          for split, task_id, topic, brief, checks in TASKS}


def _split(split: str) -> str:
    if split not in SPLITS:
        raise ConfigurationError(f"no split {split!r}: choose one of {', '.join(SPLITS)}")
    return split


def tasks(split: str) -> list[WritingTask]:
    """The tasks of `split` (`train` or `heldout`)."""
    split = _split(split)
    return [task for task in _BY_ID.values() if task.split == split]


def task_by_id(task_id: str) -> WritingTask:
    """The task called `task_id`."""
    try:
        return _BY_ID[task_id]
    except KeyError:
        raise ConfigurationError(f"no writing task {task_id!r}; `tasks(split)` lists them") from None


# ---------------------------------------------------------------- the labeled critic set


@dataclass(frozen=True)
class LabeledDraft:
    """A draft for a task, labeled by `check`: `approved` is `check(...).passed`, `failures` its lines.
    `kind` is what the author meant it to be (`good`, `flawed`, `off-topic` or `junk`)."""

    task_id: str
    draft: str
    approved: bool
    failures: list[str]
    kind: str


def _labeled(task_id: str, kind: str, text: str) -> LabeledDraft:
    draft = task_by_id(task_id).requirements if text == ECHO else text
    result = check(task_by_id(task_id), draft)
    return LabeledDraft(task_id, draft, result.passed, result.failures, kind)


def labeled_drafts(split: str) -> list[LabeledDraft]:
    """The hand-written drafts for tasks of `split`, labeled by `check`."""
    return [_labeled(task.id, kind, text) for task in tasks(split) for kind, text in DRAFTS.get(task.id, ())]


def critic_examples(split: str) -> list[dspy.Example]:
    """The labeled drafts of `split` as the built-in critic's inputs (`requirements`, `draft`) with the
    truth (`approved`, `failures`) and the `task_id`; score a critic on them with `agreement`."""
    return [dspy.Example(requirements=task_by_id(labeled.task_id).requirements, draft=labeled.draft,
                         approved=labeled.approved, failures=labeled.failures, task_id=labeled.task_id)
            .with_inputs("requirements", "draft") for labeled in labeled_drafts(split)]


def refine_examples(split: str) -> list[dspy.Example]:
    """The tasks of `split` as a refine loop's inputs (`requirements`, an empty `context`, the task's
    `checks`) with the `task_id`; score a loop's final draft on them with `draft_passes`."""
    return [dspy.Example(requirements=task.requirements, context="", checks=list(task.checks), task_id=task.id)
            .with_inputs("requirements", "context", "checks") for task in tasks(split)]


# ---------------------------------------------------------------- metrics


def _verdict_approves(verdict: Any) -> bool:
    """Whether the loop takes `verdict` as an approval: the one verdict rule (`loops.vocabulary.contracts.judge`; a
    verdict that contradicts its criteria is none), so agreement measures what the loop would do."""
    try:
        return judge(critic=verdict).approved
    except ContractError as error:
        raise ConfigurationError(f"cannot read a verdict from {verdict!r:.200}: give a bool, an (approved, "
                                 "feedback) pair, or a dict or prediction with a bool `approved`") from error


def _answer(score: float, feedback: str, trace: Any, pred_name: str | None, pred_trace: Any) -> Any:
    """A metric's answer in the form its caller expects, as `loops.optimize.metrics` gives it: GEPA (asking
    about one predictor) gets a score with feedback, bootstrapping (with a trace) a bool, scoring a float."""
    if pred_name is not None or pred_trace is not None:
        return dspy.Prediction(score=score, feedback=feedback)
    if trace is not None:
        return score >= 1.0
    return score


def agreement(example: dspy.Example, prediction: Any, trace: Any = None, pred_name: str | None = None,
              pred_trace: Any = None) -> Any:
    """1.0 when the critic's verdict (a bool, an (approved, feedback) pair, a dict or a prediction with
    `approved`) agrees with `example.approved`, the truth from `check`; 0.0 otherwise."""
    approves, truth = _verdict_approves(prediction), bool(example.approved)
    failures = list(field_of(example, "failures") or [])
    reasons = "it passes every check" if truth else "it fails: " + "; ".join(failures)
    feedback = (f"The critic {'approved' if approves else 'rejected'} the draft, "
                f"{'rightly' if approves == truth else 'wrongly'}: {reasons}.")
    return _answer(float(approves == truth), feedback, trace, pred_name, pred_trace)


def draft_passes(example: dspy.Example, prediction: Any, trace: Any = None, pred_name: str | None = None,
                 pred_trace: Any = None) -> Any:
    """1.0 when the loop's final draft (`prediction.final`) passes `check` of the example's task."""
    task_id = field_of(example, "task_id")
    if task_id is None:
        raise ConfigurationError("the example has no task_id: use `refine_examples(split)`")
    result = check(task_by_id(task_id), field_of(prediction, "final"))
    feedback = ("The final draft passes every check." if result.passed
                else "The final draft fails: " + "; ".join(result.failures) + ".")
    return _answer(float(result.passed), feedback, trace, pred_name, pred_trace)

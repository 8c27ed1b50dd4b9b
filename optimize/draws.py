"""The `draws` optimizer: the code loop's candidates chosen on training data, for the model at hand.

`ExecuteValidateController` draws several candidates per iteration (`loops.patterns.code.draws`): greedy answers
to other prompts (worked examples) or with other decoding (penalties), and seeded samples. Which of them
pass which tasks depends on the model; the embedded model's defaults were chosen by hand, partly while
looking at validation results. `DrawsOptimizer` chooses them from the training set alone:

1. every candidate kind (`kinds`, by default `CANDIDATE_KINDS`: the greedy draws and two seeded
   samples) is tried once on every training example, as a one-iteration run of the student loop that
   draws that kind alone, scored by the metric (a pass is a score of 1.0);
2. a greedy set cover picks the kinds: first the one that passes the most examples, then the one that
   passes the most examples not passed yet, and so on until no kind passes a new one or `max_draws`
   are chosen (ties: the earlier kind in `kinds`);
3. the result is the student drawing those kinds in that order (`ExecuteValidateController.with_draws`),
   which `loops.optimize.save` and `loops.load` keep.

`trials="trials.jsonl"` records every trial as it ends, and a rerun reads them back instead of running
them again (a long search on a slow model survives a restart). `findings` holds what the search found:
the examples each kind passed, and the kinds chosen.

    optimizer = DrawsOptimizer(execute_validate_metric, trials="trials.jsonl")
    program = optimizer.compile(ExecuteValidateController(), trainset=trainset)
    optimizer.findings["passed"], program.draws
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy
import orjson

from loops.errors import ConfigurationError, a_or_an
from loops.patterns.code.controller import code_of
from loops.patterns.code.draws import ALL_EXAMPLES, GREEDY_DRAWS, Draw
from loops.patterns.execute_validate import ExecuteValidateController
from loops.recording.checkpoint import stable_hash
from loops.vocabulary.contracts import field_of

__all__ = ["CANDIDATE_KINDS", "DrawsOptimizer", "choose", "kind_name"]

# The greedy draws, then two seeded samples (plain, and shown every worked example).
CANDIDATE_KINDS: tuple[Draw, ...] = (*GREEDY_DRAWS, Draw(sampled=True, seed=1),
                                     Draw(sampled=True, examples=ALL_EXAMPLES, seed=2))


def kind_name(draw: Draw) -> str:
    """A draw's name in findings and tables: `greedy` or `sampled`, then `+examples` (all of them) or
    `+example3` (one, numbered from 1), `+frequency_penalty=0.2`, `+seed=1`."""
    parts = ["sampled" if draw.sampled else "greedy"]
    if draw.examples:
        parts.append("examples" if draw.examples == ALL_EXAMPLES
                     else "example" + ",".join(str(index + 1) for index in draw.examples))
    if draw.frequency_penalty is not None:
        parts.append(f"frequency_penalty={draw.frequency_penalty}")
    if draw.seed is not None:
        parts.append(f"seed={draw.seed}")
    return "+".join(parts)


def choose(passed: dict[Draw, set[str]], max_draws: int) -> list[Draw]:
    """Greedy set cover: kinds in order of the examples they pass that the kinds before them do not, while
    one passes a new example, at most `max_draws`; ties go to the earlier kind (`passed`'s order)."""
    chosen: list[Draw] = []
    covered: set[str] = set()
    while len(chosen) < max_draws:
        gains = {kind: len(examples - covered) for kind, examples in passed.items() if kind not in chosen}
        best = max(gains, key=gains.__getitem__, default=None)  # the first of the largest: `passed`'s order
        if best is None or gains[best] == 0:
            break
        chosen.append(best)
        covered |= passed[best]
    return chosen


class DrawsOptimizer:
    """Chooses an `ExecuteValidateController`'s candidate draws on `trainset` (see the module's docstring).
    A teleprompter like DSPy's: `compile(student, trainset=...)` returns the optimized program."""

    def __init__(self, metric: Callable[..., Any], *, kinds: Sequence[Draw] = CANDIDATE_KINDS, max_draws: int = 5,
                 trials: str | os.PathLike[str] | None = None):
        if not kinds or not all(isinstance(kind, Draw) for kind in kinds) or len(set(kinds)) != len(kinds):
            raise ConfigurationError(f"kinds must be distinct loops.patterns.code.Draw values, got {kinds!r:.200}")
        if isinstance(max_draws, bool) or not isinstance(max_draws, int) or max_draws < 1:
            raise ConfigurationError(f"max_draws must be an int >= 1, got {max_draws!r}")
        self.metric = metric
        self.kinds = tuple(kinds)
        self.max_draws = max_draws
        self.trials = None if trials is None else Path(trials)
        self.findings: dict[str, Any] = {}

    def compile(self, student: ExecuteValidateController, *, trainset: Sequence[dspy.Example],
                valset: Sequence[dspy.Example] | None = None) -> ExecuteValidateController:
        """`student` drawing the kinds chosen on `trainset` (`valset` is not looked at: choosing is training)."""
        check_student(student)
        recorded = self._recorded()
        passed: dict[Draw, set[str]] = {kind: set() for kind in self.kinds}
        for example in trainset:
            key = stable_hash(example.inputs().toDict())
            for kind in self.kinds:
                trial = recorded.get((repr(kind), key)) or self._try(student, kind, example, key)
                if trial["passed"]:
                    passed[kind].add(key)
        chosen = choose(passed, self.max_draws)
        names = {key: _example_name(example, key) for example in trainset
                 for key in [stable_hash(example.inputs().toDict())]}
        self.findings = {
            "train_examples": len(trainset),
            "passed": {kind_name(kind): sorted(names[key] for key in keys) for kind, keys in passed.items()},
            "chosen": [kind_name(kind) for kind in chosen],
            "train_passed_by_chosen": len(set().union(*(passed[kind] for kind in chosen))),
        }
        if not chosen:  # nothing passed: no evidence to choose by, so the student keeps its own draws
            return student
        return student.with_draws(chosen)

    def _try(self, student: ExecuteValidateController, kind: Draw, example: dspy.Example, key: str) -> dict[str, Any]:
        """One trial: a one-iteration run of `student` drawing `kind` alone on `example`, scored, and recorded."""
        started = time.monotonic()
        prediction = student.with_draws([kind])(**example.inputs(), max_iterations=1)
        score = self.metric(example, prediction)
        trial = {"kind": repr(kind), "example": key, "name": _example_name(example, key),
                 "score": float(score), "passed": float(score) >= 1.0, "code": code_of(field_of(prediction, "final")),
                 "lm_calls": field_of(prediction, "lm_calls"), "seconds": round(time.monotonic() - started, 2)}
        if self.trials is not None:
            self.trials.parent.mkdir(parents=True, exist_ok=True)
            with self.trials.open("ab") as handle:
                handle.write(orjson.dumps(trial) + b"\n")
        return trial

    def _recorded(self) -> dict[tuple[str, str], dict[str, Any]]:
        if self.trials is None or not self.trials.exists():
            return {}
        lines = self.trials.read_bytes().splitlines()
        return {(trial["kind"], trial["example"]): trial for trial in map(orjson.loads, filter(None, lines))}


def check_student(program: Any) -> None:
    """The draws optimizer chooses the built-in executor's candidates: any other program is a mistake."""
    if not isinstance(program, ExecuteValidateController):
        raise ConfigurationError(f"the draws optimizer chooses the code loop's candidates: it optimizes an "
                                 f"ExecuteValidateController, not {a_or_an(type(program).__name__)} (use bootstrap, "
                                 "random-search, gepa or simba for other programs)")
    if not program.builtin_executor:
        raise ConfigurationError("the draws optimizer chooses the built-in executor's candidates; this "
                                 "ExecuteValidateController has a custom executor, which draws one candidate")


def _example_name(example: dspy.Example, key: str) -> str:
    """An example's name in findings: its `task_id` or `id` if it has one, else its inputs' hash."""
    name = example.get("task_id", example.get("id"))
    return str(name) if name is not None else key


"""`loops.optimize.run`: score a loop program, optimize it, score it again, save it with a report.

    program, report = loops.optimize.run(ExecuteValidateController(), trainset, valset, optimizer="bootstrap",
                                         out="fix.optimized.json")
    report.before.score, report.after.score, report.kept, report.lm_calls, report.seconds

Never a regression: the program handed back (and saved) is the better of the two on the validation
set, the baseline on a tie (`report.kept` says which, and so does the console); `keep="optimized"`
keeps the optimizer's program whatever it scored.

Each stage (score before, optimize, score after) counts the LM calls and tokens it spent and its
wall time; a rich progress display shows the loop runs as they finish. The saved file is a loop
program (`loops.load(path)` rebuilds it, configuration included) whose `loops.report` is the report.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import dspy
import orjson
from dspy.utils.callback import BaseCallback
from pydantic import BaseModel, Field

from loops.errors import ConfigurationError
from loops.identity import public_path
from loops.optimize.metrics import creator_critic_metric, director_metric, execute_validate_metric, result_metric
from loops.optimize.optimizers import OPTIMIZERS, build, check, check_program
from loops.patterns.creator_critic import CreatorCriticIterator
from loops.patterns.director import DirectorExecutorEvaluatorController
from loops.patterns.execute_validate import ExecuteValidateController
from loops.running.saving import unnamed_lm_note, unnamed_roles

__all__ = ["KEEP", "Report", "Score", "Stage", "default_metric", "evaluate", "run", "save"]

KEEP = ("better", "optimized")


class Score(BaseModel):
    """A program's score on a set: the mean metric (0-1), per example, and how many fully succeeded."""

    score: float
    solved: int
    examples: int
    per_example: list[float]


class Stage(BaseModel):
    """What one stage spent."""

    lm_calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    loop_runs: int = 0


class Report(BaseModel):
    """What `run` did: scores before and after, which program it kept (`baseline` or `optimized`), what
    each stage spent, the optimizer's settings and findings, the program's configuration (class,
    arguments, budget, phases, DSL source) and what changed in it."""

    optimizer: dict[str, Any]
    metric: str
    train_examples: int
    val_examples: int
    before: Score
    after: Score
    stages: dict[str, Stage]
    program: dict[str, Any]
    kept: str = "optimized"
    changes: dict[str, dict[str, Any]] = Field(default_factory=dict)  # what the optimizer changed, kept or not
    findings: dict[str, Any] = Field(default_factory=dict)  # what the optimizer found (the draws optimizer's search)
    saved_to: str | None = None

    @property
    def lm_calls(self) -> int:
        return sum(stage.lm_calls for stage in self.stages.values())

    @property
    def tokens(self) -> int:
        return sum(stage.tokens for stage in self.stages.values())

    @property
    def seconds(self) -> float:
        return sum(stage.seconds for stage in self.stages.values())

    def summary(self, *, verdict: bool = True, lm_note: bool = True) -> str:
        """The report in a few lines: the scores, which program was kept (`verdict`, which `run`'s progress display
        has said already), what each stage spent, what changed, and what the saved program does not say of its
        models (`lm_note`: `loops.running.saving.unnamed_lm_note`)."""
        lines = [f"{self.optimizer['optimizer']}: {self.metric} {self.before.score:.3f} -> {self.after.score:.3f}; "
                 f"solved {self.before.solved} -> {self.after.solved} of {self.after.examples}",
                 *([self.verdict()] if verdict else [])]
        for name, stage in self.stages.items():
            lines.append(f"  {name}: {stage.loop_runs} loop runs, {stage.lm_calls} LM calls, {stage.tokens} tokens, "
                         f"{stage.seconds:.1f} s")
        for role, change in self.changes.items():
            lines.append(f"  {role}: {', '.join(f'{key} {value}' for key, value in change.items())}")
        for name, value in self.findings.items():
            lines.append(f"  {name}: {value}")
        note = unnamed_lm_note(self.program.get("roles", []), self.program.get("lms", {})) if lm_note else None
        if note is not None:
            lines.append(f"note: {note}")
        return "\n".join(lines)

    def unnamed_roles(self) -> list[str]:
        """The LLM roles the saved program names no LM for: they run on the LM of the context it is loaded in."""
        return unnamed_roles(self.program.get("roles", []), self.program.get("lms", {}))

    def verdict(self) -> str:
        """Which program was kept, and why, in one line."""
        scores = f"validation {self.metric} {self.after.score:.3f} optimized, {self.before.score:.3f} baseline"
        if self.kept == "baseline":
            return f"kept the baseline: the optimized program did not score higher ({scores})"
        if self.after.score > self.before.score:
            return f"kept the optimized program ({scores})"
        return f"kept the optimized program, as asked, though it did not score higher ({scores})"


def default_metric(program: Any) -> Callable[..., Any]:
    """The metric of a program's pattern: approval and criteria, tests passed, the evaluator's status, or
    success (a DSL program, any other loop)."""
    if isinstance(program, CreatorCriticIterator):
        return creator_critic_metric
    if isinstance(program, ExecuteValidateController):
        return execute_validate_metric
    if isinstance(program, DirectorExecutorEvaluatorController):
        return director_metric
    return result_metric


def run(program: dspy.Module, trainset: Sequence[dspy.Example], valset: Sequence[dspy.Example],
        metric: Callable[..., Any] | None = None, optimizer: str = "bootstrap", *,
        out: str | os.PathLike[str] | None = None, progress: bool = True, verbose: bool = False, num_threads: int = 1,
        keep: str = "better", **options: Any) -> tuple[dspy.Module, Report]:
    """Score `program` on `valset`, optimize it on `trainset` with `optimizer` (`bootstrap`,
    `random-search`, `mipro`, `gepa`, `simba`, or `draws` for the code loop; `options` go to the
    optimizer), score the result, and save it to `out` if given. Returns the program kept and the report.

    `keep="better"` keeps the optimized program only if it scores higher on `valset` than `program`
    did, else `program` itself (never a regression); `keep="optimized"` keeps the optimizer's program
    whatever it scored. `report.kept` says which, and so does the console.

    `metric` defaults to the pattern's (`default_metric`). Everything that can be checked is checked
    before any LM call: the optimizer's name and dependencies, the metric's form, the sets, the LM.
    With `progress`, one display shows the stages (DSPy's own progress bars are off meanwhile, and its INFO
    logs too unless `verbose`)."""
    metric = metric or default_metric(program)
    check(optimizer, metric)
    if keep not in KEEP:
        raise ConfigurationError(f"keep must be one of {', '.join(map(repr, KEEP))}, got {keep!r}")
    if not isinstance(program, dspy.Module):
        raise ConfigurationError(f"program must be a dspy.Module (a loop module or loops.sexp.compile(...)), got "
                                 f"{type(program).__name__}")
    check_program(optimizer, program)
    for name, examples in (("trainset", trainset), ("valset", valset)):
        if not examples or not all(isinstance(example, dspy.Example) and example._input_keys for example in examples):
            raise ConfigurationError(f"{name} must be a non-empty list of dspy.Example with inputs marked "
                                     "(.with_inputs(...)), e.g. loops.optimize.datasets.mbpp(path, split)")
    _check_lm(program)
    trainset, valset = list(trainset), list(valset)
    relay = _Relay(metric)  # the optimizer is built (and its options checked) now, its metric counted later
    teleprompter, compile_settings, settings = build(optimizer, relay, trainset, options)
    if OPTIMIZERS[optimizer].uses_valset and "valset" in inspect.signature(teleprompter.compile).parameters:
        compile_settings["valset"] = valset
    stages: dict[str, Stage] = {}
    with _Display(progress, verbose) as display:
        with display.stage("score before", len(valset)) as (stage, scored):
            before = _score(program, valset, scored(metric), num_threads)
        stages["score before"] = stage
        with display.stage("optimize", None) as (stage, scored):
            relay.target = scored(metric)
            optimized = teleprompter.compile(program, trainset=trainset, **compile_settings)
        stages["optimize"] = stage
        with display.stage("score after", len(valset)) as (stage, scored):
            after = _score(optimized, valset, scored(metric), num_threads)
        stages["score after"] = stage
        kept = "optimized" if keep == "optimized" or after.score > before.score else "baseline"
        chosen = optimized if kept == "optimized" else program
        report = Report(optimizer=settings, metric=getattr(metric, "__name__", type(metric).__name__),
                        train_examples=len(trainset), val_examples=len(valset), before=before, after=after,
                        stages=stages, program=describe(chosen), kept=kept, changes=changes(program, optimized),
                        findings=dict(getattr(teleprompter, "findings", None) or {}))
        display.say(report.verdict())
    if out is not None:
        report.saved_to = os.fspath(out)
        save(chosen, out, report)
    return chosen, report


def evaluate(program: dspy.Module, examples: Sequence[dspy.Example], metric: Callable[..., Any] | None = None, *,
             num_threads: int = 1, progress: bool = True, verbose: bool = False) -> tuple[Score, Stage]:
    """Score `program` on `examples` (the pattern's metric by default): the score, and what it cost; `progress`
    and `verbose` as for `run`."""
    metric = metric or default_metric(program)
    _check_lm(program)
    with _Display(progress, verbose) as display, display.stage("score", len(examples)) as (stage, scored):
        score = _score(program, list(examples), scored(metric), num_threads)
    return score, stage


def save(program: dspy.Module, path: str | os.PathLike[str], report: Report | None = None) -> None:
    """Save `program` as `module.save(path)` does (a `.json` file), with `report` under `loops.report`."""
    from dspy.utils.saving import get_dependency_versions

    path = Path(path)
    if path.suffix != ".json":
        raise ConfigurationError(f"save the optimized program as a .json file, got {os.fspath(path)!r}")
    state = program.dump_state()
    state.setdefault("loops", {})["report"] = None if report is None else report.model_dump(mode="json")
    state["metadata"] = {"dependency_versions": get_dependency_versions()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))


def describe(program: dspy.Module) -> dict[str, Any]:
    """The program's configuration, as saved: class, arguments, budget, retry policy, phases, LMs, source."""
    saved = program.dump_state().get("loops", {}) if hasattr(program, "budget") else {}
    phases = {}
    for role in getattr(program, "contracts", {}):
        phase = getattr(program, role, None)
        if phase is not None:
            phases[role] = "built-in LLM role" if isinstance(phase, dspy.Module) and role in getattr(
                program, "_llm_roles", ()) else getattr(phase, "__qualname__", type(phase).__qualname__)
    described = {key: value for key, value in saved.items() if key != "report"}
    described["kind"] = saved.get("kind", ":".join(public_path(type(program))))
    described["phases"] = phases
    described["roles"] = [name for name, _ in program.named_predictors()]
    if callable(getattr(program, "settings", None)):  # choices settled by the model at run time (the code loop's)
        described["settings"] = program.settings()
    if hasattr(program, "source"):
        described["source"] = program.source
    return described


def changes(before: dspy.Module, after: dspy.Module) -> dict[str, dict[str, Any]]:
    """Per role: how many demos it has now, and whether its instructions changed."""
    old = dict(before.named_predictors())
    found = {}
    for name, predictor in after.named_predictors():
        previous = old.get(name)
        rewritten = previous is not None and predictor.signature.instructions != previous.signature.instructions
        found[name] = {"demos": len(predictor.demos), "instructions rewritten": rewritten}
    return found


# --- internals -----------------------------------------------------------------------------------------


def _check_lm(program: dspy.Module) -> None:
    if dspy.settings.lm is None and any(predictor.lm is None for _, predictor in program.named_predictors()):
        raise ConfigurationError("no LM is configured: call dspy.configure(lm=...) (e.g. loops.lm.local_lm() for the "
                                 "embedded offline model) before loops.optimize.run")


def _score(program: dspy.Module, examples: list[dspy.Example], metric: Callable[..., Any],
           num_threads: int) -> Score:
    evaluate = dspy.Evaluate(devset=examples, metric=metric, num_threads=num_threads, display_progress=False,
                             failure_score=0.0, max_errors=len(examples) + 1)
    result = evaluate(program)
    scores = [float(score) if isinstance(score, int | float) and math.isfinite(score) else 0.0
              for _, _, score in result.results]
    return Score(score=sum(scores) / len(scores) if scores else 0.0, solved=sum(score >= 1.0 for score in scores),
                 examples=len(examples), per_example=scores)


def _call_metric(metric: Callable[..., Any], example: Any, prediction: Any, trace: Any, pred_name: Any,
                 pred_trace: Any) -> Any:
    """A metric called as its caller called ours: scoring (2 arguments), bootstrapping (3), GEPA (5), so a
    user's two-argument metric still works for every optimizer but GEPA."""
    if pred_name is None and pred_trace is None:
        return metric(example, prediction, trace) if trace is not None else metric(example, prediction)
    return metric(example, prediction, trace, pred_name, pred_trace)


class _Relay:
    """A metric that calls whatever `target` is set to: the optimizer is built before the stage that
    counts its metric calls exists."""

    def __init__(self, target: Callable[..., Any]):
        self.target = target
        self.__name__ = getattr(target, "__name__", "metric")

    def __call__(self, example: Any, prediction: Any, trace: Any = None, pred_name: Any = None,
                 pred_trace: Any = None) -> Any:
        return _call_metric(self.target, example, prediction, trace, pred_name, pred_trace)


class _Usage(BaseCallback):
    """Counts every LM request made while it is installed, and the tokens the LMs report."""

    def __init__(self) -> None:
        self.calls = 0
        self.tokens = 0
        self._lms: dict[str, Any] = {}
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self._lock:
            self.calls += 1
            self._lms[call_id] = instance

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        with self._lock:
            lm = self._lms.pop(call_id, None)
        history = getattr(lm, "history", None)
        if history:
            usage = history[-1].get("usage") or {}
            with self._lock:
                self.tokens += int(usage.get("total_tokens") or 0)


class _Display:
    """The progress of `run`: one line per stage, with loop runs, LM calls and seconds (rich), the one display
    while it shows. Unless `verbose`, DSPy's optimizers' own tqdm bars are off, and so are DSPy's INFO logs and
    what it prints (BootstrapFewShot prints its tally, counting the examples it went through one short), with the
    display or without it (`progress=False`: nothing is shown); with `verbose`, the bars stay off while the display
    shows."""

    def __init__(self, enabled: bool, verbose: bool = False):
        self.enabled = enabled
        self.verbose = verbose
        self.progress = None
        self._quiet = contextlib.ExitStack()

    def __enter__(self) -> _Display:
        if self.enabled or not self.verbose:
            self._quiet.enter_context(_without_tqdm_bars())
        if not self.verbose:
            self._quiet.enter_context(_logger_level("dspy", logging.WARNING))
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[calls]} LM calls"), TimeElapsedColumn(),
                                     console=Console(file=sys.stdout))  # bound now: the prints go elsewhere
            self.progress.__enter__()
        if not self.verbose:
            self._quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._quiet.close()
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text, highlight=False, soft_wrap=True)

    @contextmanager
    def stage(self, name: str, total: int | None) -> Iterator[tuple[Stage, Callable[..., Any]]]:
        stage, usage, started = Stage(), _Usage(), time.monotonic()
        task = self.progress.add_task(name, total=total, calls=0) if self.progress is not None else None

        def scored(metric: Callable[..., Any]) -> Callable[..., Any]:
            def counting(example: Any, prediction: Any, trace: Any = None, pred_name: Any = None,
                         pred_trace: Any = None) -> Any:
                if pred_name is None and pred_trace is None:  # a loop run being scored (GEPA asks per role too)
                    stage.loop_runs += 1
                    if task is not None:
                        self.progress.update(task, advance=1, calls=usage.calls)
                return _call_metric(metric, example, prediction, trace, pred_name, pred_trace)

            counting.__name__ = getattr(metric, "__name__", "metric")
            return counting

        callbacks = [*dspy.settings.get("callbacks", []), usage]
        with dspy.context(callbacks=callbacks) if callbacks else nullcontext():
            yield stage, scored
        stage.lm_calls, stage.tokens, stage.seconds = usage.calls, usage.tokens, time.monotonic() - started
        if task is not None:
            self.progress.update(task, calls=usage.calls, completed=stage.loop_runs, total=total or stage.loop_runs)


@contextmanager
def _without_tqdm_bars() -> Iterator[None]:
    """tqdm bars off while loops' display shows: DSPy's optimizers draw them on stderr (`tqdm.tqdm(...)`, looked up
    on the module at each call), between the lines of the display, and tqdm has no switch but its
    TQDM_DISABLE variable, read once when it is imported."""
    import tqdm

    shown = tqdm.tqdm

    class Hidden(shown):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "disable": True})

    tqdm.tqdm = Hidden
    try:
        yield
    finally:
        tqdm.tqdm = shown


@contextmanager
def _logger_level(name: str, level: int) -> Iterator[None]:
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


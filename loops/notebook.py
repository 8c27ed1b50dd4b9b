"""Looking at loop runs in Jupyter: a trace as a DataFrame, a run as a plot.

    result = loop(requirements="A haiku about a lighthouse")
    result                                   # a summary, the trace as a table, each role's history folded
    loops.notebook.trace_frame(result)       # one row per role call (pandas)
    loops.notebook.trace_frame({"before": a, "after": b})   # many runs: a `run` column says which
    loops.notebook.plot_run(result)          # tokens per role, and what changed per iteration

A loop's prediction (`loops.LoopResult`) and its trace steps (`loops.Step`) render themselves in
Jupyter through `loops.display`. `trace_frame` needs pandas and `plot_run` matplotlib:
`pip install 'loops[notebooks]'`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dspy

from loops.display import checks_held, step_judgement, step_outcome, step_verdict
from loops.errors import MissingDependencyError

__all__ = ["TRACE_COLUMNS", "plot_run", "trace_frame"]


TRACE_COLUMNS = ("role", "iteration", "seconds", "attempts", "lm_calls", "input_tokens", "output_tokens",
                 "outcome", "judged", "score", "verdict", "checks_held", "written_chars", "error", "note", "human")
_WRITTEN = ("improved_draft", "draft", "code", "result")  # the outputs that are the work itself, where a role writes


def trace_frame(runs: Any) -> Any:
    """A pandas DataFrame with one row per role call: `TRACE_COLUMNS` (`judged` and `score` are what
    `step_judgement` says of the step, `verdict` whether it passed the work as the loop took it
    (`step_verdict`: the junk floor and a self-contradicting verdict overrule the LLM), `checks_held` the share
    of checks it found held (`checks_held`), each None for a step that judges nothing; `written_chars` the
    length of the text a writing step wrote (a draft, code, a result); `human` marks a person's
    answer, `loops.person`). A phase's `lm_calls` and
    tokens include those of the role calls it made, which have rows of their own (a DSL loop phase
    calling an atom).

    `runs` is a loop's prediction, or many of them: a list (the `run` column numbers them from 0) or a
    dict (the `run` column holds its keys)."""
    pandas = _require("pandas", "trace_frame")
    if _is_result(runs):
        return pandas.DataFrame(_rows(runs), columns=list(TRACE_COLUMNS))
    if isinstance(runs, Mapping):
        named = list(runs.items())
    elif isinstance(runs, Iterable) and not isinstance(runs, str | bytes):
        named = list(enumerate(runs))
    else:
        named = None
    if named is None or not all(_is_result(result) for _, result in named):
        raise TypeError(f"trace_frame takes a loop's result (a prediction with a trace) or a list or dict of them, "
                        f"got {repr(runs)[:100]}")
    rows = [{"run": name, **row} for name, result in named for row in _rows(result)]
    return pandas.DataFrame(rows, columns=["run", *TRACE_COLUMNS])


def _is_result(value: Any) -> bool:
    return isinstance(value, dspy.Prediction) and "trace" in value


def _rows(result: Any) -> list[dict[str, Any]]:
    rows = []
    for step in result.get("trace") or ():
        judgement = step_judgement(step)
        rows.append({
            "role": step.role, "iteration": step.iteration, "seconds": step.seconds, "attempts": step.attempts,
            "lm_calls": step.lm_calls, "input_tokens": step.tokens["input"] if step.tokens else 0,
            "output_tokens": step.tokens["output"] if step.tokens else 0, "outcome": step_outcome(step),
            "judged": judgement[0] if judgement else None, "score": judgement[1] if judgement else None,
            "verdict": step_verdict(step), "checks_held": checks_held(step) if judgement else None,
            "written_chars": None if judgement else _written_chars(step),
            "error": step.error, "note": step.note, "human": step.human,
        })
    return rows


def _written_chars(step: Any) -> int | None:
    for name in _WRITTEN:
        value = (step.outputs or {}).get(name)
        if isinstance(value, str):
            return len(value)
    return None


def plot_run(result: Any, title: str | None = None) -> Any:
    """A matplotlib figure of one run: tokens per LLM role (input and output stacked; a phase that calls
    roles is drawn through them), and what changed per iteration: the verdict as the loop took it (1 passed,
    0 not), the share of checks held where a judging step reports checks, and the length of the text written
    (on its own axis); seconds per iteration when no step judged anything."""
    frame = trace_frame(result)
    pyplot = _require("matplotlib.pyplot", "plot_run", package="matplotlib")
    figure, (tokens_axes, judged_axes) = pyplot.subplots(1, 2, figsize=(10, 3.4))
    # Drawn when the notebook displays the returned figure, not a second time when the cell ends.
    pyplot.close(figure)
    if frame.empty:
        tokens_axes.text(0.5, 0.5, "no role calls", ha="center", va="center")
        judged_axes.set_axis_off()
    else:
        # A phase's tokens include those of the role calls it made (a DSL loop phase calling an atom), so only
        # the LLM roles (every one keeps a history) are counted, each call once.
        llm_roles = set(result.get("histories") or ())
        counted = frame[frame["role"].isin(llm_roles)] if llm_roles else frame
        per_role = counted.groupby("role", sort=False)[["input_tokens", "output_tokens"]].sum()
        tokens_axes.bar(per_role.index, per_role["input_tokens"], label="input")
        tokens_axes.bar(per_role.index, per_role["output_tokens"], bottom=per_role["input_tokens"], label="output")
        tokens_axes.set_ylabel("tokens")
        tokens_axes.legend()
        _plot_judgements(judged_axes, frame)
    tokens_axes.set_title("tokens per role")
    figure.suptitle(title or f"stop reason: {result.get('stop_reason')}, success: {result.get('success')}")
    figure.tight_layout()
    return figure


def _plot_judgements(axes: Any, frame: Any) -> None:
    iterations = sorted(frame["iteration"].unique())
    judged = frame.dropna(subset=["verdict"])
    if judged.empty:
        seconds = frame.groupby("iteration")["seconds"].sum()
        axes.bar(seconds.index.astype(str), seconds.values)
        axes.set_xlabel("iteration")
        axes.set_ylabel("seconds")
        axes.set_title("seconds per iteration (no step judged the work)")
        return
    # Of an iteration's several samples the loop keeps the best, so the best is the iteration's.
    verdicts = judged.assign(verdict=judged["verdict"].astype(float)).groupby("iteration")["verdict"].max()
    axes.plot(verdicts.index, verdicts.values, marker="o", label="verdict (1 passed)")
    checks = frame.dropna(subset=["checks_held"]).groupby("iteration")["checks_held"].max()
    if not checks.empty:
        axes.plot(checks.index, checks.values, marker="s", label="checks held")
    axes.set_xticks(iterations)
    axes.set_ylim(-0.05, 1.05)
    axes.set_xlabel("iteration")
    axes.set_ylabel("verdict, share of checks")
    axes.set_title("per iteration")
    written = frame.dropna(subset=["written_chars"]).groupby("iteration")["written_chars"].last()
    if not written.empty:  # the length of the text judged: on its own axis, in characters
        length_axes = axes.twinx()
        length_axes.plot(written.index, written.values, linestyle="--", color="grey", label="length (chars)")
        length_axes.set_ylabel("characters written")
        length_axes.set_ylim(bottom=0)
        lines = axes.get_lines() + length_axes.get_lines()
        axes.legend(lines, [line.get_label() for line in lines])
    else:
        axes.legend()


def _require(module: str, helper: str, package: str | None = None) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(f"loops.notebook.{helper} needs {package or module}: "
                                     "pip install 'loops[notebooks]'") from None

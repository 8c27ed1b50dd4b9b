"""Looking at loop runs in Jupyter: a trace as a DataFrame, a run as a plot.

    result = loop(requirements="A haiku about a lighthouse")
    result                                   # a summary, the trace as a table, each role's history folded
    loops.notebook.trace_frame(result)       # one row per role call (pandas)
    loops.notebook.trace_frame({"before": a, "after": b})   # many runs: a `run` column says which
    loops.notebook.plot_run(result)          # tokens per role, and how each iteration was judged

A loop's prediction (`loops.LoopResult`) and its trace steps (`loops.Step`) render themselves in
Jupyter through `loops.display`. `trace_frame` needs pandas and `plot_run` matplotlib:
`pip install 'loops[notebooks]'`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dspy

from loops.display import step_judgement, step_outcome
from loops.errors import MissingDependencyError

__all__ = ["TRACE_COLUMNS", "plot_run", "trace_frame"]


TRACE_COLUMNS = ("role", "iteration", "seconds", "attempts", "lm_calls", "input_tokens", "output_tokens",
                 "outcome", "judged", "score", "error", "note", "human")


def trace_frame(runs: Any) -> Any:
    """A pandas DataFrame with one row per role call: `TRACE_COLUMNS` (`judged` and `score` are what
    `step_judgement` says of the step, None for a step that judges nothing; `human` marks a person's
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
            "error": step.error, "note": step.note, "human": step.human,
        })
    return rows


def plot_run(result: Any, title: str | None = None) -> Any:
    """A matplotlib figure of one run: tokens per LLM role (input and output stacked; a phase that calls
    roles is drawn through them), and how each iteration was judged (criteria met, tests passed or the
    evaluator's verdict, from 0 to 1; seconds per iteration when no step judged anything)."""
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
    judged = frame.dropna(subset=["score"])
    if judged.empty:
        seconds = frame.groupby("iteration")["seconds"].sum()
        axes.bar(seconds.index.astype(str), seconds.values)
        axes.set_xlabel("iteration")
        axes.set_ylabel("seconds")
        axes.set_title("seconds per iteration (no step judged the work)")
        return
    for measure, rows in judged.groupby("judged", sort=False):
        # Of an iteration's several samples the loop keeps the best, so the best is the iteration's score.
        best = rows.groupby("iteration")["score"].max()
        axes.plot(best.index, best.values, marker="o", label=measure)
    axes.set_xticks(iterations)
    axes.set_ylim(-0.05, 1.05)
    axes.set_xlabel("iteration")
    axes.set_ylabel("share (0-1)")
    axes.set_title("judgement per iteration")
    axes.legend()


def _require(module: str, helper: str, package: str | None = None) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(f"loops.notebook.{helper} needs {package or module}: "
                                     "pip install 'loops[notebooks]'") from None

"""Looking at loop runs in Jupyter: a trace as a DataFrame, a run as a plot.

    result = loop(requirements="A haiku about a lighthouse")
    result                                   # a summary, the trace as a table, each role's history folded
    loops.notebook.trace_frame(result)       # one row per role call (pandas)
    loops.notebook.trace_frame({"before": a, "after": b})   # many runs: a `run` column says which
    loops.notebook.plot_run(result)          # tokens per role, and what changed per iteration
    loops.notebook.plot_timeline(result)     # who ran when and for how long, tokens and cost over time,
                                             # the waits for a person, the limit that stopped it
    loops.notebook.timeline_html(result)     # the same picture in a page of its own (`loops runs show --html`)

A loop's prediction (`loops.LoopResult`) and its trace steps (`loops.Step`) render themselves in
Jupyter through `loops.vocabulary.display`. `trace_frame` needs pandas, the plots matplotlib:
`pip install 'loops[notebooks]'`.
"""

from __future__ import annotations

import html
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from loops.errors import MissingDependencyError
from loops.vocabulary.display import checks_held, step_judgement, step_outcome, step_role, step_verdict

__all__ = ["TRACE_COLUMNS", "plot_run", "plot_timeline", "timeline_html", "trace_frame"]

LIMIT_REASONS = frozenset({"max_iterations", "timeout", "context_limit", "lm_calls", "tokens", "cost"})


TRACE_COLUMNS = ("role", "iteration", "seconds", "attempts", "lm_calls", "input_tokens", "output_tokens",
                 "outcome", "judged", "score", "verdict", "checks_held", "written_chars", "error", "note", "human")
_WRITTEN = ("improved_draft", "draft", "code", "result")  # the outputs that are the work itself, where a role writes


def trace_frame(runs: Any) -> Any:
    """A pandas DataFrame with one row per role call: `TRACE_COLUMNS` (`judged` and `score` are what
    `step_judgement` says of the step, `verdict` whether it passed the work as the loop took it
    (`step_verdict`: the junk floor and a self-contradicting verdict overrule the LLM), `checks_held` the share
    of checks it found held (`checks_held`), each None for a step that judges nothing; `written_chars` the
    length of the text a writing step wrote (a draft, code, a result); `human` marks a person's
    answer, `loops.running.person`). A phase's `lm_calls` and
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


# --- the timeline ----------------------------------------------------------------------------------------------

# A gap between calls longer than this (a run paused for a person and resumed later, in another process) is
# drawn narrow, with its length written over it, so that hours of waiting do not squash the calls.
_LONG_GAP_S = 10.0
_COLOURS = {"llm": "tab:blue", "phase": "tab:gray", "human": "tab:orange", "error": "tab:red"}


@dataclass(frozen=True)
class _Bar:
    step: Any
    start: float  # seconds from the run's first call, long gaps shortened
    end: float
    kind: str


@dataclass(frozen=True)
class _Gap:
    at: float
    seconds: float


def _kind(step: Any) -> str:
    if step.error:
        return "error"
    if step.human:
        return "human"
    outputs = step.outputs or {}
    return "phase" if set(outputs) == {"result"} else "llm"


def _layout(trace: Sequence[Any]) -> tuple[list[_Bar], list[_Gap], float]:
    """Each call's bar on one time axis: from its `started_at` (a call recorded without one follows the call
    before it), each gap longer than `_LONG_GAP_S` drawn as a twentieth of the calls' own time; and that width."""
    timed, clock = [], None
    for step in trace:
        started = getattr(step, "started_at", None)
        if started is None:
            started = clock if clock is not None else 0.0
        timed.append((started, step))
        clock = max(clock or started, started + step.seconds)
    timed.sort(key=lambda pair: pair[0])
    long_gaps, reached = [], None
    for started, step in timed:
        if reached is not None and started - reached > _LONG_GAP_S:
            long_gaps.append((reached, started))
        reached = max(reached or started, started + step.seconds)
    span = (reached - timed[0][0]) if timed else 0.0
    shown = (span - sum(end - start for start, end in long_gaps)) / 20 or 1e-3
    bars, gaps, shift = [], [], 0.0
    origin = timed[0][0] if timed else 0.0
    pending = list(long_gaps)
    for started, step in timed:
        while pending and pending[0][1] <= started:
            start, end = pending.pop(0)
            gaps.append(_Gap(start - origin - shift, end - start))
            shift += end - start - shown
        begin = started - origin - shift
        bars.append(_Bar(step, begin, begin + step.seconds, _kind(step)))
    return bars, gaps, shown


def _leaves(bars: list[_Bar]) -> list[_Bar]:
    """The calls that made no call themselves: a phase's tokens and cost include those of the calls it made."""
    def contains(outer: _Bar, inner: _Bar) -> bool:
        return outer is not inner and outer.start <= inner.start and inner.end <= outer.end + 1e-6
    return [bar for bar in bars if not any(contains(bar, other) for other in bars)]


def plot_timeline(result: Any, title: str | None = None) -> Any:
    """A matplotlib figure of one run over time: a lane per role with a bar per call (an LLM role's, a phase's,
    a person's, a failed one; a call replayed from a checkpoint hatched), what each came to; below, the tokens
    (and the cost, when priced) added up as the calls end. A wait for a person and a gap while the run was
    paused are shaded, and the end says why the run stopped: a limit, a pause for a person's answer.

    `result` is a loop's prediction, or any prediction with a `trace` (`loops runs show --html` builds one from
    a checkpoint's record)."""
    pyplot = _require("matplotlib.pyplot", "plot_timeline", package="matplotlib")
    from matplotlib.patches import Patch

    bars, gaps, gap_width = _layout(list(result.get("trace") or ()))
    roles = list(dict.fromkeys(step_role(bar.step) for bar in bars))
    figure, (lanes, totals) = pyplot.subplots(2, 1, figsize=(10, 1.6 + 0.45 * max(len(roles), 1) + 2.2),
                                              sharex=True, gridspec_kw={"height_ratios": [max(len(roles), 1), 2.2]})
    pyplot.close(figure)  # drawn when the notebook displays the returned figure, not again when the cell ends
    stop_reason = result.get("stop_reason")
    figure.suptitle(title or f"stop reason: {stop_reason}, success: {result.get('success')}")
    if not bars:
        lanes.text(0.5, 0.5, "no role calls", ha="center", va="center", transform=lanes.transAxes)
        return figure
    end = max(bar.end for bar in bars)
    for bar in bars:
        lane = roles.index(step_role(bar.step))
        lanes.barh(lane, max(bar.end - bar.start, end / 400), left=bar.start, height=0.6,
                   color=_COLOURS[bar.kind], alpha=0.55 if bar.step.replayed else 0.9,
                   hatch="//" if bar.step.replayed else None, edgecolor="black", linewidth=0.4)
        if bar.kind == "human":
            lanes.axvspan(bar.start, bar.end, color=_COLOURS["human"], alpha=0.12)
        outcome = step_outcome(bar.step)
        if outcome and outcome != "ok":
            lanes.text(bar.end, lane, f" {outcome[:32]}", fontsize=7, va="center")
    for gap in gaps:
        lanes.axvspan(gap.at, gap.at + gap_width, color="tab:orange", alpha=0.25)
        lanes.text(gap.at + gap_width / 2, len(roles) - 0.45, f"paused {_duration(gap.seconds)}", fontsize=7,
                   ha="center", va="bottom")
    if stop_reason in LIMIT_REASONS or stop_reason == "awaiting_input":
        question = result.get("question")
        label = (f"limit: {stop_reason}" if stop_reason in LIMIT_REASONS else
                 f"paused: waiting for the {getattr(question, 'role', 'person')}")
        for axes in (lanes, totals):
            axes.axvline(end, color="tab:red" if stop_reason in LIMIT_REASONS else "tab:orange", linestyle="--")
        lanes.text(end, -0.75, f" {label}", fontsize=8, va="top", color="black")
    lanes.set_xlim(0, end * 1.25 or 1.0)  # room for the last call's outcome
    lanes.set_yticks(range(len(roles)), roles)
    lanes.set_ylim(len(roles) - 0.4, -0.9)
    kinds = dict.fromkeys(bar.kind for bar in bars)
    legend = [Patch(color=_COLOURS[kind], label={"llm": "LLM role", "phase": "phase", "human": "a person",
                                                 "error": "failed"}[kind]) for kind in kinds]
    if any(bar.step.replayed for bar in bars):
        legend.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="replayed"))
    lanes.legend(handles=legend, loc="lower right", fontsize=7, framealpha=0.8)
    _plot_totals(totals, _leaves(bars))
    totals.set_xlabel("seconds from the first call" + (" (long pauses shortened)" if gaps else ""))
    figure.tight_layout()
    return figure


def _plot_totals(axes: Any, bars: list[_Bar]) -> None:
    ends = sorted(bars, key=lambda bar: bar.end)
    times, tokens, costs, total, cost = [0.0], [0], [0.0], 0, 0.0
    for bar in ends:
        total += sum((bar.step.tokens or {}).values())
        cost += bar.step.cost_usd or 0.0
        times.append(bar.end)
        tokens.append(total)
        costs.append(cost)
    axes.step(times, tokens, where="post", color="tab:blue", label="tokens")
    axes.set_ylabel("tokens")
    if any(bar.step.cost_usd for bar in bars):
        dollars = axes.twinx()
        dollars.step(times, costs, where="post", color="tab:green", label="cost (USD)")
        dollars.set_ylabel("USD")
    axes.set_title("tokens used (and cost) as the calls end", fontsize=9)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {seconds}s" if minutes else f"{seconds}s"


def timeline_html(result: Any, title: str | None = None) -> str:
    """A page of its own with `plot_timeline`'s picture (SVG) and a table of the calls under it."""
    figure = plot_timeline(result, title)
    svg = io.StringIO()
    figure.savefig(svg, format="svg")
    bars, _, _ = _layout(list(result.get("trace") or ()))
    rows = "".join(
        f"<tr><td>{html.escape(step_role(bar.step))}</td><td>{bar.step.iteration}</td><td>{bar.start:.2f}</td>"
        f"<td>{bar.step.seconds:.2f}</td><td>{_tokens_text(bar.step)}</td>"
        f"<td>{html.escape(step_outcome(bar.step))}</td></tr>" for bar in bars)
    heading = html.escape(title or f"stop reason: {result.get('stop_reason')}")
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" + heading + "</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>"
            f"<h1>{heading}</h1>{svg.getvalue()}<table><tr><th>role</th><th>iteration</th><th>start (s)</th>"
            f"<th>seconds</th><th>tokens in/out</th><th>outcome</th></tr>{rows}</table></body></html>\n")


def _tokens_text(step: Any) -> str:
    return f"{step.tokens['input']}/{step.tokens['output']}" if step.tokens else "-"

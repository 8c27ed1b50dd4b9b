"""What DSPy's optimizers see of a loop: one call per role per run, without its history.

A loop calls a role several times per example (a critic judges every revision, an executor draws
samples), and every call lands in DSPy's trace, each with the role's `history` input. Left as they
are, a bootstrapped demo could be a rejected first draft or a failing sample, chosen at random among
the role's calls, and would render its history as a raw `{"messages": [...]}` blob. So:

- **A demo of a role is the call the run's result rests on**: the call the loop credited
  (`Run.credit`: the Execute–Validate executor's kept candidate, showing the code as it was written
  and tested — fences and example prints removed, names aligned — not the raw answer), else the
  role's last call of the run
  (the critic's final verdict, the iterator's final draft, the creator's only draft). When a run ends,
  the trace an optimizer is capturing keeps that one call per predictor and drops the role's others;
  GEPA's `pred_trace` is that call, the one its feedback (the run's outcome) is about.
- **A demo carries no history.** The `history` input is removed from the kept call, and a role with
  demos renders them without the history field (`demos_without_history`): each demo is one clean
  task-and-answer pair, shown before the role's own turns of the live run.

Only a trace someone is capturing (`dspy.context(trace=[])`, as bootstrapping, GEPA and SIMBA do) is
curated; DSPy's global default trace is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy
from dspy.dsp.utils.settings import main_thread_config

from loops.vocabulary.adapters import mixed_in

__all__ = ["curate_trace", "demos_without_history", "history_field"]


def history_field(signature: Any) -> str | None:
    """The name of a signature's `dspy.History` input, if it has one."""
    return next((name for name, info in signature.input_fields.items() if info.annotation is dspy.History), None)


def curate_trace(calls: Sequence[Any], credited: Sequence[tuple[Any, dict[str, Any]]]) -> None:
    """Keep in the captured trace, per predictor, the one call of `calls` (the predictions a run's role
    calls returned) the result rests on: the last of `credited` (prediction, outputs as the loop used
    them) for that predictor, else its last; strip the history input from the kept call."""
    trace = dspy.settings.trace
    if not trace or trace is main_thread_config.get("trace") or not calls:
        return
    ours = {id(prediction) for prediction in calls}
    used = {id(prediction): outputs for prediction, outputs in credited}
    preferred = set(used)
    kept: dict[int, int] = {}  # predictor -> the index of its kept entry
    for index, (predictor, _, prediction) in enumerate(trace):
        if id(prediction) not in ours:
            continue
        current = kept.get(id(predictor))
        if current is None or id(prediction) in preferred or id(trace[current][2]) not in preferred:
            kept[id(predictor)] = index
    keep = set(kept.values())
    curated = []
    for index, entry in enumerate(trace):
        if id(entry[2]) not in ours:
            curated.append(entry)
        elif index in keep:
            predictor, inputs, prediction = entry
            name = history_field(predictor.signature)
            if used.get(id(prediction)):
                prediction = dspy.Prediction(**{**prediction, **used[id(prediction)]})
            curated.append((predictor, {k: v for k, v in inputs.items() if k != name}, prediction))
    trace[:] = curated


class _DemosWithoutHistory:
    """Renders demos with the signature less its history field: a demo is one task and its answer."""

    def format_demos(self, signature: Any, demos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        name = history_field(signature)
        if name is not None:
            signature = signature.delete(name)
            demos = [{key: value for key, value in demo.items() if key != name} for demo in demos]
        return super().format_demos(signature, demos)


def demos_without_history(adapter: dspy.Adapter) -> dspy.Adapter:
    """`adapter`, rendering demos without the history field (a copy; the adapter itself is unchanged)."""
    return mixed_in(adapter, _DemosWithoutHistory)

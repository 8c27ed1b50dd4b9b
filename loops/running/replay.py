"""Replay as one layer: every call of a run (an LLM role's, a phase's, a person's) goes through `recorded`,
which answers it from the checkpoint's record when the run is a replay, else performs it and saves it.

A replayed call restores what the recording process saw: its trace step (marked `replayed`), its warnings,
the turns of the calls nested in it, and its LM requests, tokens and cost, so that the budget is the whole
run's. Without a checkpoint (`run.replay` None) the layer only performs the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loops.recording import checkpoint
from loops.running.drivers import RoleCalls

if TYPE_CHECKING:
    from loops.running.runtime import Run

__all__ = ["recorded"]


def recorded(run: Run, role: str, inputs: dict[str, Any], perform: Callable[[str | None], RoleCalls], *,
             remember: bool = False, settles: bool = False) -> RoleCalls:
    """`role`'s call with `inputs`: its recorded result when the run replays one, else `perform(inputs_hash)`'s,
    saved with the warnings it raised. With `remember`, the exchange is added to the role's history (a role
    that has one); `settles` marks a person's answer, which settles the question the run may have paused on
    once it is saved. Returns the call's result."""
    warnings_at = len(run.warnings)
    inputs_hash = None if run.replay is None else checkpoint.stable_hash(inputs)  # before the call changes them
    result = _replayed(run, role, inputs_hash)
    answered_here = result is None
    if answered_here:
        result = yield from perform(inputs_hash)
    turn = None
    if remember:
        turn = {**inputs, **result}
        run.remember(role, turn)
    if answered_here:
        _save(run, role, inputs_hash, result, turn, warnings_at)
        if settles and run.replay is not None:
            run.replay.settle()  # answered (here or from elsewhere): the question is the call's record now
    return result


def _replayed(run: Run, role: str, inputs_hash: str | None) -> Any:
    """The recorded result of this call when the run is being replayed (its trace step, warnings, LM requests as
    `replayed`, tokens and cost restored, so the budget is the whole run's), else None."""
    if run.replay is None:
        return None
    run.check_limits()
    found = run.replay.take(role, inputs_hash, nested=run.depth > 0)
    if found is None:
        return None
    inner, call = found
    for record in (*inner, call):
        result, step, warnings, turn = run.replay.unpacked(record)
        if record is not call and turn is not None:
            run.remember(record.role, turn)
        run.warnings.extend(warnings)
        if record is call:  # a phase's record counts the calls nested in it too
            run.counted.replayed += step.lm_calls
            run.usage.tokens += sum(step.tokens.values()) if step.tokens else 0
            if run.usage.cost_usd is not None and step.cost_usd is not None:
                run.usage.cost_usd += step.cost_usd
        step.replayed = True
        step.depth = run.base_depth + run.depth + (record is not call)
        run.record(step)
        run.notify("call_replayed", run.info, step, record is not call or run.depth > 0)
    return result


def _save(run: Run, role: str, inputs_hash: str | None, result: Any, turn: dict[str, Any] | None,
          warnings_at: int) -> None:
    """Record a finished call for replay, with the warnings it raised (less its nested calls')."""
    if run.replay is None:
        return
    raised = [index for index in range(warnings_at, len(run.warnings)) if index not in run.saved_warnings]
    run.saved_warnings.update(raised)
    run.replay.save(role, inputs_hash, run.depth > 0, result, run.trace[-1], [run.warnings[index] for index in raised],
                    turn)

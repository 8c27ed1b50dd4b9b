"""A person's answers as data an optimizer learns from: the turns a person took in a role's place
(`loops.human()`), read back from a checkpoint file as labeled examples of that role.

A human critic's verdicts become an LM critic's demos, or the examples it is tuned and scored on:

    labels = loops.optimize.human_labels("runs.db", role="critic")
    loop = loops.CreatorCriticIterator()
    loop.critic.demos = labels[:4]                                    # the person's verdicts, shown
    tuned = dspy.BootstrapFewShot(metric=loops.optimize.writing.agreement).compile(
        dspy.Predict(CriticSignature), trainset=labels)               # or a critic tuned to agree with them
"""

from __future__ import annotations

import os
from typing import Any

import dspy

from loops.recording.checkpoint import CheckpointStore, opened, unpack

__all__ = ["human_labels"]


def human_labels(checkpoint: str | os.PathLike[str] | CheckpointStore, role: str = "critic") -> list[dspy.Example]:
    """Every answer a person gave in `role`'s place in the runs of `checkpoint` (a DSL loop form's runs included),
    in the order they were given: one `dspy.Example` each, the role's inputs as its inputs and the person's
    fields as its labels (a critic's `approved` and `feedback`, and each criterion the person gave or approval
    implied). A run answered again after a resume counts once: its record is the call's."""
    examples = []
    with opened(checkpoint) as store:
        for run in store.runs():
            for call in store.calls(run.run_id):
                if call.role != role:
                    continue
                _, step, *_ = unpack(call)
                if step.human and step.outputs is not None:
                    examples.append(_example(step.inputs, step.outputs))
    return examples


def _example(inputs: dict[str, Any], labels: dict[str, Any]) -> dspy.Example:
    return dspy.Example(**inputs, **labels).with_inputs(*inputs)

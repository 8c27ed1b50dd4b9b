"""Creator–Critic–Iterator: refine a draft until a critic approves it."""

from __future__ import annotations

from typing import Any

import dspy

from loops.module import LoopModule
from loops.runtime import Program, Run
from signatures.creator_critic import CreatorSignature, CriticSignature, IteratorSignature

_UNREVIEWED = (-1, 0)  # a draft the critic has not judged ranks below every judged one


def verdict_score(verdict: dspy.Prediction) -> tuple[int, int]:
    """How good the critic found a draft: approval first, then the number of criteria passed."""
    passed = sum(bool(verdict.get(flag)) for flag in
                 ("accuracy_completed", "completeness_completed", "quality_completed"))
    return (1 if verdict.completed else 0, passed)


class CreatorCriticIterator(LoopModule):
    """The creator drafts once; then critic → (iterator → critic) until approved or out of budget.

    `max_iterations` counts revisions: 0 means creator + one critic. The result's `final_draft` is
    the approved draft, or else the draft the critic judged best (ties: the latest), and
    `approved` is the critic's verdict on that very draft.
    """

    result_defaults = {"final_draft": None, "approved": False}

    def __init__(self, max_iterations: int = 3, **options: Any):
        super().__init__(max_iterations=max_iterations, **options)
        self.creator = dspy.ChainOfThought(CreatorSignature)
        self.critic = dspy.Predict(CriticSignature)
        self.iterator = dspy.Predict(IteratorSignature)

    def forward(self, requirements: str, context: str = "", **limits: Any) -> dspy.Prediction:
        return self._forward(limits, requirements=requirements, context=context)

    async def aforward(self, requirements: str, context: str = "", **limits: Any) -> dspy.Prediction:
        return await self._aforward(limits, requirements=requirements, context=context)

    def _loop(self, run: Run, requirements: str, context: str) -> Program:
        created = yield from run.call("creator", requirements=requirements, context=context)
        draft = created.draft
        run.keep(_UNREVIEWED, final_draft=draft, approved=False)
        verdict = yield from run.call("critic", requirements=requirements, current_draft=draft)
        run.keep(verdict_score(verdict), final_draft=draft, approved=bool(verdict.completed))
        while not verdict.completed:
            if not run.next_iteration():
                return run.finish("max_iterations")
            revised = yield from run.call(
                "iterator",
                requirements=requirements,
                current_draft=draft,
                critic_feedback=verdict.feedback,
                accuracy_issue=not verdict.accuracy_completed,
                completeness_issue=not verdict.completeness_completed,
                quality_issue=not verdict.quality_completed,
            )
            draft = revised.improved_draft
            run.keep(_UNREVIEWED, final_draft=draft, approved=False)
            verdict = yield from run.call("critic", requirements=requirements, current_draft=draft)
            run.keep(verdict_score(verdict), final_draft=draft, approved=bool(verdict.completed))
        return run.finish("approved")

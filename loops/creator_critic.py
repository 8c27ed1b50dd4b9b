"""Creator–Critic–Iterator: refine a draft until a critic approves it.

Phase contracts (`loops.contracts.CREATOR_CRITIC`)::

    creator(requirements, context, iteration)           -> the draft
    critic(requirements, draft, iteration)              -> a verdict: bool, (approved, feedback), .approved
    iterator(requirements, draft, feedback, iteration)  -> the revised draft

Iteration 1 is the creator's draft and its review; each further iteration is a revision and its
review. Each phase may be the built-in LLM role, any `dspy.Module` or a plain (sync or async)
callable; a custom phase's value reaches the next phase unchanged.

How the built-in creator and iterator write follows the model (`loops.prose`): on the embedded model
they answer in plain text, capped in length, and the creator is shown worked examples.

Under the built-in critic lies a programmatic floor (`loops.junk.is_junk`): junk (an empty draft, the
requirements read back, a placeholder such as "Your original content", no letters at all) is never
approved, whatever the LLM says; an empty draft is not even shown to it.
"""

from __future__ import annotations

from typing import Any

import dspy

from loops.budget import Budget
from loops.contracts import CREATOR_CRITIC, CREATOR_CRITIC_INPUTS, MISSING, verdict_approved, verdict_feedback
from loops.errors import ConfigurationError
from loops.junk import is_junk
from loops.module import LoopModule
from loops.prose import prose_call, prose_settings
from loops.runtime import RoleCalls, Run
from loops.signatures.creator_critic import CRITERIA, CreatorSignature, CriticSignature, IteratorSignature

__all__ = ["CreatorCriticIterator"]

_UNREVIEWED = (-1, 0)  # a draft the critic has not judged ranks below every judged one


class CreatorCriticIterator(LoopModule):
    """The creator drafts; then critic → (iterator → critic) until approved or out of iterations.

    `final` (alias `final_draft`) is the approved draft, or else the draft the critic judged best
    (ties: the latest); `success` (alias `approved`) is the critic's verdict on that very draft. The
    built-in critic approves only when it says `approved` *and* passes all three criteria; a verdict
    that contradicts itself counts as not approved and is noted on its trace step. Nor does it ever
    approve junk (`loops.junk.is_junk`): that is noted on its step and in the warnings, and its feedback
    says what is wrong; an empty draft is rejected without asking the LLM.

    `plain_text=True` has the built-in creator and iterator answer with the text itself (no JSON, no
    reasoning), at most `loops.prose` defaults' `max_tokens`; `examples=True` shows the creator worked
    examples (`loops.prose.WORKED_DRAFTS`; an optimized creator's own demos instead). Left unset, both
    follow the creator's model (`loops.prose.prose_defaults`): on for a small model (the embedded one, or
    any whose profile is small, `loops.profile`), off otherwise.
    """

    contracts = CREATOR_CRITIC
    input_contract = CREATOR_CRITIC_INPUTS
    aliases = {"final_draft": "final", "approved": "success"}

    def __init__(self, max_iterations: int | None = None, creator: Any = None, critic: Any = None,
                 iterator: Any = None, *, plain_text: bool | None = None, examples: bool | None = None,
                 **options: Any):
        super().__init__(max_iterations=max_iterations, **options)
        for name, choice in (("plain_text", plain_text), ("examples", examples)):
            if choice not in (None, True, False):
                raise ConfigurationError(f"{name} must be True, False or None (by model), got {choice!r}")
        self.plain_text = plain_text
        self.examples = examples
        self._builtin = frozenset(role for role, phase, builtin in (
            ("creator", creator, lambda: dspy.ChainOfThought(CreatorSignature)),
            ("critic", critic, lambda: dspy.Predict(CriticSignature)),
            ("iterator", iterator, lambda: dspy.Predict(IteratorSignature)),
        ) if self._set_phase(role, phase, builtin))

    def forward(self, requirements: Any = MISSING, context: Any = "", **limits: Any) -> dspy.Prediction:
        inputs = {"requirements": requirements, "context": context}
        return self._forward(limits, **self._checked_inputs(limits, inputs))

    async def aforward(self, requirements: Any = MISSING, context: Any = "", **limits: Any) -> dspy.Prediction:
        inputs = {"requirements": requirements, "context": context}
        return await self._aforward(limits, **self._checked_inputs(limits, inputs))

    def _builtin_phases(self) -> frozenset[str]:
        return self._builtin

    def settings(self) -> dict[str, Any]:
        """How the built-in creator and iterator write in a run started now: the explicit choices, else
        `loops.prose.prose_defaults` of the creator's model (its own LM, else the context's)."""
        return prose_settings(getattr(self, "creator", None), self.plain_text, self.examples)

    def _loop(self, run: Run, requirements: str, context: str) -> RoleCalls:
        if not run.next_iteration():
            return run.finish("max_iterations")
        writing = self.settings()
        draft = yield from self._create(run, requirements, context, writing)
        while True:
            run.offer_candidate(_UNREVIEWED, final=draft, success=False,
                     best_attempt={"iteration": run.iteration, "draft": draft, "verdict": None})
            verdict = yield from self._review(run, requirements, draft)
            approved = verdict_approved(verdict)
            run.offer_candidate(_score(verdict, approved), final=draft, success=approved,
                     best_attempt={"iteration": run.iteration, "draft": draft, "verdict": verdict})
            if approved:
                return run.finish("approved", final=draft, success=True)
            if not run.next_iteration():
                return run.finish("max_iterations")
            draft = yield from self._revise(run, requirements, draft, verdict, writing)

    def _roles_that_may_run(self, budget: Budget) -> list[str]:
        # The iterator revises from the second iteration on.
        return [role for role in super()._roles_that_may_run(budget) if role != "iterator" or budget.max_iterations > 1]

    def _create(self, run: Run, requirements: str, context: str, writing: dict[str, Any]) -> RoleCalls:
        if "creator" in self._builtin:
            written = yield from run.call("creator", **prose_call("creator", self.creator, writing),
                                          requirements=requirements, context=context)
            return written.draft
        return (yield from run.call_phase("creator", requirements=requirements, context=context,
                                          iteration=run.iteration))

    def _review(self, run: Run, requirements: str, draft: Any) -> RoleCalls:
        if "critic" not in self._builtin:
            return (yield from run.call_phase("critic", requirements=requirements, draft=draft,
                                              iteration=run.iteration))
        junk = is_junk(requirements, draft)
        if junk == "empty":  # nothing to judge: the floor answers alone
            verdict = yield from run.call_phase("critic", _rejecting, requirements=requirements, draft=draft,
                                                iteration=run.iteration)
            return _floored(run, verdict, junk, asked=False)
        verdict = yield from run.call("critic", requirements=requirements, draft=str(draft))
        if junk:
            return _floored(run, verdict, junk)
        failed = [name for name in CRITERIA if not verdict.get(f"{name}_passed")]
        if verdict.approved and failed:
            run.note(f"the critic approved but failed {', '.join(failed)}: not approved")
            run.warn(f"iteration {run.iteration}: the critic's verdict contradicts itself "
                     f"(approved, but {', '.join(failed)} failed); treated as not approved")
            verdict = dspy.Prediction(**{**verdict, "approved": False})
        return verdict

    def _revise(self, run: Run, requirements: str, draft: Any, verdict: Any, writing: dict[str, Any]) -> RoleCalls:
        if "iterator" not in self._builtin:
            return (yield from run.call_phase("iterator", requirements=requirements, draft=draft,
                                              feedback=_feedback_for_iterator(verdict), iteration=run.iteration))
        revised = yield from run.call("iterator", **prose_call("iterator", self.iterator, writing),
                                      requirements=requirements, draft=str(draft),
                                      feedback=_feedback_for_iterator(verdict))
        return revised.improved_draft


def _rejecting(requirements: str, draft: Any, iteration: int) -> dspy.Prediction:
    """The floor as a critic phase: every criterion failed."""
    return dspy.Prediction(**{f"{name}_passed": False for name in CRITERIA}, approved=False, feedback="")


def _floored(run: Run, verdict: Any, junk: str, asked: bool = True) -> dspy.Prediction:
    """A verdict on a junk draft: not approved and every criterion failed, whatever the LLM said, the reason
    first in its feedback."""
    said = ("the critic approved it" if verdict.get("approved") else "the critic agreed") if asked \
        else "the critic was not asked"
    run.note(f"junk ({junk}): not approved")
    run.warn(f"iteration {run.iteration}: the draft is junk ({junk}): not approved ({said})")
    feedback = f"The draft is not the content asked for ({junk}): write the content itself."
    said_too = str(verdict.get("feedback") or "").strip()
    failed = {f"{name}_passed": False for name in CRITERIA}  # ranks below every real draft the critic judged
    return dspy.Prediction(**{**verdict, **failed, "approved": False, "feedback": f"{feedback} {said_too}".strip()})


def _score(verdict: Any, approved: bool) -> tuple[int, int]:
    """How good the critic found a draft: approval first, then the number of criteria passed."""
    return (int(approved), sum(bool(_criterion(verdict, name)) for name in CRITERIA))


def _criterion(verdict: Any, name: str) -> Any:
    return verdict.get(f"{name}_passed") if isinstance(verdict, dspy.Prediction | dict) else None


def _feedback_for_iterator(verdict: Any) -> str:
    failed = [name for name in CRITERIA if _criterion(verdict, name) is False]
    feedback = verdict_feedback(verdict)
    return f"Failed criteria: {', '.join(failed)}.\n{feedback}" if failed else feedback


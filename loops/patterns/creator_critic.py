"""Creator–Critic–Iterator: refine a draft until it is approved.

Phase contracts (`loops.vocabulary.contracts.CREATOR_CRITIC`)::

    creator(requirements, context, iteration)           -> the draft
    critic(requirements, draft, iteration)              -> a verdict: bool, (approved, feedback), .approved
    iterator(requirements, draft, feedback, iteration)  -> the revised draft

Iteration 1 is the creator's draft and its review; each further iteration is a revision and its
review. Each phase may be the built-in LLM role, any `dspy.Module` or a plain (sync or async)
callable; a custom phase's value reaches the next phase unchanged.

A user's checks (`checks=`, `loops.vocabulary.checks`) are the ground truth: they run first, for free, on every
draft, and what a draft comes to is the one verdict rule (`loops.vocabulary.contracts.judge`): a failing check
means not approved, whatever the critic says, and its message is the feedback; with every check
holding the critic decides, unless `critic="checks"` (the checks alone approve, no critic call). The
best attempt is ranked by `loops.vocabulary.contracts.attempt_rank`: checks held, then the critic, ties to the
earlier attempt. No draft is ever edited to make a check hold.

How the built-in creator and iterator write follows the model (`loops.patterns.prose`): on the embedded model
they answer in plain text, capped in length, the creator is shown worked examples, and with checks
several candidates are drawn per iteration and the checks alone approve.

Under every verdict lies a programmatic floor (`loops.vocabulary.junk.is_junk`): junk (an empty draft, the
requirements read back, a placeholder such as "Your original content", no letters at all) is never
approved, whatever the LLM says; an empty draft is not even shown to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from loops.choices import JUDGES
from loops.errors import ConfigurationError, ContractError
from loops.patterns.code.draws import Draw, checked_draws
from loops.patterns.prose import prose_call, prose_settings
from loops.running.module import LoopModule
from loops.running.runtime import RoleCalls, Run
from loops.signatures.creator_critic import CRITERIA, CreatorSignature, CriticSignature, IteratorSignature
from loops.vocabulary.budget import Budget
from loops.vocabulary.checks import Check, CheckReport, as_checks, stated_rules
from loops.vocabulary.contracts import (
    CREATOR_CRITIC,
    CREATOR_CRITIC_INPUTS,
    MISSING,
    UNJUDGED,
    Verdict,
    attempt_rank,
    checked_threshold,
    judge,
)
from loops.vocabulary.junk import is_junk

__all__ = ["CRITIC_CHOICES", "CreatorCriticIterator"]

CRITIC_CHOICES = JUDGES
"""What `critic=` may name instead of a phase: the checks alone approve, or the built-in LLM critic after them."""


@dataclass(frozen=True)
class _Candidate:
    """A draft of a run, its checks, and its place among the run's drafts (`order`: of equal ones, the earlier
    is kept)."""

    draft: Any
    checks: CheckReport
    order: int
    iteration: int
    prediction: Any = None  # the built-in writing role's prediction it came from (None for a custom phase)

    @property
    def rank(self) -> tuple[Any, ...]:
        """Its rank before any critic judged it: by its checks alone."""
        return attempt_rank(Verdict(False, "", self.checks), self.order)


@dataclass
class _Task:
    """What one run writes: the requirements as given (what custom phases get) and as the built-in roles read
    them (`stated`: with the checks' rules), the context, the checks, the settings, and every draft so far."""

    requirements: Any
    stated: str
    context: Any
    checks: tuple[Check, ...]
    settings: dict[str, Any]
    drafts: int = 0  # drafts checked so far: the next one's order


class CreatorCriticIterator(LoopModule):
    """The creator drafts; then review → (revise → review) until approved or out of iterations.

    `final` (alias `final_draft`) is the approved draft, or else the best one (`attempt_rank`: checks
    held, then the critic's verdict; of equal ones the earlier); `success` (alias `approved`) is the
    verdict on that very draft. The built-in critic approves only when it says `approved` *and* passes
    all three criteria; a verdict that contradicts itself (approved with a criterion failed, or rejected
    with every one passed) counts as not approved and is noted on its trace step. Nor is junk ever
    approved (`loops.vocabulary.junk.is_junk`): that is noted on its step and in the warnings, and the feedback says
    what is wrong; an empty draft is rejected without asking the LLM.

    `checks=[...]` (callables of the draft, or short forms such as `"max-words=40"`; `loops.vocabulary.checks`)
    run on every draft first, each traced as a `checks` step; a call may add its own (`checks=` of the
    call). Their rules are stated to the creator, the iterator and the critic (appended to the
    requirements, unless the requirements state them already). `critic="checks"` approves a draft when
    every check holds and asks no critic; `critic="llm"` asks the built-in critic once they hold; left
    unset, the checks alone on a small model such as the embedded one (its critic's verdict was measured
    to be noise), the LLM critic on any other. `samples=n` draws n candidates per iteration, each checked for free, the
    first that holds every check taken (else the best): in the first iteration the creator's (greedy,
    then seeded samples; `loops.patterns.prose.prose_draws`), in later ones the iterator's revision of the best
    draft so far (of equal ones the latest), then fresh drafts of the creator with the failed rules
    restated. `draws=[Draw(...), ...]` (`loops.patterns.code.Draw`, as the code loop's) gives the candidates
    themselves instead, in order (saved with the program), and replaces `samples`.

    A critic may judge by a score instead (a number, a (score, feedback) pair, or a prediction with a `score`
    field): with `threshold=` it approves at or above it, and the best attempt is the highest-scored
    (`loops.vocabulary.contracts.judge`).

    `plain_text=True` has the built-in creator and iterator answer with the text itself (no JSON, no
    reasoning), at most `loops.patterns.prose` defaults' `max_tokens`; `examples=True` shows the creator worked
    examples (`loops.patterns.prose.WORKED_DRAFTS`; an optimized creator's own demos instead). Left unset, these
    and `samples` follow the creator's model (`loops.patterns.prose.prose_defaults`): on (and several samples) for a
    small model (the embedded one, or any whose profile is small, `loops.vocabulary.profile`), off otherwise.
    """

    contracts = CREATOR_CRITIC
    input_contract = CREATOR_CRITIC_INPUTS
    aliases = {"final_draft": "final", "approved": "success"}

    def __init__(self, max_iterations: int | None = None, creator: Any = None, critic: Any = None,
                 iterator: Any = None, *, checks: Any = None, samples: int | None = None,
                 draws: Sequence[Draw] | None = None, plain_text: bool | None = None, examples: bool | None = None,
                 threshold: float | None = None, **options: Any):
        super().__init__(max_iterations=max_iterations, **options)
        self.threshold = checked_threshold(threshold)
        for name, choice in (("plain_text", plain_text), ("examples", examples)):
            if choice not in (None, True, False):
                raise ConfigurationError(f"{name} must be True, False or None (by model), got {choice!r}")
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
            raise ConfigurationError(f"samples must be an int >= 1 or None (by model), got {samples!r}")
        if isinstance(critic, str) and critic not in CRITIC_CHOICES:
            raise ContractError(f"the critic phase must be callable as {CREATOR_CRITIC['critic'].signature}, or be "
                                f"'checks' (the checks alone approve) or 'llm' (the built-in critic, after the "
                                f"checks); got {critic!r}")
        self.checks = as_checks(checks)
        self.draws = checked_draws(draws, samples=samples)
        self.samples = samples
        self.plain_text = plain_text
        self.examples = examples
        for role, phase, builtin in (
            ("creator", creator, lambda: dspy.ChainOfThought(CreatorSignature)),
            ("critic", None if critic == "llm" else critic, lambda: dspy.Predict(CriticSignature)),
            ("iterator", iterator, lambda: dspy.Predict(IteratorSignature)),
        ):
            if role != "critic" or critic != "checks":  # the checks alone: no critic at all
                self._set_phase(role, phase, builtin)
        # Who approves: "checks", "llm", "phase" (a custom critic), or None (by the creator's model). `self.critic`
        # is the role.
        self._critic = critic if isinstance(critic, str) else None if self._phases["critic"].builtin else "phase"

    def forward(self, requirements: Any = MISSING, context: Any = "", checks: Any = None,
                **limits: Any) -> dspy.Prediction:
        inputs = {"requirements": requirements, "context": context, "checks": checks}
        return self._forward(limits, **self._checked_inputs(limits, inputs))

    async def aforward(self, requirements: Any = MISSING, context: Any = "", checks: Any = None,
                       **limits: Any) -> dspy.Prediction:
        inputs = {"requirements": requirements, "context": context, "checks": checks}
        return await self._aforward(limits, **self._checked_inputs(limits, inputs))

    def _checks_alone(self) -> str | None:
        return "critic='checks' approves a draft" if self._critic == "checks" else None

    def settings(self, checks: bool | None = None) -> dict[str, Any]:
        """How a run started now writes and judges: plain text, worked examples, the cap, candidates per
        iteration (`samples`, `draws`) and who approves (`critic`: "checks", "llm", or "phase" for a custom
        critic); the explicit choices, else `loops.patterns.prose.prose_defaults` of the creator's model (its own LM,
        else the context's). `checks` says whether the run has checks (default: whether the module has)."""
        has_checks = bool(self.checks) if checks is None else checks
        settings = prose_settings(getattr(self, "creator", None), self.plain_text, self.examples, self.samples,
                                  self._critic, has_checks)
        if self.draws is not None:
            settings["draws"], settings["samples"] = self.draws, len(self.draws)
        # A custom creator is called as it is: no draw of its own.
        settings["draws"] = self._phases["creator"].either(settings["draws"], (Draw(),) * settings["samples"])
        return settings

    def _loop(self, run: Run, requirements: Any, context: Any, checks: tuple[Check, ...]) -> RoleCalls:
        if not run.next_iteration():
            return run.finish("max_iterations")
        settings = self.settings(bool(checks))
        stated = stated_rules(checks, requirements) if checks and isinstance(requirements, str) else requirements
        task = _Task(requirements, stated, context, checks, settings)
        candidate = yield from self._candidates(run, task, self._first_draft(run, task))
        leader: tuple[_Candidate, Verdict] | None = None
        while True:
            verdict = yield from self._review(run, task, candidate)
            if candidate.prediction is not None:  # an optimizer's demo of the writer: the draft judged
                run.credit(candidate.prediction)
            run.offer_candidate(attempt_rank(verdict, candidate.order), final=candidate.draft,
                                success=verdict.approved, best_attempt=_attempt(candidate, verdict))
            if verdict.approved:
                return run.finish("approved", final=candidate.draft, success=True)
            # The next revision starts from the best draft so far; of equal ones the latest, so that revisions
            # judged no worse go on from there (`final` stays the earlier: `attempt_rank`).
            if leader is None or verdict.rank >= leader[1].rank:
                leader = (candidate, verdict)
            if not run.next_iteration():
                return run.finish("max_iterations")
            candidate = yield from self._candidates(run, task, self._next_draft(run, task, *leader))

    def _roles_that_may_run(self, budget: Budget) -> list[str]:
        # The iterator revises from the second iteration on; with critic="checks" no critic is built.
        return [role for role in super()._roles_that_may_run(budget)
                if role != "iterator" or budget.allows_iteration(2)]

    # Drafting: candidates, each checked ------------------------------------------------------------

    def _first_draft(self, run: Run, task: _Task) -> Any:
        """How the first iteration's candidate number n is drawn (the draft and its prediction): the creator's,
        by its draw."""
        def draft(number: int, draw: Draw) -> RoleCalls:
            return (yield from self._create(run, task, task.context, number, draw))
        return draft

    def _next_draft(self, run: Run, task: _Task, best: _Candidate, verdict: Verdict) -> Any:
        """How a later iteration's candidate number n is drawn (the draft and its prediction): first the iterator's
        revision of the best draft so far, by its verdict's feedback; then fresh drafts of the creator, with what
        that draft got wrong."""
        restated = f"{task.context}\n\n{verdict.feedback}".strip() if isinstance(task.context, str) and \
            verdict.feedback else task.context

        def draft(number: int, draw: Draw) -> RoleCalls:
            if number == 0:
                return (yield from self._revise(run, task, best.draft, verdict))
            run.forget(f"creator.{number + 1}")  # a fresh draft, not a revision of its own last one
            return (yield from self._create(run, task, restated, number, draw))
        return draft

    def _candidates(self, run: Run, task: _Task, draft: Any) -> RoleCalls:
        """Draw the iteration's candidates in turn (`draft(number, draw)`), each checked for free, until one holds
        every check; the best of them (`attempt_rank`: of equal ones, the earlier)."""
        best: _Candidate | None = None
        for number, draw in enumerate(task.settings["draws"]):
            text, prediction = yield from draft(number, draw)
            # Offered before it is checked or judged: a check or a critic that fails must not lose the draft.
            run.offer_candidate(UNJUDGED, final=text, success=False,
                                best_attempt={"iteration": run.iteration, "draft": text, "verdict": None})
            # Junk is no draft, whatever the checks say; a custom critic decides that for itself.
            floor = None if task.settings["critic"] == "phase" else is_junk(task.stated, text)
            report = run.check(task.checks, text, floor=floor) if task.checks else CheckReport(floor=floor)
            task.drafts += 1
            candidate = _Candidate(text, report, task.drafts, run.iteration, prediction)
            run.offer_candidate(candidate.rank, final=text, success=False,
                                best_attempt=_attempt(candidate, Verdict(False, "", report)))
            if best is None or candidate.rank > best.rank:
                best = candidate
            if report.passed:
                break
        return best

    def _create(self, run: Run, task: _Task, context: Any, number: int, draw: Draw) -> RoleCalls:
        """A draft of the creator, and the prediction it came from (None for a custom creator)."""
        rollout = (run.iteration - 1) * len(task.settings["draws"]) + number + 1

        def options() -> dict[str, Any]:
            return {**prose_call("creator", self.creator, task.settings, draw, rollout), "predictor": self.creator}
        return (yield from self._phases["creator"].ask(
            run, "draft", {"requirements": task.stated, "context": context}, options,
            step="creator" if number == 0 else f"creator.{number + 1}", requirements=task.requirements,
            context=context, iteration=run.iteration))

    def _revise(self, run: Run, task: _Task, draft: Any, verdict: Verdict) -> RoleCalls:
        """The iterator's revision, and the prediction it came from (None for a custom iterator)."""
        return (yield from self._phases["iterator"].ask(
            run, "improved_draft", {"requirements": task.stated, "draft": str(draft), "feedback": verdict.feedback},
            lambda: prose_call("iterator", self.iterator, task.settings), requirements=task.requirements, draft=draft,
            feedback=verdict.feedback, iteration=run.iteration))

    # Reviewing: the one verdict rule ---------------------------------------------------------------

    def _review(self, run: Run, task: _Task, candidate: _Candidate) -> RoleCalls:
        """The verdict on the iteration's best candidate (`loops.vocabulary.contracts.judge`): its checks, then the
        critic unless the checks alone approve."""
        checks, draft, critic_mode = candidate.checks, candidate.draft, task.settings["critic"]
        if critic_mode == "checks":
            if checks.floor:
                _junk_noted(run, checks.floor, "no critic is asked: the checks alone approve")
            return judge(checks)
        if critic_mode == "phase":
            critic = yield from run.call_phase("critic", requirements=task.requirements, draft=draft,
                                               iteration=run.iteration)
            return _judged(run, judge(checks if checks.results else None, critic, threshold=self.threshold))
        if checks.floor == "empty":  # nothing to judge: the floor answers alone
            critic = yield from run.call_phase("critic", _rejecting, requirements=task.stated, draft=draft,
                                               iteration=run.iteration)
            _junk_noted(run, checks.floor, "the critic was not asked")
            return judge(checks, critic)
        critic = yield from run.call("critic", requirements=task.stated, draft=str(draft))
        if checks.floor:  # the floor overrules the critic: every criterion failed, whatever it said
            _junk_noted(run, checks.floor, "the critic approved it" if critic.get("approved") else "the critic agreed")
            return judge(checks, dspy.Prediction(**{**critic, **dict.fromkeys(_CRITERIA_FIELDS, False),
                                                    "approved": False}))
        return _judged(run, judge(checks, critic))


def _attempt(candidate: _Candidate, verdict: Verdict) -> dict[str, Any]:
    """The best attempt's record: its iteration and draft, the critic's verdict as given (None when none was
    asked) and, with checks, their report."""
    attempt = {"iteration": candidate.iteration, "draft": candidate.draft, "verdict": verdict.critic}
    if candidate.checks.results:
        attempt["checks"] = candidate.checks
    return attempt


_CRITERIA_FIELDS = tuple(f"{name}_passed" for name in CRITERIA)


def _rejecting(requirements: str, draft: Any, iteration: int) -> dspy.Prediction:
    """The floor as a critic phase: every criterion failed."""
    return dspy.Prediction(**dict.fromkeys(_CRITERIA_FIELDS, False), approved=False, feedback="")


def _junk_noted(run: Run, junk: str, said: str) -> None:
    run.note(f"junk ({junk}): not approved")
    run.warn(f"iteration {run.iteration}: the draft is junk ({junk}): not approved ({said})")


def _judged(run: Run, verdict: Verdict) -> Verdict:
    """A verdict whose critic contradicted itself is noted on the critic's step and warned of; the critic's
    verdict as the loop took it says not approved."""
    if not verdict.contradiction:
        return verdict
    run.note(f"the critic {verdict.contradiction}: not approved")
    run.warn(f"iteration {run.iteration}: the critic's verdict contradicts itself ({verdict.contradiction}); "
             "treated as not approved")
    critic = verdict.critic
    if isinstance(critic, dspy.Prediction | dict):
        critic = type(critic)(**{**critic, "approved": False})
    return dataclasses.replace(verdict, critic=critic)

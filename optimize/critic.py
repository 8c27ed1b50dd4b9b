"""Teaching a Creator–Critic loop's critic: the critic as a program of its own, and labeled verdicts.

`loops.optimize.writing` holds drafts whose verdict a program computes (`check`): the truth a critic is
measured against (`agreement`). Here:

- `CriticOf(loop)`: the loop's critic alone, as a `dspy.Module` taking `(requirements, draft)` and
  returning the verdict the loop would act on (the junk floor and the rule that a verdict approving
  while failing a criterion is no approval, applied as in the loop). Its one predictor, `critic`, *is*
  the loop's: teaching it teaches the loop.
- `labeled_verdicts(split)`: the labeled drafts as examples carrying every output field of the built-in
  critic (each criterion and `approved` the truth, `feedback` the failed checks), so that they can be
  the critic's labeled demos.
- `balanced_demos(split, k)`: `k` of them, alternately a draft that passes and one that breaks a rule
  (junk left out: the floor rejects it), for LabeledFewShot by hand.

The recipe (docs/optimize.md, "Teaching the critic"):

    loop = CreatorCriticIterator()
    critic = CriticOf(loop)
    critic.critic.demos = balanced_demos("train", 8)              # or any optimizer on `critic`, e.g.
    # loops.optimize.run(critic, labeled_verdicts("train"), ..., metric=agreement, optimizer="bootstrap",
    #                    max_labeled_demos=8, max_bootstrapped_demos=0)
    loop(requirements=...)                                        # judged by the taught critic
"""

from __future__ import annotations

import dspy

from loops.errors import ConfigurationError
from loops.optimize.writing import critic_examples
from loops.patterns.creator_critic import CreatorCriticIterator
from loops.signatures.creator_critic import CRITERIA
from loops.vocabulary.junk import is_junk

__all__ = ["CriticOf", "balanced_demos", "labeled_verdicts"]


def _given_draft(requirements: str, context: str, iteration: int) -> str:
    """A creator phase that hands on the draft to be judged (it travels as the context)."""
    return context


class CriticOf(dspy.Module):
    """A Creator–Critic loop's critic as a program: `(requirements, draft)` → the verdict the loop acts on
    (`approved`, each criterion, `feedback`). Its predictor `critic` is the loop's own."""

    def __init__(self, loop: CreatorCriticIterator | None = None):
        super().__init__()
        loop = loop if loop is not None else CreatorCriticIterator()
        if not isinstance(loop, CreatorCriticIterator) or not isinstance(loop.critic, dspy.Predict):
            raise ConfigurationError("CriticOf takes a CreatorCriticIterator with the built-in critic")
        self.critic = loop.critic
        self.retry = loop.retry

    def forward(self, requirements: str, draft: str) -> dspy.Prediction:
        # A one-iteration loop around this very predictor (built per call: an optimizer's copy of this
        # program has a copy of the predictor), so that the loop's own rules judge the draft.
        judge = CreatorCriticIterator(creator=_given_draft, max_iterations=1, retry=self.retry)
        judge.critic = self.critic
        result = judge(requirements=requirements, context=draft)
        verdict = (result.best_attempt or {}).get("verdict") or {}
        fields = {name: verdict.get(name) for name in (*(f"{criterion}_passed" for criterion in CRITERIA), "feedback")}
        return dspy.Prediction(**fields, approved=bool(result.success), warnings=list(result.warnings))


def labeled_verdicts(split: str) -> list[dspy.Example]:
    """The labeled drafts of `split` with every output field of the built-in critic: each criterion and
    `approved` are the truth of `check`, `feedback` the checks that failed (empty when none did)."""
    return [example.copy(**{f"{criterion}_passed": example.approved for criterion in CRITERIA},
                         feedback="; ".join(example.failures)) for example in critic_examples(split)]


def balanced_demos(split: str, k: int) -> list[dspy.Example]:
    """`k` labeled verdicts of `split`, alternately one that passes and one that breaks a rule, taken in
    the set's order (junk left out: the floor rejects it whatever the critic says)."""
    verdicts = [example for example in labeled_verdicts(split) if not is_junk(example.requirements, example.draft)]
    good = [example for example in verdicts if example.approved]
    bad = [example for example in verdicts if not example.approved]
    return [example for pair in zip(good, bad, strict=False) for example in pair][:k]

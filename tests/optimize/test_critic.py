"""Teaching the critic (`loops.optimize.critic`): the critic alone as a program, labeled verdicts, the recipe."""

import dspy
import pytest

import loops.optimize
from loops import ConfigurationError, CreatorCriticIterator, RetryPolicy
from loops.optimize.critic import CriticOf, balanced_demos, labeled_verdicts
from loops.optimize.writing import agreement, critic_examples
from tests.optimize.universal import _output_fields, _taught
from tests.scripted import scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)


def verdict(approved, quality=None):
    quality = approved if quality is None else quality
    return {"accuracy_passed": approved, "completeness_passed": approved, "quality_passed": quality,
            "feedback": "" if approved else "no", "approved": approved}


def test_the_critic_alone_judges_as_the_loop_does_and_is_the_loops_own_predictor():
    loop = CreatorCriticIterator(retry=NO_WAIT)
    critic = CriticOf(loop)
    assert critic.critic is loop.critic and [name for name, _ in critic.named_predictors()] == ["critic"]

    with dspy.context(lm=scripted_lm([verdict(True), verdict(True, quality=False), verdict(True)])):
        assert critic(requirements="A haiku about rain.", draft="Rain taps the glass").approved
        contradicted = critic(requirements="A haiku about rain.", draft="Rain taps the glass")
        junk = critic(requirements="A haiku about rain.", draft="Your original content")
    assert not contradicted.approved and "contradicts itself" in contradicted.warnings[0]
    assert not junk.approved and junk.quality_passed is False and "junk" in junk.warnings[0]
    with pytest.raises(ConfigurationError, match="CriticOf takes a CreatorCriticIterator with the built-in critic"):
        CriticOf(CreatorCriticIterator(critic=lambda requirements, draft, iteration: True))


def test_labeled_verdicts_carry_every_critic_field_and_a_wrong_verdict_scores_zero():
    verdicts = labeled_verdicts("train")
    assert len(verdicts) == len(critic_examples("train"))
    for example in verdicts:
        assert example.accuracy_passed == example.completeness_passed == example.quality_passed == example.approved
        assert (example.feedback == "") == example.approved
    wrong = next(example for example in verdicts if not example.approved)
    assert agreement(wrong, dspy.Prediction(**verdict(True))) == 0.0
    assert agreement(wrong, dspy.Prediction(**verdict(False))) == 1.0


def test_balanced_demos_alternate_a_passing_draft_and_one_that_breaks_a_rule_without_junk():
    demos = balanced_demos("train", 6)
    assert [demo.approved for demo in demos] == [True, False] * 3
    assert all(demo.draft.strip() and "Your original content" not in demo.draft for demo in demos)


def taught_critic(engine, request):
    """A critic that approves nothing untaught, and once shown labeled demos approves drafts about rain."""
    if "approved" not in _output_fields(request):
        return {"reasoning": "r", "draft": "d"}
    approved = _taught(request) and "rain" in (request.messages[-1].text or "").split("draft ## ]]")[-1].lower()
    return verdict(approved)


def test_the_recipe_labeled_demos_on_the_critic_alone_raises_agreement_and_teaches_the_loop():
    trainset = [example for example in labeled_verdicts("train") if not example.approved][:3] + \
        [example for example in labeled_verdicts("train") if example.approved][:3]
    rain = dspy.Example(requirements="A haiku about rain.", draft="Rain taps the glass", approved=True,
                        failures=[]).with_inputs("requirements", "draft")
    snow = dspy.Example(requirements="A haiku about rain.", draft="Snow falls on the hill", approved=False,
                        failures=["does not include the word 'rain'"]).with_inputs("requirements", "draft")
    loop = CreatorCriticIterator(max_iterations=1, retry=NO_WAIT)
    with dspy.context(lm=scripted_lm(taught_critic)):
        taught, report = loops.optimize.run(CriticOf(loop), trainset, [rain, snow], agreement, optimizer="bootstrap",
                                            progress=False, max_labeled_demos=4, max_bootstrapped_demos=0)
        loop.critic.demos = taught.critic.demos  # the loop's own critic, taught
        judged = loop(requirements="A haiku about rain.")

    assert (report.before.score, report.after.score, report.kept) == (0.5, 1.0, "optimized")
    assert len(taught.critic.demos) == 4 and all(demo.get("approved") is not None for demo in taught.critic.demos)
    assert judged.trace[1].role == "critic" and judged.trace[1].outputs["approved"] is False  # "d" is no rain

"""A person's verdicts as data: `loops.optimize.human_labels` reads the answers a person gave as the critic from
a checkpoint file, as labeled examples an LM critic is shown (its demos) and scored against."""

from __future__ import annotations

import dspy

import loops
from loops import CreatorCriticIterator
from loops.optimize import human_labels
from loops.optimize.writing import agreement
from loops.signatures.creator_critic import CriticSignature
from tests.loops.test_long_loops import never_approving
from tests.scripted import request_text, scripted_lm


def recorded_verdicts(path) -> None:
    """Two runs whose critic is a person: one rejection with feedback and an approval, then one approval."""
    answers = iter([{"approved": False, "feedback": "Name the bottle"}, {"approved": True}, {"approved": "yes"}])
    critic = loops.human(answer=lambda question: next(answers))
    with dspy.context(lm=scripted_lm(never_approving)):
        for run_id, requirements in (("r1", "A slogan for a bottle"), ("r2", "A slogan for a bike")):
            CreatorCriticIterator(max_iterations=3, critic=critic)(requirements=requirements, checkpoint=path,
                                                                   run_id=run_id)


def test_a_persons_verdicts_are_labeled_examples_of_the_critic(tmp_path):
    recorded_verdicts(tmp_path / "runs.db")
    labels = human_labels(tmp_path / "runs.db")

    assert [(example.requirements, example.draft, example.approved) for example in labels] == [
        ("A slogan for a bottle", "D0", False), ("A slogan for a bottle", "D1", True),
        ("A slogan for a bike", "D0", True)]
    assert labels[0].feedback == "Name the bottle" and "accuracy_passed" not in labels[0]
    assert labels[1].accuracy_passed is True  # approving passes every criterion
    assert set(labels[0].inputs()) == {"requirements", "draft"}
    assert human_labels(tmp_path / "runs.db", role="iterator") == []  # an LM's turns are no person's labels


def test_an_lm_critic_is_shown_the_persons_verdicts_and_scored_against_them(tmp_path):
    recorded_verdicts(tmp_path / "runs.db")
    labels = human_labels(tmp_path / "runs.db")
    lm = scripted_lm(lambda engine, request: {"accuracy_passed": True, "completeness_passed": True,
                                              "quality_passed": True, "feedback": "", "approved": True})
    critic = dspy.Predict(CriticSignature)
    critic.demos = labels[:2]
    with dspy.context(lm=lm):
        verdict = critic(requirements="A slogan for a cup", draft="Sip", history=dspy.History(messages=[]))

    shown = request_text(lm.engine.requests[0])
    assert "Name the bottle" in shown and "A slogan for a bottle" in shown
    assert [agreement(example, verdict) for example in labels] == [0.0, 1.0, 1.0]

"""The writing tasks' ground truth: every rule is stated to the writer and checked by `check`; the
splits are the promised sizes with no topic in common; the labeled drafts carry `check`'s verdicts
(a flipped one is caught); the metrics score verdicts and final drafts; `is_junk` flags every kind
of junk and no real draft."""

from __future__ import annotations

import dataclasses
import re

import dspy
import pytest

from loops.errors import ConfigurationError
from loops.optimize import writing, writing_tasks
from loops.optimize.writing import (
    WritingTask,
    agreement,
    check,
    critic_examples,
    draft_passes,
    labeled_drafts,
    refine_examples,
    task_by_id,
    tasks,
)
from loops.vocabulary.checks import Avoid, CheckReport, Count, Include
from loops.vocabulary.junk import is_junk

ALL_TASKS = tasks("train") + tasks("heldout")
ALL_DRAFTS = labeled_drafts("train") + labeled_drafts("heldout")


def test_the_public_names_exist():
    assert all(hasattr(writing, name) for name in writing.__all__)


# ---------------------------------------------------------------- tasks


@pytest.mark.parametrize("task", ALL_TASKS, ids=lambda task: task.id)
def test_the_requirements_state_every_check(task):
    text = task.requirements.lower()
    for constraint in task.checks:
        assert constraint.rule in task.requirements
        # Not only the sentence: each number, word and unit the check uses is there for the writer to read.
        for field in dataclasses.fields(constraint):
            value = getattr(constraint, field.name)
            if value is not None:
                assert str(value).lower() in text, (task.id, constraint, field.name)


@pytest.mark.parametrize("split", writing.SPLITS)
def test_each_split_has_about_thirty_tasks_and_sixty_labeled_drafts(split):
    assert 25 <= len(tasks(split)) <= 35
    assert all(task.split == split for task in tasks(split))
    assert len(labeled_drafts(split)) >= 60
    assert len({draft.task_id for draft in labeled_drafts(split)}) >= 10


def test_the_splits_share_no_task_and_no_topic():
    train, heldout = tasks("train"), tasks("heldout")
    assert len({task.id for task in ALL_TASKS}) == len(ALL_TASKS)
    assert not {task.topic for task in train} & {task.topic for task in heldout}
    assert not {draft.task_id for draft in labeled_drafts("train")} & {task.id for task in heldout}


def test_every_task_requires_a_word_of_its_topic_so_off_topic_text_fails():
    assert all(any(isinstance(constraint, Include) for constraint in task.checks) for task in ALL_TASKS)


def test_an_unknown_split_or_task_says_what_exists():
    with pytest.raises(ConfigurationError, match="train, heldout"):
        tasks("test")
    with pytest.raises(ConfigurationError, match="no writing task 'nope'"):
        task_by_id("nope")


# ---------------------------------------------------------------- check


def made(*constraints) -> WritingTask:
    return WritingTask("made", "A test draft.", constraints, "train", "testing")


def test_check_reports_each_failed_rule_of_the_task():
    report = check(made(Count("word", max=3), Include("wheel"), Avoid("cheap")), "Cheap wheels for every bike.")
    assert isinstance(report, CheckReport) and not report.passed
    assert report.failures == ["has 5 words; use at most 3", "does not include the word 'wheel'",
                               "uses the forbidden word 'cheap'"]
    assert check(made(Count("word", max=3), Include("wheel")), "A true wheel.").passed


@pytest.mark.parametrize("draft", ["", "  \n", "Your original content", "[draft]", "][", "TODO",
                                   "A haiku about rain. Include the word 'rain'."])
def test_check_fails_junk_even_when_it_meets_every_constraint(draft):
    task = WritingTask("rain", "A haiku about rain. Include the word 'rain'.", (Avoid("snow"),), "train", "rain")
    result = check(task, draft)
    assert not result.passed and result.failures[0].startswith("junk: ")


# ---------------------------------------------------------------- the labeled drafts


def mislabeled(drafts) -> list:
    """The drafts whose label is not what `check` says of them."""
    return [draft for draft in drafts if (draft.approved, draft.failures) != (
        (report := check(task_by_id(draft.task_id), draft.draft)).passed, report.failures)]


def test_every_label_is_what_check_says():
    assert mislabeled(ALL_DRAFTS) == []


def test_every_hand_written_draft_belongs_to_a_task_and_is_labeled():
    assert set(writing_tasks.DRAFTS) <= {task.id for task in ALL_TASKS}  # a misspelt id would drop its drafts
    assert len(ALL_DRAFTS) == sum(map(len, writing_tasks.DRAFTS.values()))


def test_a_flipped_label_is_caught():
    flipped = dataclasses.replace(ALL_DRAFTS[0], approved=not ALL_DRAFTS[0].approved)
    assert mislabeled([flipped, *ALL_DRAFTS[1:]]) == [flipped]


@pytest.mark.parametrize("split", writing.SPLITS)
def test_about_half_of_each_split_is_approved(split):
    drafts = labeled_drafts(split)
    assert 0.35 <= sum(draft.approved for draft in drafts) / len(drafts) <= 0.65


@pytest.mark.parametrize("labeled", ALL_DRAFTS, ids=lambda labeled: f"{labeled.task_id}-{labeled.kind}")
def test_each_draft_is_what_its_author_meant(labeled):
    junk = is_junk(task_by_id(labeled.task_id).requirements, labeled.draft)
    if labeled.kind == "good":
        assert labeled.approved and junk is None
    elif labeled.kind == "flawed":  # exactly one rule broken: the critic has one thing to find
        assert not labeled.approved and len(labeled.failures) == 1 and junk is None
    elif labeled.kind == "off-topic":
        assert not labeled.approved and junk is None
        assert any(failure.startswith("does not include the word") for failure in labeled.failures)
    else:
        assert labeled.kind == "junk"
        assert not labeled.approved and junk is not None and labeled.failures[0] == f"junk: {junk}"


@pytest.mark.parametrize("split", writing.SPLITS)
def test_each_split_has_every_kind_of_draft_and_of_junk(split):
    drafts = labeled_drafts(split)
    assert {draft.kind for draft in drafts} == {"good", "flawed", "off-topic", "junk"}
    reasons = " ".join(draft.failures[0] for draft in drafts if draft.kind == "junk")
    for reason in ("empty", "no letters", "placeholder", "repeats the requirements"):
        assert reason in reasons


def test_critic_and_refine_examples_carry_the_inputs_and_the_truth():
    examples = critic_examples("heldout")
    assert len(examples) == len(labeled_drafts("heldout"))
    assert all(set(example.inputs().keys()) == {"requirements", "draft"} for example in examples)
    assert all(example.requirements == task_by_id(example.task_id).requirements for example in examples)
    assert [example.approved for example in examples] == [draft.approved for draft in labeled_drafts("heldout")]
    refine = refine_examples("train")
    assert [example.task_id for example in refine] == [task.id for task in tasks("train")]
    assert all(set(example.inputs().keys()) == {"requirements", "context", "checks"} and example.context == ""
               and example.checks == list(task_by_id(example.task_id).checks) for example in refine)


# ---------------------------------------------------------------- metrics

APPROVED = next(example for example in critic_examples("train") if example.approved)
REJECTED = next(example for example in critic_examples("train") if not example.approved)


@pytest.mark.parametrize("verdict_of", [
    lambda approved: approved,
    lambda approved: (approved, "feedback"),
    lambda approved: {"approved": approved, "feedback": ""},
    lambda approved: dspy.Prediction(approved=approved, feedback=""),
])
def test_agreement_scores_a_right_verdict_1_and_a_wrong_one_0(verdict_of):
    assert agreement(APPROVED, verdict_of(True)) == 1.0
    assert agreement(APPROVED, verdict_of(False)) == 0.0
    assert agreement(REJECTED, verdict_of(False)) == 1.0
    assert agreement(REJECTED, verdict_of(True)) == 0.0


def test_a_verdict_that_contradicts_itself_counts_as_not_approved_as_in_the_loop():
    contradiction = dspy.Prediction(approved=True, accuracy_passed=True, completeness_passed=False,
                                    quality_passed=True, feedback="")
    assert agreement(REJECTED, contradiction) == 1.0
    assert agreement(APPROVED, contradiction) == 0.0


def test_agreement_answers_bootstrapping_with_a_bool_and_gepa_with_the_failures():
    assert agreement(REJECTED, True, trace=[]) is False
    answer = agreement(REJECTED, True, None, "critic", [])
    assert answer.score == 0.0 and "wrongly" in answer.feedback and REJECTED.failures[0] in answer.feedback


def test_agreement_refuses_what_is_no_verdict():
    with pytest.raises(ConfigurationError, match="bool `approved`"):
        agreement(APPROVED, dspy.Prediction(feedback="fine"))


def test_draft_passes_scores_the_final_draft_against_its_task():
    example = next(example for example in refine_examples("train") if example.task_id == "bike-shop-slogan")
    assert draft_passes(example, dspy.Prediction(final="Every wheel true, every ride new.")) == 1.0
    assert draft_passes(example, dspy.Prediction(final="Your original content")) == 0.0
    assert draft_passes(example, dspy.Prediction(final=None)) == 0.0
    assert "has 9 words; use at most 8" in draft_passes(example, dspy.Prediction(final="wheel " * 9), None, "creator",
                                               []).feedback
    with pytest.raises(ConfigurationError, match="task_id"):
        draft_passes(dspy.Example(requirements="x"), dspy.Prediction(final="x"))


# ---------------------------------------------------------------- is_junk

REQUIREMENTS = task_by_id("bike-shop-slogan").requirements  # "A slogan for a bicycle repair shop. Use at most ..."


@pytest.mark.parametrize("draft, reason", [
    ("", "empty"),
    (" \n\t ", "empty"),
    ("][", "no letters"),
    ("... 42 !", "no letters"),
    ("');\n```json\n{", "no letters"),  # what the embedded model answered to an email task
    ("Your original content", "placeholder"),
    ("Here it is:\nYOUR ORIGINAL CONTENT", "placeholder"),
    ("[draft]", "placeholder"),
    ("{draft}", "placeholder"),
    ("Lorem ipsum dolor sit amet.", "placeholder"),
    ("TODO", "placeholder"),
    ("TODO: write the slogan", "placeholder"),
    (REQUIREMENTS, "repeats the requirements"),
    ("A slogan for a bicycle repair shop.", "repeats the requirements"),  # a prefix
    ("use at most 8 words, include the word wheel!", "repeats the requirements"),  # a piece; punctuation ignored
    ("Slogan: a slogan for a bicycle repair shop. Use at most 8 words.", "repeats the requirements"),
])
def test_is_junk_flags_every_kind_of_junk(draft, reason):
    assert reason in (is_junk(REQUIREMENTS, draft) or "")


ORDINARY = [
    "The train leaves at half past seven.",
    "Please add milk to the shopping list.",
    "Our bakery opens at seven every morning.",
    "Use at most one coupon per order.",
    "Include your name and address on the form.",
    "I put it on my to-do list for tomorrow.",
    "My todo app reminds me of birthdays.",
    "Thank you for the lovely flowers!",
    "Rain is expected on Saturday afternoon.",
    "A slogan should be short and memorable.",
    "Can you water the plants while I am away?",
    "The meeting moved to Thursday at ten.",
    "Kids under five ride the bus for free.",
    "Wheel the bins out on Monday night.",
    "The museum shop sells postcards and maps.",
    "He fixed the flat tire in five minutes.",
    "Our new menu has three vegan dishes.",
    "Turn left at the church, then go straight on.",
    "Snow closed the mountain road overnight.",
    "Blue",  # one word found in the requirements may still be the answer
]


@pytest.mark.parametrize("sentence", ORDINARY)
def test_is_junk_passes_ordinary_sentences_whatever_the_task(sentence):
    assert [task.id for task in ALL_TASKS if is_junk(task.requirements, sentence)] == []
    assert is_junk("Pick red or blue.", sentence) is None


def test_is_junk_passes_every_draft_that_is_not_junk():
    real = [draft for draft in ALL_DRAFTS if draft.kind != "junk"]
    assert len(real) > 100
    assert [draft.draft for draft in real if is_junk(task_by_id(draft.task_id).requirements, draft.draft)] == []


def test_the_echo_rule_is_the_documented_share_of_word_triples():
    # Ten word triples of which eight are the requirements': junk at 80 %, not at 70 %.
    asked = "one two three four five six seven eight nine ten"
    assert is_junk(asked, "one two three four five six seven eight nine ten x y") is not None
    assert is_junk(asked, "one two three four five six seven eight nine x y z") is None
    assert re.search(r"8 of its 10", is_junk(asked, "one two three four five six seven eight nine ten x y"))

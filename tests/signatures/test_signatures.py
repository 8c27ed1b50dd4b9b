import dspy
import pytest

import loops.signatures as signatures
from loops.signatures import CreatorSignature, CriticSignature, IteratorSignature
from loops.signatures.director import (
    DirectorSignature,
    EvaluatorSignature,
    LoopControllerSignature,
    PlanExecutorSignature,
)
from loops.signatures.execute_validate import ExecutorSignature, IterationAnalystSignature

ROLES = [CreatorSignature, CriticSignature, IteratorSignature, ExecutorSignature, IterationAnalystSignature,
         DirectorSignature, PlanExecutorSignature, EvaluatorSignature, LoopControllerSignature]


@pytest.mark.parametrize("signature", ROLES)
def test_every_role_has_its_own_history_and_described_fields(signature):
    assert signature.input_fields["history"].annotation is dspy.History
    for name, field in {**signature.input_fields, **signature.output_fields}.items():
        assert field.json_schema_extra.get("desc"), f"{signature.__name__}.{name} has no description"


def test_role_instructions_are_distinct():
    # GEPA maps traces to predictors by signature equality: two roles must never look alike.
    assert len({signature.instructions for signature in ROLES}) == len(ROLES)


def test_the_critic_has_three_criteria_and_an_approved_verdict_and_the_iterator_only_the_feedback():
    assert list(CriticSignature.input_fields) == ["requirements", "draft", "history"]
    assert list(CriticSignature.output_fields) == [
        "accuracy_passed", "completeness_passed", "quality_passed", "feedback", "approved"]
    assert {name for name, field in CriticSignature.output_fields.items() if field.annotation is bool} == {
        "accuracy_passed", "completeness_passed", "quality_passed", "approved"}
    assert list(IteratorSignature.input_fields) == ["requirements", "draft", "feedback", "history"]
    assert list(IteratorSignature.output_fields) == ["improved_draft"]
    assert list(CreatorSignature.output_fields) == ["draft"]


def test_no_output_field_is_named_like_chat_adapters_end_marker():
    # ChatAdapter ends every answer with `[[ ## completed ## ]]`; a field of that name collides with it.
    for signature in ROLES:
        assert "completed" not in signature.output_fields, signature.__name__
        assert "response" not in signature.output_fields, signature.__name__


def test_public_names_are_curated():
    assert sorted(signatures.__all__) == sorted(name for name in vars(signatures) if name[0].isupper())

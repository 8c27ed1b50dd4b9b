import dspy
import pytest

import signatures
from signatures import CreatorSignature, CriticSignature, IteratorSignature
from signatures.director import DirectorSignature, EvaluatorSignature, LoopControllerSignature, PlanExecutorSignature
from signatures.execute_validate import ExecutorSignature, IterationAnalystSignature

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


def test_the_critic_has_three_criteria_and_a_master_flag_and_the_iterator_the_issue_flags():
    assert list(CriticSignature.output_fields) == [
        "accuracy_completed", "completeness_completed", "quality_completed", "response", "feedback", "completed"]
    assert {name for name, field in CriticSignature.output_fields.items() if field.annotation is bool} == {
        "accuracy_completed", "completeness_completed", "quality_completed", "completed"}
    assert {"accuracy_issue", "completeness_issue", "quality_issue", "critic_feedback"} <= set(
        IteratorSignature.input_fields)
    assert list(CreatorSignature.output_fields) == ["response", "draft"]


def test_public_names_are_curated():
    assert sorted(signatures.__all__) == sorted(name for name in vars(signatures) if name[0].isupper())

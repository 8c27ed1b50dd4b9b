"""The result models of the Execute–Validate–Controller loop."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loops.signatures.results import ControllerDecision, StructuredAnalysisResult, TaskResult, ValidationResult


def test_task_result_defaults_and_status_normalisation():
    result = TaskResult(status=" complete ")
    assert (result.status, result.content, result.notes, result.files) == ("COMPLETE", None, {}, {})
    assert TaskResult(status="FAILED", files={"a.py": "x = 1\n"}).files == {"a.py": "x = 1\n"}


def test_task_result_rejects_unknown_status():
    with pytest.raises(ValidationError, match="COMPLETE"):
        TaskResult(status="DONE")


def test_models_are_frozen():
    result = ValidationResult(exit_code=0)
    with pytest.raises(ValidationError, match="frozen"):
        result.exit_code = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ({"exit_code": 0}, True),
        ({"exit_code": 1}, False),
        ({"exit_code": 0, "error": "timed out after 1s"}, False),
        ({"exit_code": -9, "timed_out": True, "error": "timed out after 1s"}, False),
    ],
)
def test_validation_result_ok(fields, ok):
    assert ValidationResult(**fields).ok is ok


def test_validation_result_requires_exit_code():
    with pytest.raises(ValidationError, match="exit_code"):
        ValidationResult()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "fields",
    [
        {"success": True, "analysis": "all green"},
        {"success": True, "analysis": "ok", "next_input": "unused"},
        {"success": False, "analysis": "2 failing", "next_input": "fix test_b", "new_files": ["b.py"]},
    ],
)
def test_structured_analysis_valid(fields):
    result = StructuredAnalysisResult(**fields)
    assert result.success is fields["success"]
    assert result.new_files == fields.get("new_files", [])


@pytest.mark.parametrize("next_input", [None, "", "   "])
def test_structured_analysis_requires_next_input_on_failure(next_input):
    with pytest.raises(ValidationError, match="next_input is required .* when success is false"):
        StructuredAnalysisResult(success=False, analysis="broken", next_input=next_input)


def test_direct_construction_validates_action():
    assert ControllerDecision(action="Stop").action == "stop"
    with pytest.raises(ValidationError, match="action"):
        ControllerDecision(action="pause")

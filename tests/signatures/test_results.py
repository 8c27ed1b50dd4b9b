"""The result models of the Execute–Validate–Controller loop."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loops.errors import DecisionError
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


@pytest.mark.parametrize(
    ("raw", "action", "value"),
    [
        (ControllerDecision.proceed(3), "continue", 3),
        (ControllerDecision.stop("done"), "stop", "done"),
        (("continue", "v"), "continue", "v"),
        (["stop", {"k": 1}], "stop", {"k": 1}),
        (("CONTINUE", None), "continue", None),
        ((" Stop ", 0), "stop", 0),
        ({"action": "continue", "value": [1]}, "continue", [1]),
        ({"action": "STOP"}, "stop", None),
    ],
)
def test_coerce_accepted_forms(raw, action, value):
    decision = ControllerDecision.coerce(raw)
    assert (decision.action, decision.value) == (action, value)
    assert decision.should_stop is (action == "stop")


def test_coerce_returns_the_same_decision():
    decision = ControllerDecision.proceed(1)
    assert ControllerDecision.coerce(decision) is decision


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (("maybe", 1), "('maybe', 1)"),
        ([], "[]"),
        ("stop", "'stop'"),
        ({"action": "go"}, "{'action': 'go'}"),
        (42, "42"),
        (("stop", 1, 2), "('stop', 1, 2)"),
        ((1, "stop"), "(1, 'stop')"),
        ({"action": "stop", "valu": 1}, "{'action': 'stop', 'valu': 1}"),
        (None, "None"),
    ],
)
def test_coerce_rejects_with_a_message_naming_the_value(raw, shown):
    with pytest.raises(DecisionError) as caught:
        ControllerDecision.coerce(raw)
    assert str(caught.value) == (
        f"controller returned {shown}, which is not a decision; expected ControllerDecision, "
        "a 2-element list/tuple ('continue' | 'stop', value), "
        "or a dict {'action': 'continue' | 'stop', 'value': ...}"
    )


def test_coerce_truncates_a_long_value():
    with pytest.raises(DecisionError) as caught:
        ControllerDecision.coerce("x" * 10_000)
    message = str(caught.value)
    assert len(message) < 400
    assert "'xxxx" in message and "…" in message


def test_direct_construction_validates_action():
    assert ControllerDecision(action="Stop").action == "stop"
    with pytest.raises(ValidationError, match="action"):
        ControllerDecision(action="pause")

import dspy
import pytest

from loops.adapters import CompactJSONAdapter, PlainTextAdapter
from loops.errors import ConfigurationError
from signatures import CreatorSignature
from signatures.execute_validate import ExecutorSignature
from tests.scripted import request_text, scripted_lm


def test_the_request_is_plain_text_without_field_markers():
    messages = PlainTextAdapter().format(
        ExecutorSignature,
        demos=[],
        inputs={"task": "Write add(a, b)", "target_file": "solution.py", "file_context": "",
                "history": dspy.History(messages=[])},
    )

    assert [message["role"] for message in messages] == ["system", "user"]
    assert messages[0]["content"].startswith("You are the EXECUTOR.")
    assert messages[1]["content"] == "Task:\nWrite add(a, b)\n\nTarget file:\nsolution.py\n\nAnswer with the code only."
    assert "[[ ##" not in "".join(message["content"] for message in messages)


def test_history_and_demos_render_as_plain_turns():
    history = dspy.History(messages=[{"task": "first try", "target_file": "s.py", "code": "x = 1", "notes": ""}])
    demo = {"task": "demo task", "target_file": "d.py", "file_context": "", "code": "y = 2", "notes": ""}

    messages = PlainTextAdapter().format(
        ExecutorSignature, demos=[demo], inputs={"task": "now", "target_file": "s.py", "history": history}
    )

    assert [message["role"] for message in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2]["content"] == "y = 2" and messages[4]["content"] == "x = 1"
    assert "first try" in messages[3]["content"]


def test_the_whole_answer_becomes_the_first_output_field():
    predict = dspy.Predict(ExecutorSignature)
    lm = scripted_lm(["Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"])

    with dspy.context(lm=lm, adapter=PlainTextAdapter()):
        prediction = predict(task="Write add", target_file="solution.py", file_context="")

    assert prediction.code.startswith("Here you go:") and prediction.code.endswith("```")
    assert prediction.notes == ""
    assert "Answer with the code only." in request_text(lm.engine.requests[0])


def test_signatures_with_non_text_secondary_outputs_are_refused():
    class Judge(dspy.Signature):
        """Judge."""

        text: str = dspy.InputField()
        verdict: str = dspy.OutputField()
        score: int = dspy.OutputField()

    with pytest.raises(ConfigurationError, match="output fields after the first are all str"):
        PlainTextAdapter().format(Judge, demos=[], inputs={"text": "t"})


def test_compact_json_names_the_keys_without_placeholders_small_models_would_copy():
    inputs = {"requirements": "a haiku", "context": "", "history": dspy.History(messages=[])}
    messages = CompactJSONAdapter().format(CreatorSignature, demos=[], inputs=inputs)
    text = "\n".join(message["content"] for message in messages)

    assert "{draft}" not in text and "{response}" not in text
    assert "Respond with a JSON object with the keys `response`, `draft`." in text
    answer = CompactJSONAdapter().parse(CreatorSignature, '{"response": "r", "draft": "d"}')
    assert answer == {"response": "r", "draft": "d"}

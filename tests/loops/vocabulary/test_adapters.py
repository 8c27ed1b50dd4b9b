import dspy
import pytest

from loops.errors import ConfigurationError
from loops.lm import LlamaEngine
from loops.signatures import CreatorSignature, CriticSignature
from loops.signatures.execute_validate import ExecutorSignature
from loops.vocabulary.adapters import CompactJSONAdapter, PlainTextAdapter, historyless_once
from loops.vocabulary.demos import demos_without_history
from loops.vocabulary.profile import adapter_for
from tests.scripted import chat_format, request_text, scripted_lm


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

    with pytest.raises(ConfigurationError, match="the output field 'verdict' whose other output fields are all str"):
        PlainTextAdapter().format(Judge, demos=[], inputs={"text": "t"})
    with pytest.raises(ConfigurationError, match="the output field 'draft'"):
        PlainTextAdapter("draft").format(Judge, demos=[], inputs={"text": "t"})


def test_a_chosen_field_gets_the_answer_and_the_others_are_left_empty():
    # The creator is a ChainOfThought: `PlainTextAdapter("draft")` asks for its draft alone.
    signature = dspy.ChainOfThought(CreatorSignature).predict.signature
    adapter = PlainTextAdapter("draft")
    demo = {"requirements": "a haiku", "context": "", "reasoning": "", "draft": "Rain on the roof"}
    messages = adapter.format(signature, demos=[demo], inputs={"requirements": "a limerick", "context": "",
                                                                "history": dspy.History(messages=[])})

    assert [message["role"] for message in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == "Rain on the roof"
    assert messages[-1]["content"].endswith("Answer with the draft only.")
    assert adapter.parse(signature, " There once was a cat\n") == {"reasoning": "", "draft": "There once was a cat"}


def test_compact_json_names_the_keys_without_placeholders_small_models_would_copy():
    # The creator is a ChainOfThought: its predictor's signature adds `reasoning` before `draft`.
    signature = dspy.ChainOfThought(CreatorSignature).predict.signature
    inputs = {"requirements": "a haiku", "context": "", "history": dspy.History(messages=[])}
    messages = CompactJSONAdapter().format(signature, demos=[], inputs=inputs)
    text = "\n".join(message["content"] for message in messages)

    assert "{draft}" not in text and "{reasoning}" not in text
    assert "Respond with a JSON object with the keys `reasoning`, `draft`." in text
    answer = CompactJSONAdapter().parse(signature, '{"reasoning": "r", "draft": "d"}')
    assert answer == {"reasoning": "r", "draft": "d"}


def test_the_critics_keys_do_not_collide_with_chat_adapters_end_marker():
    # ChatAdapter ends every answer with `[[ ## completed ## ]]`: no output field may be named so.
    messages = dspy.ChatAdapter().format(CriticSignature, demos=[], inputs={"requirements": "r", "draft": "d"})

    assert [message["content"].count("[[ ## completed ## ]]") for message in messages] == [1, 1]  # the marker only
    answer = dspy.ChatAdapter().parse(
        CriticSignature, chat_format({"accuracy_passed": True, "completeness_passed": True, "quality_passed": False,
                                      "feedback": "ends with the marker", "approved": False}))
    assert answer["approved"] is False and answer["feedback"] == "ends with the marker"


def test_adapter_for_gives_the_embedded_model_compact_json_and_any_other_lm_none():
    assert adapter_for(scripted_lm([])) is None
    assert adapter_for(None) is None
    embedded = dspy.LM("local/smollm2-135m-instruct", engine=LlamaEngine(llama=object()), cache=False)
    assert isinstance(adapter_for(embedded), CompactJSONAdapter)
    assert adapter_for(embedded) is adapter_for(embedded)  # one instance: the rule is written once


# --- a role with a history: the same messages, its smaller signature and system message built once ----------


class _MyAdapter(dspy.ChatAdapter):
    """An adapter of one's own whose system message may change between calls: never rendered once for all."""

    said = 0

    def format_task_description(self, signature):
        _MyAdapter.said += 1
        return f"call {_MyAdapter.said}"


@pytest.mark.parametrize("adapter", [dspy.ChatAdapter(), dspy.JSONAdapter(), dspy.XMLAdapter(), CompactJSONAdapter()],
                         ids=lambda adapter: type(adapter).__name__)
@pytest.mark.parametrize("with_demos", [False, True])
@pytest.mark.parametrize("signature", [dspy.ChainOfThought(CreatorSignature).predict.signature, CriticSignature],
                         ids=["creator", "critic"])
def test_a_history_role_renders_the_same_messages_with_its_signatures_built_once(adapter, with_demos, signature):
    history = dspy.History(messages=[{**{name: "earlier" for name in signature.fields if name != "history"}}])
    inputs = {**{name: "now" for name in signature.input_fields}, "history": history}
    demos = [{name: "demo" for name in signature.fields if name != "history"}] if with_demos else []
    plain = demos_without_history(adapter) if with_demos else adapter
    once = historyless_once(plain)

    assert once.format(signature, demos, inputs) == plain.format(signature, demos, inputs)
    assert once.format(signature, demos, inputs) == plain.format(signature, demos, inputs), "and from the cache"
    assert isinstance(once, type(adapter)) and type(once).__name__ == type(adapter).__name__
    assert historyless_once(plain) is once and historyless_once(once) is once, "one twin per adapter"


def test_an_adapter_of_ones_own_renders_its_system_message_every_call():
    once = historyless_once(_MyAdapter())
    inputs = {"requirements": "r", "draft": "d", "history": dspy.History(messages=[])}
    first, second = (once.format(CriticSignature, [], inputs)[0]["content"] for _ in range(2))
    assert first.endswith("call 1") and second.endswith("call 2")


@pytest.mark.parametrize("answer, text", [
    ("Here is the improved draft:\nA reminder to renew your membership.", "A reminder to renew your membership."),
    ("A free day at the museum.\n\nFeedback: no factual errors", "A free day at the museum."),
    ("Improved draft: Rain on the roof\nFeedback: none", "Rain on the roof"),
    ("Feedback: shorter\nImproved draft: Rain", "Rain"),
    ("1. Seeds\n2. Soil\n3. Water", "1. Seeds\n2. Soil\n3. Water"),
    ("Draft: Soft rain", "Soft rain"),  # only labeled sections: the first with text
])
def test_strip_format_drops_what_imitates_the_prompt(answer, text):
    from loops.signatures import IteratorSignature

    assert PlainTextAdapter(strip_format=True).parse(IteratorSignature, answer)["improved_draft"] == text
    assert PlainTextAdapter().parse(IteratorSignature, answer)["improved_draft"] == answer.strip()

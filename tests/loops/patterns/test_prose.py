"""How the writing roles write on each kind of model (`loops.patterns.prose`): plain text, worked examples and a cap
on the embedded model; as before on any other."""

import json

import dspy
import pytest

from loops import ConfigurationError, CreatorCriticIterator, DirectorExecutorEvaluatorController, RetryPolicy
from loops.lm import local_lm
from loops.patterns.prose import EMBEDDED_PROSE, HOSTED_PROSE, WORKED_DRAFTS, prose_defaults
from tests.loops.patterns.test_code_loop import embedded_lookalike
from tests.scripted import request_text, scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)
VERDICT = {"accuracy_passed": True, "completeness_passed": True, "quality_passed": True, "feedback": "",
           "approved": False}


def test_the_defaults_follow_the_kind_of_model():
    assert prose_defaults(local_lm()) == EMBEDDED_PROSE  # the model loads lazily: nothing runs
    assert prose_defaults(scripted_lm([])) == HOSTED_PROSE
    assert EMBEDDED_PROSE.plain_text and EMBEDDED_PROSE.examples and EMBEDDED_PROSE.max_tokens
    assert not (HOSTED_PROSE.plain_text or HOSTED_PROSE.examples or HOSTED_PROSE.max_tokens)
    with dspy.context(lm=local_lm()):
        settings = CreatorCriticIterator().settings()
        assert {key: settings[key] for key in ("plain_text", "examples", "max_tokens", "samples", "critic")} == {
            "plain_text": True, "examples": True, "max_tokens": EMBEDDED_PROSE.max_tokens, "samples": 1,
            "critic": "llm"}  # without checks nothing judges candidates for free: one, and the critic
        settings = CreatorCriticIterator(checks=["max-words=9"]).settings()
        assert (settings["samples"], settings["critic"]) == (EMBEDDED_PROSE.samples, "checks")
        assert len(settings["draws"]) == EMBEDDED_PROSE.samples
        settings = CreatorCriticIterator(plain_text=False).settings()
        assert (settings["plain_text"], settings["examples"], settings["max_tokens"]) == (False, True, None)
    with pytest.raises(ConfigurationError, match="plain_text must be True, False or None"):
        CreatorCriticIterator(plain_text="yes")


def test_on_the_embedded_model_the_creator_and_iterator_write_plain_text_the_creator_shown_examples():
    def answer(engine, request):
        if "JSON object" in request_text(request):  # the critic answers in JSON, as before
            return json.dumps(VERDICT)
        return "Rain taps the glass\nThe garden drinks\nPuddles hold the sky" if len(engine.requests) == 1 \
            else "Rain on the roof\nThe street shines\nA cat sleeps"

    lm = embedded_lookalike(answer)
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=2, retry=NO_WAIT)(requirements="A haiku about rain.")

    creator, critic, iterator, _ = lm.engine.requests
    # The text itself; the critic judged both alike (it contradicts itself), so the earlier is kept.
    assert result.final_draft == "Rain taps the glass\nThe garden drinks\nPuddles hold the sky"
    assert creator.messages[-1].text.endswith("Answer with the draft only.")
    assert all(text in request_text(creator) for _, text in WORKED_DRAFTS)  # the worked examples, as demos
    assert creator.config.max_tokens == iterator.config.max_tokens == EMBEDDED_PROSE.max_tokens
    assert iterator.messages[-1].text.endswith("Answer with the improved draft only.")
    assert WORKED_DRAFTS[0][1] not in request_text(iterator) and "JSON" in request_text(critic)


def test_the_director_executor_writes_plain_text_on_the_embedded_model():
    def answer(engine, request):
        text = request_text(request)
        if "EVALUATOR" in text:
            return json.dumps({"status": "PASS", "feedback": ""})
        if "EXECUTOR" in text:
            return "There once was a cat who could code"
        return json.dumps({"plan": "Write a limerick about a cat."})

    lm = embedded_lookalike(answer)
    with dspy.context(lm=lm):
        result = DirectorExecutorEvaluatorController(max_iterations=1, retry=NO_WAIT)(initial_input="A limerick")

    executor = lm.engine.requests[1]
    assert result.final == "There once was a cat who could code" and result.success
    assert executor.messages[-1].text.endswith("Answer with the result only.")
    assert WORKED_DRAFTS[1][1] in request_text(executor) and executor.config.max_tokens == EMBEDDED_PROSE.max_tokens


def test_on_another_model_nothing_changes_and_an_optimized_creator_keeps_its_own_demos():
    lm = scripted_lm([{"reasoning": "r", "draft": "D0"}, VERDICT])
    loop = CreatorCriticIterator(max_iterations=1, retry=NO_WAIT)
    with dspy.context(lm=lm):
        loop(requirements="A haiku about rain.")
    assert "[[ ## draft ## ]]" in request_text(lm.engine.requests[0])  # DSPy's own format, no examples
    assert WORKED_DRAFTS[0][1] not in request_text(lm.engine.requests[0])

    taught = CreatorCriticIterator(max_iterations=1, retry=NO_WAIT, plain_text=True, examples=True)
    taught.creator.predict.demos = [dspy.Example(requirements="A note.", context="", reasoning="", draft="Hi there")]
    lm = scripted_lm(["Thanks for the plants!", VERDICT])
    with dspy.context(lm=lm):
        assert taught(requirements="A thank-you note.").final == "Thanks for the plants!"
    assert "Hi there" in request_text(lm.engine.requests[0]) and WORKED_DRAFTS[0][1] not in request_text(
        lm.engine.requests[0])

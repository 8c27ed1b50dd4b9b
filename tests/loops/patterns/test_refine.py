"""`loops.Refine` through the public API: any DSPy program (a signature, a Predict, a ChainOfThought, a module of
several predictors) run again with a hint until a field of its prediction is approved, on the one runtime."""

import asyncio
import json

import dspy
import pytest
from dspy.streaming import StreamListener, StreamResponse
from dspy.teleprompt import BootstrapFewShot

import loops
from loops import ConfigurationError, LoopResult, Refine, load
from loops.lm import local_lm
from loops.vocabulary.checks import Count
from tests.scripted import calls, request_text, scripted_lm, streaming_lm


def answered(text, reasoning=None):
    return {"answer": text} if reasoning is None else {"reasoning": reasoning, "answer": text}


def test_a_signature_string_is_refined_with_the_hint_and_no_new_input_field():
    lm = scripted_lm([answered("Brussels is the capital"), answered("Brussels")])
    refine = Refine("question -> answer", checks=["max-words=1"], max_iterations=3)
    with dspy.context(lm=lm):
        result = refine(question="What is the capital of Belgium?")
    assert (result.answer, result.final, result.success, result.stop_reason) == ("Brussels", "Brussels", True,
                                                                                   "approved")
    first, second = (request_text(request) for request in lm.engine.requests)
    assert "hint_" not in first  # the program as written, first
    assert "An earlier answer (answer: 'Brussels is the capital') was not accepted" in second
    assert "has 4 words; use at most 1" in second
    assert [step.role for step in result.trace] == ["program", "checks", "program", "checks"]
    assert list(refine.program.signature.input_fields) == ["question"]  # the program is unchanged


def test_a_predict_is_judged_at_the_field_named_and_keeps_the_best_attempt_by_checks_then_reward(tmp_path):
    lm = scripted_lm([{"answer": "one two three", "note": "a"}, {"answer": "one", "note": "b"},
                      {"answer": "one two", "note": "c"}])
    program = dspy.Predict("question -> answer, note")
    refine = Refine(program, "answer", checks=[Count("word", max=2)], reward_fn=lambda inputs, pred: len(pred.note),
                    threshold=5, max_iterations=3)
    with dspy.context(lm=lm):
        result = refine(question="Count.")
    # Checks held by the second and the third; both rewards 1: of equals, the earlier.
    assert (result.final, result.note, result.success, result.iterations) == ("one", "b", False, 3)
    assert result.best_attempt["checks"].passed and result.best_attempt["reward"] == 1.0
    assert [name for name, _ in refine.named_predictors()] == ["program"]
    refine.save(tmp_path / "refine.json")
    assert "program" in json.loads((tmp_path / "refine.json").read_text())
    with pytest.raises(ConfigurationError, match="field='answr' is no output of the program"):
        Refine(program, "answr", checks=["max-words=2"])


def test_a_chain_of_thought_keeps_its_reasoning_and_its_predictors_name():
    lm = scripted_lm([answered("Paris, France", "thinking"), answered("Paris", "shorter")])
    refine = Refine(dspy.ChainOfThought("question -> answer"), checks=["max-words=1"])
    with dspy.context(lm=lm):
        result = refine(question="Capital of France?")
    assert (result.answer, result.reasoning, result.success) == ("Paris", "shorter", True)
    assert [name for name, _ in refine.named_predictors()] == ["program.predict"]


class Pipeline(dspy.Module):
    """A user's program of two predictors: an outline, then the answer."""

    def __init__(self):
        super().__init__()
        self.outline = dspy.Predict("question -> outline")
        self.write = dspy.Predict("question, outline -> answer")

    def forward(self, question):
        outline = self.outline(question=question).outline
        return self.write(question=question, outline=outline)


def test_a_multi_predictor_module_gets_the_feedback_roles_advice_per_predictor(tmp_path):
    advice = {"outline": "Plan one word.", "write": "Answer in one word."}
    lm = scripted_lm([{"outline": "long plan"}, answered("far too long"),
                      {"advice": json.dumps(advice)},
                      {"outline": "one"}, answered("Short")])
    refine = Refine(Pipeline(), checks=["max-words=1"], feedback="llm", max_iterations=2)
    assert [name for name, _ in refine.named_predictors()] == ["program.outline", "program.write", "feedback"]
    with dspy.context(lm=lm):
        result = refine(question="Name a colour.")
    assert (result.final, result.success) == ("Short", True)
    advised = request_text(lm.engine.requests[2])
    assert '["outline", "write"]' in advised and "has 3 words; use at most 1" in advised
    assert "Plan one word." in request_text(lm.engine.requests[3])
    assert "Answer in one word." in request_text(lm.engine.requests[4])
    refine.save(tmp_path / "refine.json")
    saved = json.loads((tmp_path / "refine.json").read_text())
    assert {"program.outline", "program.write", "feedback"} <= saved.keys()
    again = load(tmp_path / "refine.json", program=Pipeline())
    assert [name for name, _ in again.named_predictors()] == ["program.outline", "program.write", "feedback"]


def test_a_scoring_critic_approves_at_the_threshold():
    lm = scripted_lm([answered("meh"), answered("good"), answered("great")])
    scores = {"meh": (0.2, "Be more positive."), "good": 0.6, "great": 0.9}
    seen = []

    def critic(requirements, draft, iteration):
        seen.append(requirements)
        return scores[draft]

    refine = Refine("question -> answer", critic=critic, threshold=0.8, max_iterations=3)
    with dspy.context(lm=lm):
        result = refine(question="How is it?")
    assert (result.final, result.success, result.iterations) == ("great", True, 3)
    assert seen[0] == "question: How is it?"
    assert "Be more positive." in request_text(lm.engine.requests[1])


def test_samples_draw_candidates_in_one_iteration_and_take_the_first_approved():
    lm = scripted_lm([answered("two words"), answered("three words here"), answered("one"), answered("unused")])
    refine = Refine("question -> answer", checks=["max-words=1"], samples=4, max_iterations=1)
    with dspy.context(lm=lm):
        result = refine(question="A word?")
    assert (result.final, result.success, result.iterations, calls(lm)) == ("one", True, 1, 3)
    temperatures = [request.config.temperature for request in lm.engine.requests]
    assert temperatures[0] in (None, 0.0) and temperatures[1] == temperatures[2] > 0  # greedy, then sampled
    assert [step.role for step in result.trace if step.role != "checks"] == ["program", "program.2", "program.3"]


def test_a_budget_stops_gracefully_with_the_best_attempt_so_far():
    lm = scripted_lm([answered("two words"), answered("three words here")])
    refine = Refine("question -> answer", checks=["max-words=1"], max_iterations=5)
    with dspy.context(lm=lm):
        result = refine(question="A word?", max_lm_calls=2)
    assert (result.stop_reason, result.final, result.success, result.lm_calls) == ("lm_calls", "two words", False, 2)


def test_a_run_stopped_by_its_budget_resumes_from_its_checkpoint(tmp_path):
    refine = Refine("question -> answer", checks=["max-words=1"], checkpoint=tmp_path / "runs.db")
    with dspy.context(lm=scripted_lm([answered("two words")])):
        stopped = refine(question="A word?", run_id="r1", max_lm_calls=1)
    assert (stopped.stop_reason, stopped.final) == ("lm_calls", "two words")
    resumed_lm = scripted_lm([answered("one")])
    with dspy.context(lm=resumed_lm):
        resumed = refine(question="A word?", run_id="r1")
    # The first attempt comes from the record; the second is asked, with the first's hint.
    assert (resumed.stop_reason, resumed.final, resumed.replayed, resumed.lm_calls) == ("approved", "one", 1, 1)
    assert "An earlier answer (answer: 'two words')" in request_text(resumed_lm.engine.requests[0])
    replay = scripted_lm([])
    with dspy.context(lm=replay):
        again = refine(question="A word?", run_id="r1")
    assert (again.final, again.success, again.lm_calls, calls(replay)) == ("one", True, 0, 0)


def test_aforward_runs_the_same_loop():
    lm = scripted_lm([answered("two words"), answered("one")])
    refine = Refine(dspy.Predict("question -> answer"), checks=["max-words=1"])
    with dspy.context(lm=lm):
        result = asyncio.run(refine.acall(question="A word?"))
    assert (result.final, result.success, result.iterations) == ("one", True, 2)


def test_an_optimizers_trace_holds_the_best_attempts_predictor_calls_alone():
    lm = scripted_lm([answered("two words"), answered("one")])
    refine = Refine(dspy.Predict("question -> answer"), checks=["max-words=1"])
    with dspy.context(lm=lm, trace=[]):
        refine(question="A word?")
        trace = list(dspy.settings.trace)
    assert [(predictor, outputs.answer) for predictor, _, outputs in trace] == [(refine.program, "one")]
    assert "hint_" not in trace[0][1]


@pytest.mark.parametrize(("arguments", "message"), [
    ({}, "nothing judges the program's attempts"),
    ({"reward_fn": lambda inputs, pred: 1.0}, "reward_fn alone approves nothing: give threshold="),
    ({"checks": ["max-words=1"], "samples": 0}, "samples must be an int >= 1"),
    ({"checks": ["max-words=1"], "feedback": "yes"}, "feedback must be None"),
])
def test_a_developers_mistake_is_refused_when_the_loop_is_built(arguments, message):
    with pytest.raises(ConfigurationError, match=message):
        Refine("question -> answer", **arguments)
    with pytest.raises(ConfigurationError, match="Refine wraps a dspy.Module or a signature"):
        Refine(42, checks=["max-words=1"])


def test_bootstrap_few_shot_tunes_the_wrapped_programs_predictor_with_the_approved_attempt():
    def respond(engine, request):  # a long answer first, then one word, for every question
        return answered("one" if "hint_" in request_text(request) else "far too many words")

    trainset = [dspy.Example(question=f"Question {n}?").with_inputs("question") for n in range(2)]
    optimizer = BootstrapFewShot(metric=lambda example, prediction, trace=None: prediction.success,
                                 max_bootstrapped_demos=2, max_labeled_demos=0)
    with dspy.context(lm=scripted_lm(respond)):
        compiled = optimizer.compile(Refine("question -> answer", checks=["max-words=1"]), trainset=trainset)
    demos = dict(compiled.named_predictors())["program"].demos
    assert [demo["answer"] for demo in demos] == ["one", "one"]
    assert all("hint_" not in demo for demo in demos)


def test_a_person_may_be_the_critic():
    lm = scripted_lm([answered("Lisbon")])
    refine = Refine("question -> answer", critic=loops.human(lambda question: {
        "accuracy_passed": True, "completeness_passed": True, "quality_passed": True, "approved": True,
        "feedback": ""}))
    with dspy.context(lm=lm):
        result = refine(question="Capital of Portugal?")
    assert (result.final, result.success) == ("Lisbon", True)
    assert [step.role for step in result.trace] == ["program", "critic"] and result.trace[1].human


@pytest.mark.embedded
@pytest.mark.slow
def test_a_chain_of_thought_refined_with_a_check_on_the_embedded_model(tmp_path):
    """The issue's goal: a user's ChainOfThought refined with a check on its answer, on the embedded model,
    through forward, acall, a checkpointed resume and a bootstrap optimization."""
    refine = Refine(dspy.ChainOfThought("question -> answer"), checks=["max-words=4"], max_iterations=2,
                    checkpoint=tmp_path / "runs.db")
    question = "What colour is the sky on a clear day?"
    with dspy.context(lm=local_lm()):
        stopped = refine(question=question, run_id="sky", max_iterations=1)
        resumed = refine(question=question, run_id="sky")
        awaited = asyncio.run(refine.acall(question="What colour is fresh grass?"))
        optimizer = BootstrapFewShot(metric=lambda example, prediction, trace=None: prediction.success,
                                     max_bootstrapped_demos=1, max_labeled_demos=0)
        compiled = optimizer.compile(refine, trainset=[dspy.Example(question="What colour is snow?")
                                                       .with_inputs("question")])
    assert stopped.stop_reason in ("approved", "max_iterations") and stopped.error is None
    for result in (resumed, awaited):
        assert result.stop_reason in ("approved", "max_iterations") and result.error is None
        assert isinstance(result.answer, str) and result.final == result.answer
        assert result.success == result.best_attempt["checks"].passed
    assert resumed.replayed >= 1 and resumed.trace[0].replayed  # the first attempt came from the checkpoint
    demos = dict(compiled.named_predictors())["program.predict"].demos
    assert all(len(demo["answer"].split()) <= 4 for demo in demos)  # only an approved attempt is a demo


def test_an_empty_answer_or_the_adapters_template_is_never_approved():
    lm = scripted_lm([answered("{answer}"), answered("42")])
    refine = Refine("question -> answer", reward_fn=lambda inputs, pred: 1.0, threshold=1.0)
    with dspy.context(lm=lm):
        result = refine(question="Six times seven?")
    assert (result.final, result.success, result.iterations) == ("42", True, 2)  # digits are an answer
    assert "a placeholder ('{answer}')" in request_text(lm.engine.requests[1])


def test_dspy_streamify_streams_each_attempts_field_as_it_is_written_and_the_result_last():
    refine = Refine("question -> answer", checks=["max-words=1"])
    streamed = dspy.streamify(refine, stream_listeners=[StreamListener("answer", allow_reuse=True)])

    async def chunks():
        return [chunk async for chunk in streamed(question="A word?")]

    with dspy.context(lm=streaming_lm([answered("two words"), answered("one")])):
        received = asyncio.run(chunks())
    pieces = [chunk for chunk in received if isinstance(chunk, StreamResponse)]
    assert "".join(chunk.chunk for chunk in pieces) == "two wordsone"  # both attempts, as written
    assert len(pieces) > 2 and {chunk.predict_name for chunk in pieces} == {"program"}
    assert isinstance(received[-1], LoopResult) and received[-1].final == "one"

"""A person in the loop (`loops.running.person`): `loops.human()` in a role's place answers with that role's fields,
checked like an LM's; a person's turn is traced, kept in the role's history, recorded and replayed; their wait
is not charged to the run's deadline; with nobody to answer, the run pauses (`awaiting_input`) and resumes
from its checkpoint with the answer recorded from anywhere. The processes and the terminal:
`tests/loops/test_cli_person.py`."""

from __future__ import annotations

import asyncio
import io
import time

import dspy
import pytest

import loops
import loops.running.person
from loops import (
    AnswerError,
    AwaitingInput,
    ConfigurationError,
    CreatorCriticIterator,
    DirectorExecutorEvaluatorController,
    ExecuteValidateController,
    ReplayDivergence,
)
from loops.running.person import ask_at_terminal
from loops.vocabulary.context import deadline
from tests.loops.test_long_loops import never_approving
from tests.scripted import calls, request_text, scripted_lm


class Person:
    """An answer function: the answers in order (each after `delay_s`), and the questions it was asked."""

    def __init__(self, *answers, delay_s: float = 0.0):
        self.answers, self.delay_s = list(answers), delay_s
        self.questions: list[loops.Question] = []
        self.deadlines: list[float | None] = []

    def __call__(self, question):
        self.questions.append(question)
        self.deadlines.append(deadline())
        time.sleep(self.delay_s)
        return self.answers.pop(0)


def test_a_person_as_the_critic_answers_with_the_critics_fields_and_their_turns_are_the_roles_like_an_lms():
    person = Person({"approved": False, "feedback": "Name the bottle"}, {"approved": "yes"})
    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=3, critic=loops.human(answer=person))(requirements="a slogan")

    assert (result.stop_reason, result.success, result.final) == ("approved", True, "D1")
    assert [(step.role, step.human, step.lm_calls) for step in result.trace] == [
        ("creator", False, 1), ("critic", True, 0), ("iterator", False, 1), ("critic", True, 0)]
    assert result.lm_calls == calls(lm) == 2  # a person's turn sends no LM request
    assert result.trace[1].outputs == {"feedback": "Name the bottle", "approved": False}
    # Approving passes every criterion the person left out; a rejection leaves them unsaid.
    assert result.trace[3].outputs == {"accuracy_passed": True, "completeness_passed": True, "quality_passed": True,
                                       "feedback": "", "approved": True}
    assert result.histories["critic"].messages == [
        {"requirements": "a slogan", "draft": "D0", "feedback": "Name the bottle", "approved": False},
        {"requirements": "a slogan", "draft": "D1", **result.trace[3].outputs}]
    assert "Name the bottle" in request_text(lm.engine.requests[1])  # the iterator revised on the person's words
    question = person.questions[0]
    assert (question.role, question.iteration, question.inputs) == ("critic", 1, {"requirements": "a slogan",
                                                                                 "draft": "D0"})
    assert [field.name for field in question.asked()] == ["approved", "feedback"]
    assert "You are the CRITIC" in question.text() and "approved (true or false)" in question.text()


def test_the_wait_for_a_person_is_not_charged_to_the_runs_deadline():
    person = Person({"approved": False, "feedback": "shorter"}, {"approved": True}, delay_s=1.5)
    lm = scripted_lm(never_approving)
    started = time.monotonic()
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=3, critic=loops.human(answer=person))(
            requirements="a slogan", timeout_s=1.0)

    assert time.monotonic() - started > 3.0  # twice the wait, each longer than the whole run's timeout
    assert (result.stop_reason, result.final, result.lm_calls) == ("approved", "D1", 2)
    assert [round(step.seconds) for step in result.trace if step.human] == [2, 2]
    # The second question came after the first wait: the deadline every engine reads had moved past it.
    assert person.deadlines[1] - person.deadlines[0] == pytest.approx(1.5, abs=0.3)


def test_a_malformed_answer_is_refused_with_a_message_naming_every_field_and_its_type():
    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm), pytest.raises(AnswerError) as refused:
        CreatorCriticIterator(critic=loops.human(answer=lambda question: {"approved": "maybe", "colour": "red"}))(
            requirements="a slogan")

    assert str(refused.value) == (
        "the critic's answer is refused: it has no field 'colour'; approved must be true or false, got 'maybe'. "
        "The critic answers with: approved (true or false), feedback (text; left out: empty), accuracy_passed "
        "(true or false; left out: true when approved), completeness_passed (true or false; left out: true when "
        "approved), quality_passed (true or false; left out: true when approved).")
    assert calls(lm) == 1  # the creator's


def test_a_run_with_a_person_nobody_to_answer_and_no_checkpoint_is_a_configuration_error_before_any_lm_call(
        monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO())  # not a terminal, even under `pytest -s` at one
    lm = scripted_lm(never_approving)
    expected = r"^the critic is answered by a person, but nobody can answer here .* give the call checkpoint='runs.db'"
    with dspy.context(lm=lm), pytest.raises(ConfigurationError, match=expected):
        CreatorCriticIterator(critic=loops.human())(requirements="a slogan")
    assert calls(lm) == 0


def test_a_paused_run_holds_its_question_and_resumes_with_the_answer_recorded_from_anywhere(tmp_path):
    path, lm = tmp_path / "runs.db", scripted_lm(never_approving)
    loop = CreatorCriticIterator(max_iterations=3, critic=loops.human(interactive=False))
    with dspy.context(lm=lm):
        paused = loop(requirements="a slogan", checkpoint=path, run_id="r1")

    assert (paused.stop_reason, paused.final, paused.success, paused.lm_calls) == ("awaiting_input", "D0", False, 1)
    assert paused.question == loops.pending_question(path, "r1")
    assert (paused.question.role, paused.question.inputs["draft"]) == ("critic", "D0")
    assert paused.warnings == [
        f"waiting for a person to answer as the critic: `loops runs show {path} r1` shows the question, `loops runs "
        f"answer {path} r1 --set approved=true|false --set feedback=TEXT` (or loops.answer) records the answer, and "
        "the same call with run_id='r1' (the same command with --run-id r1) goes on"]

    assert loops.answer(path, "r1", approved="false", feedback="Name the bottle") == {"feedback": "Name the bottle",
                                                                                     "approved": False}
    with dspy.context(lm=lm):
        again = loop(requirements="a slogan", checkpoint=path, run_id="r1")
    assert (again.stop_reason, again.lm_calls, again.replayed, calls(lm)) == ("awaiting_input", 1, 1, 2)
    assert [(step.role, step.replayed, step.human) for step in again.trace] == [
        ("creator", True, False), ("critic", False, True), ("iterator", False, False)]
    assert again.question.inputs["draft"] == "D1"

    loops.answer(path, "r1", approved=True)
    with dspy.context(lm=lm):
        done = loop(requirements="a slogan", checkpoint=path, run_id="r1")
    assert (done.stop_reason, done.final, done.lm_calls, done.replayed, calls(lm)) == ("approved", "D1", 0, 2, 2)
    assert [step.outputs.get("approved") for step in done.trace if step.human] == [False, True]
    assert done.question is None and loops.pending_question(path, "r1") is None
    with pytest.raises(ConfigurationError, match="^run 'r1' waits on no person's answer"):
        loops.answer(path, "r1", approved=True)


def test_a_resumed_run_that_reaches_another_question_than_the_one_answered_diverges(tmp_path):
    path = tmp_path / "runs.db"
    with dspy.context(lm=scripted_lm(never_approving)):
        CreatorCriticIterator(critic=loops.human(interactive=False))(requirements="a slogan", checkpoint=path,
                                                                     run_id="r1")
        loops.answer(path, "r1", approved=True)
        creator = loops.human(answer=lambda question: {"draft": "mine"})
        with pytest.raises(ReplayDivergence, match="the creator was the built-in LLM role then and is a person now"):
            CreatorCriticIterator(creator=creator, critic=loops.human(interactive=False))(
                requirements="a slogan", checkpoint=path, run_id="r1")


def test_a_person_as_the_evaluator_and_the_controller_answers_with_their_fields():
    person = Person({"status": "FAIL", "feedback": "too short"}, {"action": "continue", "next_input": "longer"},
                    {"status": "pass"})
    lm = scripted_lm(lambda engine, request: {"plan": "P"} if "DIRECTOR" in (request.system or "") else
                     {"result": f"R{len(engine.requests)}"})
    with dspy.context(lm=lm):
        result = DirectorExecutorEvaluatorController(max_iterations=3, evaluator=loops.human(answer=person),
                                                     controller=loops.human(answer=person))(initial_input="a poem")

    assert (result.stop_reason, result.success, result.final) == ("stopped", True, "R4")
    assert [(question.role, [field.name for field in question.fields]) for question in person.questions] == [
        ("evaluator", ["status", "feedback"]), ("controller", ["action", "next_input"]),
        ("evaluator", ["status", "feedback"])]
    assert person.questions[1].inputs["feedback"] == "too short"
    assert "Next: longer" in request_text(lm.engine.requests[2])  # the director planned on the person's words


def test_a_person_as_the_validator_and_the_controller_answers_with_their_contracts_fields(tmp_path):
    person = Person({"passed": "no"}, {"action": "continue", "next_input": "use a loop"}, {"passed": True},
                    {"action": "stop"})
    lm = scripted_lm(lambda engine, request: f"def f():\n    return {len(engine.requests)}\n")
    loop = ExecuteValidateController(max_iterations=3, samples=1, policy="repair", workspace=tmp_path,
                                     validator=loops.human(answer=person), controller=loops.human(answer=person))
    with dspy.context(lm=lm):
        result = loop(initial_input="Write f", test_command="python -c pass")

    assert (result.stop_reason, result.success, result.iterations, calls(lm)) == ("stopped", True, 2, 2)
    assert [step.role for step in result.trace if step.human] == ["validator", "controller"] * 2
    assert person.questions[1].fields[0].kind == "continue or stop"
    assert "Your previous attempt failed:\nuse a loop" in request_text(lm.engine.requests[1])
    assert (tmp_path / "solution.py").read_text() == "def f():\n    return 2\n"


async def test_aforward_asks_the_person_without_blocking_the_event_loop():
    person = Person({"approved": True}, delay_s=0.3)
    ticks = []

    async def tick():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    ticker = asyncio.create_task(tick())
    with dspy.context(lm=scripted_lm(never_approving)):
        result = await CreatorCriticIterator(critic=loops.human(answer=person)).acall(requirements="a slogan")
    ticker.cancel()
    assert (result.stop_reason, [step.human for step in result.trace]) == ("approved", [False, True])
    assert len(ticks) >= 4


def test_answering_answers_every_person_of_the_context_unless_they_are_not_interactive(tmp_path):
    with dspy.context(lm=scripted_lm(never_approving)), loops.answering(lambda question: {"approved": True}):
        asked = CreatorCriticIterator(critic=loops.human())(requirements="a slogan")
        paused = CreatorCriticIterator(critic=loops.human(interactive=False))(
            requirements="a slogan", checkpoint=tmp_path / "runs.db", run_id="r1")
    assert (asked.stop_reason, paused.stop_reason) == ("approved", "awaiting_input")


def test_an_answer_function_that_returns_none_pauses_the_run(tmp_path):
    with dspy.context(lm=scripted_lm(never_approving)):
        result = CreatorCriticIterator(critic=loops.human(answer=lambda question: None))(
            requirements="a slogan", checkpoint=tmp_path / "runs.db", run_id="r1")
    assert result.stop_reason == "awaiting_input"


def test_at_the_terminal_each_field_is_asked_again_until_it_fits_and_end_of_input_means_nobody_answers():
    question = _critic_question()
    typed, shown = iter(["maybe", "no", '"""Name the bottle.', "  Keep it short.", '"""']), []
    assert ask_at_terminal(question, read=lambda prompt: shown.append(prompt) or next(typed), write=shown.append) == {
        "approved": False, "feedback": "Name the bottle.\n  Keep it short."}
    assert shown[2:] == ["approved (true or false): ", "  refused: approved must be true or false, got 'maybe'",
                         "approved (true or false): ", "feedback (text): ", "", ""]

    def closed(prompt):
        raise EOFError

    with pytest.raises(AwaitingInput):
        ask_at_terminal(question, read=closed, write=shown.append)


def _critic_question() -> loops.Question:
    """The question a person in the critic's place is asked, as the loop builds it."""
    loop = CreatorCriticIterator(critic=loops.human())
    return loop.critic.question("critic", {"requirements": "a slogan", "draft": "D0"}, 1)


def test_a_saved_program_with_a_person_in_a_role_loads_with_that_person(tmp_path):
    loops.CreatorCriticIterator(critic=loops.human(instructions="Be kind", interactive=False)).save(
        tmp_path / "refine.json")
    loaded = loops.load(tmp_path / "refine.json")
    assert isinstance(loaded.critic, loops.running.person.Human) and "approved" in loaded.critic.signature.output_fields
    assert (loaded.critic.instructions, loaded.critic.interactive) == ("Be kind", False)


_IN_A_CELL = """
import loops
loop = loops.CreatorCriticIterator(max_iterations=1, critic=loops.human(),
                                   creator=lambda requirements, context, iteration: "Rain on the roof")
result = loop(requirements="A haiku about rain", checkpoint={path!r}, run_id="k1")
print("RESULT", result.stop_reason, [step.outputs for step in result.trace if step.human])
"""


@pytest.mark.slow
def test_in_jupyter_a_person_answers_in_the_cells_input_box_and_without_one_the_run_pauses(tmp_path):
    manager = pytest.importorskip("jupyter_client.manager", reason="the notebooks extra is installed by make test")
    kernel, client = manager.start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        printed, prompts, typed = [], [], iter(["perhaps", "no", "Say what the rain sounds like"])

        def output(message):
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])

        def answer(message):  # the front end's input box: what a person types into it
            prompts.append(message["content"]["prompt"])
            client.input(next(typed))

        code = _IN_A_CELL.format(path=str(tmp_path / "runs.db"))
        client.execute_interactive(code, allow_stdin=True, stdin_hook=answer, output_hook=output, timeout=120)
        assert prompts == ["approved (true or false): "] * 2 + ["feedback (text): "]
        assert "RESULT max_iterations [{'feedback': 'Say what the rain sounds like', 'approved': False}]" in "".join(
            printed), printed

        printed.clear()  # the same cell where the front end takes no input (a notebook run unattended)
        client.execute_interactive(code.replace('"k1"', '"k2"'), allow_stdin=False, output_hook=output, timeout=120)
        assert "RESULT awaiting_input []" in "".join(printed), printed
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)


def test_a_paused_run_resumed_where_someone_answers_in_the_run_leaves_no_question_behind(tmp_path):
    path = tmp_path / "runs.db"
    with dspy.context(lm=scripted_lm(never_approving)):
        CreatorCriticIterator(critic=loops.human(answer=lambda question: None))(
            requirements="a slogan", checkpoint=path, run_id="r1")
        assert loops.pending_question(path, "r1") is not None
        resumed = CreatorCriticIterator(critic=loops.human(answer=lambda question: {"approved": True}))(
            requirements="a slogan", checkpoint=path, run_id="r1")
    assert resumed.stop_reason == "approved" and loops.pending_question(path, "r1") is None

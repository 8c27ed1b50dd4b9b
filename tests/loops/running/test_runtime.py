"""The one loop runtime, through the three modules' public surface: one result shape, errors that
reach the developer, work that is never lost, limits that hold and counts that are true."""

import asyncio
import dataclasses
import json
import logging
import os
import random
import shlex
import sys
import time

import dspy
import pytest
from dspy.lm15 import AuthError, RateLimitError, TransportError, UnknownModelError, UnsupportedModelError
from dspy.utils import exceptions as dspy_errors

import loops
from loops import (
    STOP_REASONS,
    Budget,
    CommandNotFoundError,
    ConfigurationError,
    ContractError,
    CreatorCriticIterator,
    DirectorExecutorEvaluatorController,
    ExecuteValidateController,
    LimitReached,
    RetryPolicy,
    RoleFailed,
    Step,
    Workspace,
)
from loops.errors import DeadlinePassed
from loops.lm import LlamaEngine
from loops.recording.checkpoint import MemoryStore
from loops.running.runtime import RESULT_FIELDS, failure_action
from loops.sexp.errors import DslTypeError
from loops.signatures import CriticSignature
from tests.scripted import Phase, ScriptedEngine, request_text, scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)
FAILING_TESTS = shlex.join([sys.executable, "-c", "raise SystemExit(1)"])
PASSING_TESTS = shlex.join([sys.executable, "-c", "raise SystemExit(0)"])
PATTERNS = ["creator_critic", "execute_validate", "director"]


def answer(request, succeed=False, number=0):
    """What every built-in role of every pattern answers: never (or always) a success. The code loop's
    executor writes new code each time (`number`), so that no attempt repeats an earlier one."""
    text = request_text(request)
    if "You are the CREATOR" in text:
        return {"reasoning": "plan", "draft": "a draft"}
    if "You are the CRITIC" in text:
        return {"accuracy_passed": succeed, "completeness_passed": succeed, "quality_passed": succeed,
                "feedback": "" if succeed else "more", "approved": succeed}
    if "You are the ITERATOR" in text:
        return {"improved_draft": "a better draft"}
    if "You are the DIRECTOR" in text:
        return {"plan": "a plan"}
    if "Carry out the director's plan" in text:
        return {"result": "a result"}
    if "You are the EVALUATOR" in text:
        return {"status": "PASS" if succeed else "FAIL", "feedback": "" if succeed else "not yet"}
    if "You are the CONTROLLER" in text:
        return {"action": "continue", "next_input": "try again"}
    if "You are the ANALYST" in text:
        return {"success": False, "analysis": "it failed", "next_input": "fix it"}
    if "You are the EXECUTOR" in text:  # Execute–Validate's executor answers in plain text
        return f"def f():\n    return {number}\n"
    raise AssertionError(f"an unexpected request: {text[:200]}")


def responder(succeed=False):
    return lambda engine, request: answer(request, succeed, len(engine.requests))


def build(pattern, tmp_path=None, **options):
    """A module of `pattern` with every built-in role, and the call that runs it."""
    if pattern == "creator_critic":
        return CreatorCriticIterator(retry=NO_WAIT, **options), {"requirements": "a haiku"}
    if pattern == "execute_validate":
        options.setdefault("workspace", Workspace(tmp_path) if tmp_path else None)
        return ExecuteValidateController(retry=NO_WAIT, **options), {"initial_input": "write f",
                                                                     "test_command": FAILING_TESTS}
    return DirectorExecutorEvaluatorController(retry=NO_WAIT, **options), {"initial_input": "a poem"}


def requests(lm):
    return len(lm.engine.requests)


# --- one result shape ----------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_pattern_returns_the_one_result_shape(pattern, tmp_path):
    module, inputs = build(pattern, tmp_path, max_iterations=2)
    lm = scripted_lm(responder())

    with dspy.context(lm=lm):
        result = module(**inputs)

    assert set(RESULT_FIELDS) <= set(result.keys())
    assert result.stop_reason == "max_iterations" and result.stop_reason in STOP_REASONS
    assert (result.success, result.iterations, result.error) == (False, 2, None)
    assert result.final is not None
    assert result.best_attempt["iteration"] in (1, 2)  # 1-based, like `iterations`
    assert {step.iteration for step in result.trace} == {1, 2}
    assert all(isinstance(step, Step) for step in result.trace)
    assert result.warnings == ["stopped at max_iterations=2"]
    assert all(isinstance(history, dspy.History) and history.messages for history in result.histories.values())
    assert result.lm_calls == requests(lm) == sum(step.lm_calls for step in result.trace)
    assert json.dumps([step.to_dict() for step in result.trace])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_pattern_reports_success_the_same_way(pattern, tmp_path):
    module, inputs = build(pattern, tmp_path)
    if pattern == "execute_validate":
        inputs["test_command"] = PASSING_TESTS

    with dspy.context(lm=scripted_lm(responder(succeed=True))):
        result = module(**inputs)

    assert (result.success, result.iterations, result.error, result.warnings) == (True, 1, None, [])
    assert result.stop_reason == ("approved" if pattern == "creator_critic" else "stopped")


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_budget_given_to_the_constructor_holds_when_max_iterations_is_not_given(pattern, tmp_path):
    module, inputs = build(pattern, tmp_path, budget=Budget(max_iterations=5, timeout_s=None))
    lm = scripted_lm(responder())

    with dspy.context(lm=lm):
        result = module(**inputs)

    assert (result.iterations, result.stop_reason) == (5, "max_iterations")
    assert module.budget == Budget(max_iterations=5, timeout_s=None)


# --- a developer's mistakes raise, before any LM call where they can be known --------------------


MISTAKES = {
    "no LM for a role": ("creator_critic", {}, {}, ConfigurationError, "no LM is configured for the critic role"),
    "requirements=None": ("creator_critic", {}, {"requirements": None}, ConfigurationError,
                          "requirements must be a non-empty str"),
    "initial_input=None (EVC)": ("execute_validate", {}, {"initial_input": None}, ConfigurationError,
                                 "initial_input must be a task"),
    "initial_input=None (Director)": ("director", {}, {"initial_input": None}, ConfigurationError,
                                      "initial_input must be a goal"),
    "a missing executable": ("execute_validate", {}, {"test_command": "no-such-tool-xyz -q"}, CommandNotFoundError,
                             "executable 'no-such-tool-xyz' not found"),
    "a target file outside the workspace": ("execute_validate", {"target_file": "../../escape.py"}, {},
                                            ConfigurationError, "(is outside|escapes) the workspace"),
    "a byte that is not UTF-8 (a command line's)": (
        "creator_critic", {}, {"requirements": os.fsdecode(b"A haiku \xff")}, ConfigurationError,
        r"^requirements is not UTF-8 text: it holds the byte 0xff \(not UTF-8\) at character 9$"),
    "a lone surrogate": ("director", {}, {"initial_input": "A goal \ud800"}, ConfigurationError,
                         r"^initial_input is not UTF-8 text: it holds a lone surrogate U\+D800 \(no character\)"),
    "a NUL in the test command": ("execute_validate", {}, {"test_command": "true\x00"}, ConfigurationError,
                                  r"holds a NUL character \(\\x00\), which no command line can carry"),
    "a misspelt input": ("creator_critic", {}, {"requirement": "a haiku"}, ConfigurationError,
                         r"unknown input or option 'requirement' \(did you mean 'requirements'\?\)"),
    "a run id that is not UTF-8": ("creator_critic", {}, {"checkpoint": MemoryStore(), "run_id": os.fsdecode(b"r\xff")},
                                   ConfigurationError, r"run_id must be a non-empty str of UTF-8 text, got 'r\\udcff' "
                                   r"\(it holds the byte 0xff \(not UTF-8\) at character 2\)"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_developers_mistake_raises_before_any_lm_call(mistake, tmp_path):
    pattern, options, overrides, error, message = MISTAKES[mistake]
    module, inputs = build(pattern, tmp_path, **options)
    lm = scripted_lm(responder())
    if mistake == "no LM for a role":  # the creator has one, the critic none: nothing may run
        module.creator.set_lm(lm)
        module.iterator.set_lm(lm)
        context = dspy.context(lm=None)
    else:
        context = dspy.context(lm=lm)

    with context, pytest.raises(error, match=message):
        module(**{**inputs, **overrides})

    assert requests(lm) == 0


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_call_without_its_inputs_raises_one_configuration_error_naming_each(pattern, tmp_path):
    module, inputs = build(pattern, tmp_path)
    lm = scripted_lm(responder())

    with dspy.context(lm=lm), pytest.raises(ConfigurationError) as raised:
        module()

    said = str(raised.value)
    assert said == "; ".join(module.input_contract.inputs[name].missing(name) for name in inputs), said
    assert all(f"no {name!r} ({module.input_contract.inputs[name].about}): it is required" in said for name in inputs)
    assert requests(lm) == 0


@pytest.mark.parametrize("pattern", PATTERNS)
def test_no_lm_configured_raises_at_the_start_of_the_call(pattern, tmp_path):
    module, inputs = build(pattern, tmp_path)

    with dspy.context(lm=None), pytest.raises(ConfigurationError, match=r"call dspy\.configure\(lm=\.\.\.\)"):
        module(**inputs)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_phase_of_the_wrong_arity_raises_when_the_module_is_built(pattern):
    role = {"creator_critic": "critic", "execute_validate": "validator", "director": "evaluator"}[pattern]

    with pytest.raises(ContractError, match=rf"does not fit its contract {role}\("):
        build(pattern, **{role: lambda only_one: True})


class AuthenticationError(Exception):
    """What LiteLLM raises for a rejected key, matched by name (loops never imports LiteLLM for it)."""


class NotFoundError(Exception):
    """What LiteLLM raises for an unknown model."""


class RefusingLM(dspy.BaseLM):
    """An LM outside DSPy's error translation that raises LiteLLM's exceptions as they are."""

    def __init__(self, error):
        super().__init__(model="openai/gpt-nonexistent")
        self.error = error
        self.requests = 0

    def forward(self, prompt=None, messages=None, **kwargs):
        self.requests += 1
        raise self.error


# RefusingLM is DSPy's legacy BaseLM.forward interface on purpose (no error translation), which DSPy 3.4 warns of.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("error", [
    AuthError("invalid api key", provider="openai"), UnknownModelError("no such model"),
    UnsupportedModelError("unsupported"), AuthenticationError("invalid api key"), NotFoundError("model not found"),
])
def test_an_lm_error_no_retry_can_fix_raises_a_configuration_error_at_that_call(error):
    lm = RefusingLM(error) if isinstance(error, AuthenticationError | NotFoundError) else scripted_lm([error] * 3)
    module = CreatorCriticIterator(retry=RetryPolicy(attempts=3, backoff_s=0))

    with dspy.context(lm=lm), pytest.raises(ConfigurationError, match="no retry can fix") as raised:
        module(requirements="r")

    assert (lm.requests if isinstance(lm, RefusingLM) else requests(lm)) == 1  # asked once, never again
    assert raised.value.__cause__ is not None


def test_a_configuration_error_raised_in_a_phase_propagates_even_without_strict():
    def critic(requirements, draft, iteration):
        raise ConfigurationError("the critic's rubric file is missing")

    module = CreatorCriticIterator(creator=Phase("d"), critic=critic, iterator=Phase("d2"))

    with pytest.raises(ConfigurationError, match="rubric file is missing"):
        module(requirements="r")


class Forgetful(CreatorCriticIterator):
    """A pattern with a bug in its own control flow: a forgotten `yield from`."""

    def _loop(self, run, requirements, context, checks):
        run.next_iteration()
        draft = run.call("creator", requirements=requirements, context=context).draft  # the generator, not its result
        yield from run.call("critic", requirements=requirements, draft=draft)
        return run.finish("approved")


@pytest.mark.parametrize("mode", ["forward", "aforward"])
def test_a_bug_in_a_patterns_control_flow_propagates_as_itself(mode):
    module = Forgetful(retry=NO_WAIT)
    lm = scripted_lm(responder())

    with dspy.context(lm=lm), pytest.raises(AttributeError, match="'generator' object has no attribute 'draft'"):
        if mode == "forward":
            module(requirements="r")
        else:
            asyncio.run(module.acall(requirements="r"))

    assert requests(lm) == 0


# --- the work is never lost ----------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["execute_validate", "director"])
def test_when_the_judging_phase_crashes_final_and_best_attempt_hold_the_attempt_it_judged(pattern, tmp_path):
    boom = RuntimeError("the judge crashed")
    if pattern == "execute_validate":
        module = ExecuteValidateController(executor=Phase({"solution.py": "x = 1\n"}), validator=Phase(boom),
                                           controller=loops.tests_controller, workspace=Workspace(tmp_path))
        result = module(initial_input="task", test_command="check")
        attempt = {"iteration": 1, "result": {"solution.py": "x = 1\n"}, "validation": None}
    else:
        module = DirectorExecutorEvaluatorController(director=Phase("plan"), executor=Phase("result"),
                                                     evaluator=Phase(boom), controller=Phase(("stop", None)))
        result = module(initial_input="goal")
        attempt = {"iteration": 1, "plan": "plan", "result": "result", "feedback": None}

    assert (result.stop_reason, result.success) == ("error", False)
    assert result.final == attempt["result"]
    assert result.best_attempt == attempt
    assert isinstance(result.error, RoleFailed) and result.error.__cause__ is boom


# --- strict ----------------------------------------------------------------------------------------


def test_strict_raises_the_role_failure_with_each_warning_recorded_once():
    lm = scripted_lm([{"reasoning": "r", "draft": "D0"}, *["garbage"] * 4])
    module = CreatorCriticIterator(retry=NO_WAIT, strict=True)

    with dspy.context(lm=lm), pytest.raises(RoleFailed) as raised:
        module(requirements="r")

    prediction = raised.value.prediction
    assert raised.value.role == "critic"
    assert prediction.warnings == [
        "critic: answer could not be parsed; asked again",
        "stopped by an error: RoleFailed: critic failed after 2 attempt(s): its answer could not be parsed",
    ]
    assert (prediction.stop_reason, prediction.final, prediction.error) == ("error", "D0", raised.value)
    assert prediction.lm_calls == requests(lm) == 5


def test_strict_raises_at_a_limit_with_each_warning_recorded_once():
    contradicting = {**answer_for("CRITIC"), "approved": True}  # approved, yet every criterion failed
    lm = scripted_lm([answer_for("CREATOR"), contradicting, answer_for("ITERATOR"), contradicting])
    module = CreatorCriticIterator(retry=NO_WAIT, strict=True, max_iterations=2)

    with dspy.context(lm=lm), pytest.raises(LimitReached) as raised:
        module(requirements="r")

    warnings = raised.value.prediction.warnings
    assert len(warnings) == len(set(warnings)) == 3
    assert [warning.split(":")[0] for warning in warnings] == [
        "iteration 1", "iteration 2", "stopped at max_iterations=2"]
    assert raised.value.reason == "max_iterations"


def answer_for(role):
    class Request:
        system = f"You are the {role}."
        messages = ()

    return answer(Request())


# --- lm_calls counts every request made ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["forward", "aforward"])
def test_lm_calls_counts_json_fallbacks_failed_attempts_and_retries(mode):
    critic = {"accuracy_passed": False, "completeness_passed": True, "quality_passed": True, "feedback": "f",
              "approved": False}
    lm = scripted_lm([
        # creator: ChatAdapter fails to parse, its JSON fallback request gets JSON
        "garbage", json.dumps({"reasoning": "r", "draft": "D0"}),
        RateLimitError("slow down"), critic,  # critic: a failed request, then an answer
        "junk", "junk again", {"improved_draft": "D1"},  # iterator: Chat and JSON fail, asked again
        {**critic, "accuracy_passed": True, "approved": True},
    ])
    module = CreatorCriticIterator(retry=NO_WAIT)

    with dspy.context(lm=lm):
        result = module(requirements="r") if mode == "forward" else asyncio.run(module.acall(requirements="r"))

    assert (result.stop_reason, result.final) == ("approved", "D1")
    assert result.lm_calls == requests(lm) == 8
    assert [(step.role, step.lm_calls, step.attempts) for step in result.trace] == [
        ("creator", 2, 1), ("critic", 2, 2), ("iterator", 3, 2), ("critic", 1, 1)]
    assert result.trace[0].tokens == {"input": 20, "output": 10}  # both answered requests' usage


def faulty(seed):
    """Answers like `responder`, but a seeded third of the requests fail or come back as garbage."""
    rng = random.Random(seed)

    def respond(engine, request):
        roll = rng.random()
        if roll < 0.2:
            return TransportError("connection reset")
        if roll < 0.35:
            return "garbage"
        return answer(request, number=len(engine.requests))

    return respond


@pytest.mark.parametrize("mode", ["forward", "aforward"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("seed", range(5))
def test_lm_calls_equals_the_requests_the_lm_received_whatever_fails(mode, pattern, seed, tmp_path):
    module, inputs = build(pattern, tmp_path, max_iterations=3)
    lm = scripted_lm(faulty(seed))

    with dspy.context(lm=lm):
        result = module(**inputs) if mode == "forward" else asyncio.run(module.acall(**inputs))

    assert result.lm_calls == requests(lm)
    assert result.lm_calls == sum(step.lm_calls for step in result.trace)


@pytest.mark.parametrize("seed", range(40))
def test_max_lm_calls_is_checked_before_every_retry(seed):
    rng = random.Random(seed)

    def half_failing(engine, request):
        return RateLimitError("slow down") if rng.random() < 0.5 else answer(request)

    lm = scripted_lm(half_failing)
    module = CreatorCriticIterator(retry=RetryPolicy(attempts=10, backoff_s=0))

    with dspy.context(lm=lm):
        result = module(requirements="r", max_lm_calls=4)

    assert requests(lm) <= 4
    assert result.lm_calls == requests(lm)
    assert result.stop_reason == "lm_calls"


def test_a_role_that_keeps_failing_stops_at_max_lm_calls_not_at_its_attempts():
    lm = scripted_lm(lambda engine, request: RateLimitError("slow down"))
    module = CreatorCriticIterator(retry=RetryPolicy(attempts=10, backoff_s=0))

    with dspy.context(lm=lm):
        result = module(requirements="r", max_lm_calls=4)

    assert (requests(lm), result.lm_calls, result.stop_reason) == (4, 4, "lm_calls")
    assert result.trace[-1].attempts == 4 and result.trace[-1].error
    assert result.warnings[-1] == "stopped in creator before a retry after 4 LM calls: max_lm_calls=4 reached"


# --- the deadline ------------------------------------------------------------------------------------


def test_a_retrys_backoff_is_cut_to_the_time_left():
    lm = scripted_lm([answer_for("CREATOR"), RateLimitError("slow down"), RateLimitError("slow down")])
    module = CreatorCriticIterator(retry=RetryPolicy(attempts=3, backoff_s=30))

    started = time.monotonic()
    with dspy.context(lm=lm):
        result = module(requirements="r", timeout_s=2)
    elapsed = time.monotonic() - started

    assert elapsed < 1.5, f"slept past the deadline: {elapsed:.1f}s"
    assert (result.stop_reason, result.final) == ("timeout", "a draft")
    assert result.lm_calls == requests(lm) == 2
    assert "no time left to retry" in result.warnings[-1]


async def test_an_lm_call_in_flight_is_abandoned_at_the_deadline_under_aforward():
    creator = scripted_lm([answer_for("CREATOR")])
    critic = scripted_lm([answer_for("CRITIC")], async_delay_s=30)  # an answer that would take 30 s
    module = CreatorCriticIterator(retry=NO_WAIT)
    module.creator.set_lm(creator)
    module.critic.set_lm(critic)
    module.iterator.set_lm(creator)

    started = time.monotonic()
    result = await module.acall(requirements="r", timeout_s=0.5)
    elapsed = time.monotonic() - started

    assert elapsed < 0.5 + 0.5, f"the run overran its timeout by {elapsed - 0.5:.2f}s"
    assert (result.stop_reason, result.final, result.success) == ("timeout", "a draft", False)
    assert result.trace[-1].role == "critic" and result.trace[-1].error == "abandoned at the deadline"
    assert result.lm_calls == requests(creator) + requests(critic) == 2  # the abandoned request counts


async def test_an_abandoned_call_raises_limit_reached_when_strict():
    module = CreatorCriticIterator(retry=NO_WAIT, strict=True)

    lm = scripted_lm([answer_for("CREATOR")], async_delay_s=30)

    with dspy.context(lm=lm), pytest.raises(LimitReached) as raised:
        await module.acall(requirements="r", timeout_s=0.3)

    assert raised.value.reason == "timeout"
    assert raised.value.prediction.warnings == [str(raised.value)]


# --- the run a phase belongs to ----------------------------------------------------------------------


def test_a_phase_sees_its_run_as_current_run():
    seen = []

    def critic(requirements, draft, iteration):
        run = loops.current_run()
        seen.append((run.iteration, iteration, run.budget.max_iterations))
        return iteration == 2

    module = CreatorCriticIterator(creator=Phase("d"), critic=critic, iterator=Phase("d2"), max_iterations=4)

    result = module(requirements="r")

    assert seen == [(1, 1, 4), (2, 2, 4)]
    assert result.success and loops.current_run() is None


# --- the embedded model's adapter rule ---------------------------------------------------------------


class FakeLlama:
    """Stands in for llama.cpp under `LlamaEngine`, so the embedded path runs without the model."""

    def __init__(self):
        self.calls = []

    def create_chat_completion(self, messages, **options):
        self.calls.append((messages, options))
        text = "\n".join(message["content"] for message in messages)
        if "You are the CREATOR" in text:
            content = {"reasoning": "r", "draft": "a real draft"}
        else:
            content = {"accuracy_passed": True, "completeness_passed": True, "quality_passed": True,
                       "feedback": "", "approved": True}
        return {"choices": [{"message": {"content": json.dumps(content)}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def embedded_lm(llama):
    engine = LlamaEngine(llama=llama)
    return dspy.LM("local/smollm2-135m-instruct", engine=engine, cache=False, num_retries=0)


def test_a_role_on_the_embedded_model_gets_compact_json_when_no_adapter_is_set():
    llama = FakeLlama()

    with dspy.context(lm=embedded_lm(llama)):  # the creator in JSON too (loops.patterns.prose would ask for plain text)
        result = CreatorCriticIterator(max_iterations=1, plain_text=False)(requirements="r", timeout_s=None)

    assert (result.final, result.success, result.lm_calls) == ("a real draft", True, 2)
    for messages, options in llama.calls:
        text = "\n".join(message["content"] for message in messages)
        assert "Respond with a JSON object with the keys" in text
        assert "{draft}" not in text and "[[ ## completed ## ]]" not in text  # no placeholders, no ChatAdapter
        assert options["response_format"]["type"] == "json_object"  # grammar-constrained to the schema
        assert "schema" in options["response_format"]


def test_an_adapter_the_context_sets_wins_over_the_embedded_models():
    llama = FakeLlama()

    with dspy.context(lm=embedded_lm(llama), adapter=dspy.JSONAdapter()):
        CreatorCriticIterator(max_iterations=1)(requirements="r", timeout_s=None)

    text = "\n".join(message["content"] for message in llama.calls[0][0])
    assert "Respond with a JSON object with the keys" not in text  # JSONAdapter's own wording


def test_a_hosted_models_roles_keep_the_context_default_adapter():
    lm = scripted_lm(responder(succeed=True))

    with dspy.context(lm=lm):
        CreatorCriticIterator()(requirements="r")

    assert all("[[ ## completed ## ]]" in request_text(request) for request in lm.engine.requests)
    assert all(request.config.response_format is None for request in lm.engine.requests)


# --- what follows a failed attempt, decided alone -----------------------------------------------------------

_POLICY = RetryPolicy(attempts=3, parse_retries=1)


@pytest.mark.parametrize(("error", "attempts", "parse_failures", "out_of_time", "action"), [
    (LimitReached("lm_calls", "a nested call ran out"), 1, 0, False, "propagate"),
    (DslTypeError("(+ 1 \"a\")"), 1, 0, False, "propagate"),
    (ConfigurationError("no LM"), 1, 0, False, "setup"),
    (ValueError("No LM is loaded."), 1, 0, False, "setup"),
    (DeadlinePassed("cut off"), 1, 0, False, "timeout"),
    (ConnectionError("reset"), 1, 0, True, "timeout"),
    (dspy_errors.AdapterParseError("ChatAdapter", CriticSignature, "??"), 1, 0, False, "reparse"),
    (dspy_errors.AdapterParseError("ChatAdapter", CriticSignature, "??"), 2, 1, False, "give_up"),
    (ConnectionError("reset"), 2, 0, False, "retry"),
    (ConnectionError("reset"), 3, 0, False, "give_up"),
    (KeyError("a bug in a phase"), 1, 0, False, "give_up"),
])
def test_what_follows_a_failed_attempt(error, attempts, parse_failures, out_of_time, action):
    assert failure_action(error, llm=True, attempts=attempts, parse_failures=parse_failures, retry=_POLICY,
                          out_of_time=out_of_time) == action


def test_a_phase_whose_predictor_could_not_parse_its_answer_is_not_given_a_config_to_ask_again():
    unparsed = dspy_errors.AdapterParseError("ChatAdapter", CriticSignature, "??")
    assert failure_action(unparsed, llm=False, attempts=1, parse_failures=0, retry=_POLICY, out_of_time=False) == \
        "give_up"


class CutShort(ScriptedEngine):
    """Answers from its script, every answer cut at the request's max_tokens (finish_reason "length")."""

    def complete(self, request):
        return dataclasses.replace(super().complete(request), finish_reason="length")


def test_an_answer_cut_at_max_tokens_is_a_warning_of_the_run_not_a_log_line(caplog):
    engine = CutShort([{"reasoning": "r", "draft": "Light on the rocks"}, {"accuracy_passed": False,
                       "completeness_passed": True, "quality_passed": True, "feedback": "more", "approved": False},
                       {"improved_draft": "Light on the rocks at night"}, {
                           "accuracy_passed": False, "completeness_passed": True, "quality_passed": True,
                           "feedback": "more", "approved": False}])
    lm = dspy.LM("scripted/cut", engine=engine, cache=False, num_retries=0)

    with caplog.at_level(logging.WARNING), dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=2)(requirements="A haiku about a lighthouse")

    cut = [warning for warning in result.warnings if "cut at the token limit" in warning]
    assert cut == [f"{role}: an answer was cut at the token limit of its request (max_tokens, --max-tokens), so it "
                   "may be incomplete" for role in ("creator", "critic", "iterator")]  # once per role
    assert not [record for record in caplog.records if "truncated" in record.getMessage()]
    outside = dspy.LM("scripted/cut", engine=CutShort([{"answer": "yes"}]), cache=False, num_retries=0)
    with caplog.at_level(logging.WARNING), dspy.context(lm=outside):
        dspy.Predict("question -> answer")(question="outside any run?")  # DSPy's own line stays: no run to tell
    assert any("truncated" in record.getMessage() for record in caplog.records)

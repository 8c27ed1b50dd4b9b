"""Models behind an OpenAI-compatible server of one's own (llama.cpp, vLLM, SGLang, LM Studio, ...):
`ServerLM`, and the engines that send its requests, synchronously (`ServerEngine`, httpx) and from an
event loop (`AsyncServerEngine`, aiohttp), both through one request builder and one reader of answers
(`ServerEngine.body`, `ServerEngine.answer`).
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import logging
import math
import threading
import time
from typing import Any

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
    StreamDeltaEvent,
    StreamEndEvent,
    StreamStartEvent,
    TextDelta,
    TextPart,
    TransportError,
    UnsupportedFeatureError,
    UnsupportedModelError,
    Usage,
    response_to_events,
)
from dspy.lm15 import TimeoutError as LMTimeout

from loops.errors import ConfigurationError
from loops.lm.messages import SAMPLING, chat_messages, sampling_options
from loops.vocabulary.context import before_request, current_run, deadline, given_up, time_left

__all__ = ["SERVER_TIMEOUT_S", "AsyncServerEngine", "ServerEngine", "ServerLM"]

_log = logging.getLogger("loops.lm")

# How each server (by address) takes a JSON schema as response_format, learnt from its refusals: OpenAI's
# spelling, which vLLM, llama.cpp's llama-server and OpenAI take; llama-cpp-python's server's own (json_object
# with a schema, the same grammar the embedded model decodes with); or none, the answer parsed as it comes.
_SCHEMA_SPELLINGS = ("json_schema", "json_object", "none")
_schema_spelling: dict[str, str] = {}
_warned_servers: set[str] = set()
SERVER_TIMEOUT_S = 600.0  # per request, as LiteLLM's default: a slow server's long answer is no failure


class ServerLM(dspy.LM):
    """A model served by an OpenAI-compatible server at `api_base` (llama.cpp, vLLM, SGLang, LM Studio, ...);
    `loops.lm.resolve(model, api_base=...)` builds it. Its requests go through `ServerEngine`, not LiteLLM.

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

    def close(self) -> None:
        """Close the connections of its synchronous engine (DSPy leaves an engine it was handed open); a later
        request opens new ones. Async sessions close with their event loops."""
        self.engine.close()
        super().close()


class ServerEngine:
    """A DSPy engine for an OpenAI-compatible server's `/chat/completions`: text messages in, one text
    answer out. The response_format is spelled as the server takes it (`_SCHEMA_SPELLINGS`): where it
    refuses one spelling, the request is sent again in the next, remembered per server; where it takes
    none, the run's warnings say so once. Synchronous requests go through an `httpx.Client`;
    `AsyncServerEngine` sends them with aiohttp.

    Inside a run, every request it sends (a re-send in another spelling too) first passes the run's limits
    (`loops.vocabulary.context.before_request`), and waits no longer than the run has left
    (`loops.vocabulary.context.time_left`): a request cut off at the deadline ends the run with "timeout" and counts as
    sent."""

    loops_run_aware = True  # loops.vocabulary.context.RUN_AWARE
    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"response_format", "max_tokens", "stop", *SAMPLING})

    def __init__(self, api_base: str, api_key: str | None = None):
        self.api_base = api_base
        self.url = f"{api_base}/chat/completions"
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._client = None
        self._client_lock = threading.Lock()

    def complete(self, request: Request) -> Response:
        import httpx

        client = self._http()
        while True:
            body = self.body(request)
            payload = _json_bytes(body)  # a mistake here is a bug, not a transport fault: it is not retried
            before_request()
            wait = _wait_s()
            try:
                response = client.post(self.url, content=payload, headers=self.headers, timeout=wait)
            except httpx.LocalProtocolError:
                raise  # a request no server may be sent (a header with a newline, say): no retry can fix it
            except (httpx.RequestError, OSError) as exc:
                raise _transport_error(exc, self.api_base, wait) from exc
            outcome = self.answer(request, body, response.status_code, response.content, response.headers)
            if outcome is not None:
                return outcome

    def stream(self, request: Request):
        """`complete`'s answer as the server sends it (server-sent events), a text delta per chunk; a server that
        answers the request whole (or refuses it) is read as `complete` reads it."""
        import httpx

        client = self._http()
        while True:
            body = self.streamed_body(request)
            payload = _json_bytes(body)
            before_request()
            wait = _wait_s()
            try:
                with client.stream("POST", self.url, content=payload, headers=self.stream_headers,
                                   timeout=wait) as response:
                    if response.status_code >= 400 or not _is_event_stream(response.headers):
                        outcome = self.answer(request, body, response.status_code, response.read(), response.headers)
                        if outcome is None:
                            continue
                        yield from response_to_events(outcome)
                        return
                    reader = _EventReader(self, request)
                    for line in response.iter_lines():
                        yield from reader.read(line)
                    yield from reader.end()
                    return
            except httpx.LocalProtocolError:
                raise
            except (httpx.RequestError, OSError) as exc:
                raise _transport_error(exc, self.api_base, wait) from exc

    def streamed_body(self, request: Request) -> dict[str, Any]:
        """`body`, asking for the answer as server-sent events, with its usage in the last one (OpenAI's
        `stream_options`; a server that ignores it streams no usage, `_EventReader.end`)."""
        return {**self.body(request), "stream": True, "stream_options": {"include_usage": True}}

    @property
    def stream_headers(self) -> dict[str, str]:
        return {**self.headers, "Accept": "text/event-stream"}

    def body(self, request: Request) -> dict[str, Any]:
        """The request as the server's JSON body, its response_format in the spelling the server takes."""
        config = request.config
        body: dict[str, Any] = {"model": _served_model(request.model), "messages": _server_messages(request)}
        if config.max_tokens is not None:
            body["max_tokens"] = config.max_tokens
        body.update(sampling_options(config))
        if config.stop:
            body["stop"] = list(config.stop)
        if config.response_format is not None:
            spelled = self._spelled(request.model, config.response_format)
            if spelled is not None:
                body["response_format"] = spelled
        if config.extensions:  # what DSPy has no field for (logit_bias, a server's own options) goes as given
            body.update(config.extensions)
        return body

    def answer(self, request: Request, body: dict[str, Any], status: int, content: bytes,
               headers: Any = None) -> Response | None:
        """The server's answer as a Response; None when the server refused the body's response_format and
        the request is worth sending again in the next spelling; else the error, raised (with the wait a
        server's Retry-After asks for, in seconds or as an HTTP date, on `retry_after`)."""
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if status >= 400:
            message = _error_message(data, content)
            if self._learn_refusal(message, body.get("response_format")):
                return None
            raise _http_error(status, message, _retry_after((headers or {}).get("retry-after")))
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            usage = data.get("usage") or {}
        except (TypeError, KeyError, IndexError, AttributeError):
            # A body cut short or garbled on the way (a proxy, a restarting server): worth another try.
            raise ServerError(f"the server at {self.api_base} answered without a chat completion: "
                              f"{content[:200]!r}", status=status) from None
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
    CPU per request where httpx's pool took milliseconds with hundreds of requests in flight. Like it, it
    asks the run before each request and waits no longer than the run has left."""

    loops_run_aware = True  # loops.vocabulary.context.RUN_AWARE

    def __init__(self, sync: ServerEngine):
        self.sync = sync
        self._sessions: dict[asyncio.AbstractEventLoop, Any] = {}
        self._proxy: str | None = None

    async def complete(self, request: Request) -> Response:
        import aiohttp

        session = await self._session()
        while True:
            body = self.sync.body(request)
            payload = _json_bytes(body)  # a mistake here is a bug, not a transport fault: it is not retried
            before_request()
            wait = _wait_s()
            try:
                async with session.post(self.sync.url, data=payload, headers=self.sync.headers,
                                        proxy=self._proxy, timeout=aiohttp.ClientTimeout(total=wait)) as reply:
                    status, content, headers = reply.status, await reply.read(), reply.headers
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise _transport_error(exc, self.sync.api_base, wait) from exc
            outcome = self.sync.answer(request, body, status, content, headers)
            if outcome is not None:
                return outcome

    async def stream(self, request: Request):
        """`ServerEngine.stream` from an event loop: the chunks as they arrive, the whole stream within the run's
        time left."""
        import aiohttp

        session = await self._session()
        while True:
            body = self.sync.streamed_body(request)
            payload = _json_bytes(body)
            before_request()
            wait = _wait_s()
            try:
                async with session.post(self.sync.url, data=payload, headers=self.sync.stream_headers,
                                        proxy=self._proxy, timeout=aiohttp.ClientTimeout(total=wait)) as reply:
                    if reply.status >= 400 or not _is_event_stream(reply.headers):
                        outcome = self.sync.answer(request, body, reply.status, await reply.read(), reply.headers)
                        if outcome is None:
                            continue
                        for event in response_to_events(outcome):
                            yield event
                        return
                    reader = _EventReader(self.sync, request)
                    async for line in reply.content:
                        for event in reader.read(line):
                            yield event
                    for event in reader.end():
                        yield event
                    return
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise _transport_error(exc, self.sync.api_base, wait) from exc

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


class _EventReader:
    """An answer streamed as server-sent events of OpenAI's chat completion chunks, read line by line into DSPy's
    stream events: a start, a text delta per chunk's content, an end with the finish reason and, where the server
    sends it, the usage. The run's deadline is checked between chunks."""

    def __init__(self, engine: ServerEngine, request: Request):
        self.engine, self.request = engine, request
        self.started = self.done = False
        self.finish: str | None = None
        self.usage: Usage | None = None

    def read(self, line: bytes | str) -> list[Any]:
        text = (line.decode("utf-8") if isinstance(line, bytes) else line).strip()
        if not text.startswith("data:"):
            return []  # a comment, an event name, the blank line between events
        data = text[len("data:"):].strip()
        if data == "[DONE]":
            self.done = True
            return []
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ServerError(f"the server at {self.engine.api_base} streamed a chunk that is not JSON: "
                              f"{data[:200]!r}") from None
        if not isinstance(chunk, dict) or "error" in chunk:
            raise ServerError(f"the server at {self.engine.api_base} broke off its answer: "
                              f"{_error_message(chunk, data.encode())}")
        events = self._start(chunk.get("id"), chunk.get("model"))
        for choice in chunk.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                events.append(StreamDeltaEvent(delta=TextDelta(text=content, part_index=0)))
            self.finish = choice.get("finish_reason") or self.finish
        usage = chunk.get("usage")
        if usage:
            self.usage = Usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens"))
        until = deadline()
        if until is not None and self.finish is None and time.monotonic() >= until:
            raise given_up(f"the request to the server at {self.engine.api_base}")
        return events

    def end(self) -> list[Any]:
        """The stream's end event, once the server ended it; a stream cut off before is a transport fault."""
        if self.finish is None and not self.done:
            raise TransportError(f"the server at {self.engine.api_base} closed its stream before its answer was "
                                 "complete")
        if self.usage is None:
            _say_once(self.engine.api_base, f"the server at {self.engine.api_base} streams no token usage, so the "
                      "tokens of its streamed answers are not counted (max_tokens, the trace)")
        return [*self._start(None, None), StreamEndEvent(finish_reason="length" if self.finish == "length" else
                                                         "stop", usage=self.usage)]

    def _start(self, answer_id: str | None, model: str | None) -> list[Any]:
        if self.started:
            return []
        self.started = True
        return [StreamStartEvent(id=answer_id or None, model=model or self.request.model)]


def _is_event_stream(headers: Any) -> bool:
    return "text/event-stream" in (headers.get("content-type") or "")


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

    return chat_messages(request, {"developer": "system"}, text_of)


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


def _http_error(status: int, message: str, retry_after: float | None = None) -> ProviderError:
    """An error answer as the error DSPy raises for that status (as LiteLLM's client classified it), which the
    runtime's retry policy reads: transient (429, 5xx, 408) or not, and how long the server asks it to wait."""
    message = f"HTTP {status}: {message}"
    if retry_after is not None and status in (429, 503):
        return (RateLimitError if status == 429 else ServerError)(message, status=status, retry_after=retry_after)
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


def _wait_s() -> float:
    """How long a request may wait: the run's time left, at most `SERVER_TIMEOUT_S`."""
    left = time_left()
    return SERVER_TIMEOUT_S if left is None else max(0.001, min(SERVER_TIMEOUT_S, left))


def _transport_error(exc: Exception, server: str, wait: float) -> BaseException:
    """A request that got no whole answer: given up at the run's deadline, timed out, its connection failed, or the
    server closed it before its answer was complete."""
    timed_out = isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__
    if timed_out and wait < SERVER_TIMEOUT_S:
        return given_up(f"the request to the server at {server}")
    if timed_out:
        return LMTimeout(f"no answer within {wait:.0f}s: {exc}")
    address = _address_of(exc) or server
    if any(kind.__name__ in _BROKEN_OFF for kind in type(exc).__mro__):
        return TransportError(f"the server at {address} closed the connection before its answer was complete (a "
                              f"truncated response, or none): {type(exc).__name__}: {exc}")
    return TransportError(f"cannot reach the server at {address} (is it running there?): {type(exc).__name__}: {exc}")


# The errors of httpx and aiohttp for a connection that was made, but closed or broken before the whole answer came.
_BROKEN_OFF = frozenset({"RemoteProtocolError", "ReadError", "ClientPayloadError", "ServerDisconnectedError"})


def _retry_after(value: str | None) -> float | None:
    """The seconds a Retry-After header asks for: a number of seconds or an HTTP date; None for none."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        seconds = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _address_of(exc: Exception) -> str | None:
    """The address a failed request went to, as the HTTP client's error knows it (httpx's request, aiohttp's
    host and port)."""
    try:
        return str(exc.request.url)  # httpx: raises RuntimeError when the error has no request
    except (AttributeError, RuntimeError):
        pass
    host, port = getattr(exc, "host", None), getattr(exc, "port", None)
    return f"{host}:{port}" if host else None

"""A loop under `dspy.streamify`: the output fields its listeners choose, as each role's model writes them, and a
status message for each step of the run.

DSPy's `StreamListener` finds a field by the markers of the adapter it reads from the context of the program's
caller, while a loop renders each role in the adapter its model answers in shape with (`loops.vocabulary.profile`): the
embedded model's plain text or compact JSON, say. So the run listens where the role's adapter is known, on the
way to the stream (`RoleStream`): a plain-text role's answer is the field itself, and any other adapter's is
read by the listener as the DSPy adapter it derives from (chat, JSON, XML).

Status messages come from the run's own events (the `loops.vocabulary.context.Observer` protocol), not from a DSPy
callback: `StatusMessages` says them, and a `dspy.streaming.StatusMessageProvider` given to `dspy.streamify`
that has its methods says them instead. Nothing of this exists while nothing streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import anyio
import dspy
from dspy.adapters import ChatAdapter, JSONAdapter, XMLAdapter
from dspy.streaming import StatusMessage, StatusMessageProvider, StreamListener, StreamResponse
from dspy.streaming.messages import StatusStreamingCallback

from loops.vocabulary import context
from loops.vocabulary.adapters import PlainTextAdapter

__all__ = ["RoleStream", "StatusMessages", "streamed"]

# The adapters DSPy's listeners read, most derived first: a role's adapter is listened to as the first it is.
_LISTENED = tuple((cls, cls()) for cls in (XMLAdapter, JSONAdapter, ChatAdapter))


class StatusMessages(StatusMessageProvider):
    """The status messages of a loop's run, one per event of it, and DSPy's own (tools, modules, LM calls).

    Subclass it and give an instance to `dspy.streamify(loop, status_message_provider=...)` to shape them; a
    method returning None says nothing for that event. Each is given what observers are told of the event
    (`loops.vocabulary.context.CallInfo`, the trace's `loops.Step`, ...)."""

    def role_start_status_message(self, call: context.CallInfo, fields: tuple[str, ...]) -> str | None:
        """A role or phase starts a call; `fields` are the output fields it writes, when it is a DSPy module."""
        if call.kind == "human":
            return f"{call.role}: waiting for a person's answer (iteration {call.iteration})"
        doing = f"writing {', '.join(fields)}" if fields else "working" if call.kind == "llm" else "running"
        return f"{call.role}: {doing} (iteration {call.iteration})"

    def role_end_status_message(self, call: context.CallInfo, step: Any, error: BaseException | None) -> str | None:
        """A role or phase call ended: `step` its trace step (None when it recorded none), `error` what ended it."""
        if error is not None:
            return f"{call.role}: stopped ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
        seconds = f" in {step.seconds:.1f}s" if step is not None else ""
        return f"{call.role}: done{seconds}"

    def retry_status_message(self, call: context.CallInfo, attempt: int, error: BaseException,
                             action: str) -> str | None:
        """An attempt of a call failed; `action` is what follows ("retry", "reparse": it asks again)."""
        if action not in ("retry", "reparse"):
            return None
        why = "its answer could not be parsed" if action == "reparse" else type(error).__name__
        return f"{call.role}: attempt {attempt} failed ({why}); asking again"

    def checks_status_message(self, step: Any) -> str | None:
        """The checks ran on a draft: `step.outputs` is their report (`loops.vocabulary.checks.CheckReport.to_dict`)."""
        report = step.outputs or {}
        return f"{step.role}: {report.get('held')} of {report.get('total')} held"

    def replay_status_message(self, step: Any) -> str | None:
        """A call answered from the checkpoint's record (a resumed run)."""
        return f"{step.role}: replayed from the checkpoint (iteration {step.iteration})"

    def limit_status_message(self, limit: BaseException) -> str | None:
        """A limit of the run's budget stopped it."""
        return f"stopped: {limit}"

    def run_end_status_message(self, result: Any) -> str | None:
        """The run ended with `result` (its `LoopResult`), just before the result reaches the stream."""
        if result is None:
            return None
        return f"finished: {result.stop_reason} after {result.iterations} iteration(s)"


_SAYS = StatusMessages()


class RoleStream:
    """The stream `dspy.streamify` reads, as a loop's role calls write to it: the chunks of a field a listener
    chooses reach it as that listener's `StreamResponse`s, read in the adapter of the role that wrote them (the
    context's adapter where the chunk is sent); everything else passes as it comes. A text field a role writes
    in JSON streams as its text, not as the JSON string literal that holds it."""

    def __init__(self, stream: Any, listeners: list[StreamListener]):
        self.stream = stream
        self._listeners: dict[int, list[StreamListener]] = {}
        for listener in listeners:
            self._listeners.setdefault(id(listener.predict), []).append(listener)
        self._strings: dict[int, _JsonString] = {}  # per listener, the JSON string it is reading

    async def send(self, item: Any) -> None:
        listeners = self._listeners.get(getattr(item, "predict_id", None)) if hasattr(item, "choices") else None
        if not listeners:
            await self.stream.send(item)
            return
        adapter = dspy.settings.adapter
        for listener in listeners:
            for response in self._heard(listener, item, adapter):
                await self.stream.send(response)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def _heard(self, listener: StreamListener, chunk: Any, adapter: Any) -> list[StreamResponse]:
        """What `listener` makes of `chunk`, an answer's piece written in `adapter`."""
        choice = chunk.choices[0]
        ended = choice.finish_reason is not None
        if isinstance(adapter, PlainTextAdapter):
            return _plain_text(listener, choice.delta.content, ended, adapter)
        listened = next((instance for cls, instance in _LISTENED if isinstance(adapter, cls)), _LISTENED[-1][1])
        with dspy.context(adapter=listened):
            heard = [response for response in (listener.receive(chunk), listener.finalize() if ended else None)
                     if response is not None]
        field = listener.predict.signature.output_fields.get(listener.signature_field_name)
        if not isinstance(listened, JSONAdapter) or field is None or field.annotation is not str:
            return heard
        decoded = []
        for response in heard:
            string = self._strings.setdefault(id(listener), _JsonString())
            text = string.read(response.chunk or "")
            if response.is_last_chunk:
                del self._strings[id(listener)]
            if text or response.is_last_chunk:
                decoded.append(StreamResponse(response.predict_name, response.signature_field_name, text,
                                              response.is_last_chunk))
        return decoded


class _JsonString:
    """A JSON string literal read piece by piece: each piece gives what it decodes to (an escape cut short waits
    for the next piece); what follows the closing quote is not the string's. A value that is no string passes."""

    def __init__(self) -> None:
        self.pending = ""
        self.state = "before"  # before the opening quote, "inside" the string, "after" it; "raw": not a string

    def read(self, piece: str) -> str:
        if self.state in ("after", "raw"):
            return piece if self.state == "raw" else ""
        text = self.pending + piece
        if self.state == "before":
            opened = text.lstrip()
            if not opened:
                self.pending = text
                return ""
            if not opened.startswith('"'):
                self.state, self.pending = "raw", ""
                return opened
            self.state, text = "inside", opened[1:]
        decoded, index = [], 0
        while index < len(text):
            char = text[index]
            if char == '"':
                self.state = "after"
                break
            size = 1 if char != "\\" else _escape_size(text, index)
            if index + size > len(text):
                break  # an escape cut short: the next piece completes it
            decoded.append(json.loads(f'"{text[index:index + size]}"') if size > 1 else char)
            index += size
        self.pending = text[index:] if self.state == "inside" else ""
        return "".join(decoded)


def _escape_size(text: str, index: int) -> int:
    """The length of the escape at `text[index]`: `\\uXXXX`, a surrogate pair of two, or a backslash and a letter."""
    if text[index + 1:index + 2] != "u":
        return 2
    high = text[index + 2:index + 6]
    return 12 if len(high) == 4 and "d800" <= high.lower() <= "dbff" else 6


def _plain_text(listener: StreamListener, text: str | None, ended: bool, adapter: PlainTextAdapter) -> list[
        StreamResponse]:
    """A plain-text answer is its field's value, whole: every piece of it is the field's, stripped at both ends
    as the adapter parses it (trailing whitespace is held until more text follows it)."""
    fields = listener.predict.signature.output_fields
    if listener.signature_field_name != (adapter.field or next(iter(fields), None)):
        return []  # the plain-text adapter leaves the other fields empty
    if listener.stream_end:
        if not listener.allow_reuse:
            return []
        listener.stream_start = listener.stream_end = listener.value_started = False
        listener.held_whitespace = ""
    piece = text or ""
    if not listener.value_started:
        piece = piece.lstrip()
    heard = []
    stripped = piece.rstrip()
    if stripped:
        listener.stream_start = listener.value_started = True
        heard.append(StreamResponse(listener.predict_name, listener.signature_field_name,
                                    listener.held_whitespace + stripped, is_last_chunk=False))
        listener.held_whitespace = piece[len(stripped):]
    else:
        listener.held_whitespace += piece if listener.value_started else ""
    if ended:
        listener.stream_end = True
        listener.held_whitespace = ""
        heard.append(StreamResponse(listener.predict_name, listener.signature_field_name, "", is_last_chunk=True))
    return heard


class _Status:
    """An observer of a streamed loop's runs that says each event as a `StatusMessage` on the stream, in the
    order the run goes; `sent()` waits for those still on their way (from an event loop, a message that finds
    the stream full is sent by a task, after those before it)."""

    def __init__(self, stream: Any, provider: Any, module: Any):
        self.stream, self.provider, self.module = stream, provider, module
        self._said: set[int] = set()  # the steps whose calls' ends were said (`call_finished`)
        self._pending: asyncio.Task | None = None

    def _say(self, method: str, *args: Any) -> None:
        says = getattr(self.provider, method, None) or getattr(_SAYS, method)
        message = says(*args)
        if message:
            self._send(StatusMessage(message))

    def _send(self, message: StatusMessage) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # the thread `dspy.streamify` runs a synchronous program on
            with contextlib.suppress(RuntimeError):  # a thread of the run's own (a phase's): it cannot reach it
                anyio.from_thread.run(self.stream.send, message)
            return
        if self._pending is None or self._pending.done():
            try:
                self.stream.send_nowait(message)
                return
            except anyio.WouldBlock:
                pass
        before = self._pending

        async def send_after() -> None:
            if before is not None:
                await before
            await self.stream.send(message)

        self._pending = loop.create_task(send_after())

    async def sent(self) -> None:
        if self._pending is not None:
            await self._pending

    def _fields(self, call: context.CallInfo) -> tuple[str, ...]:
        role = getattr(self.module, call.role, None)
        predictors = role.predictors() if isinstance(role, dspy.Module) else []
        return tuple(predictors[-1].signature.output_fields) if predictors else ()

    def call_started(self, call: context.CallInfo) -> None:
        self._say("role_start_status_message", call, self._fields(call))

    def attempt_failed(self, call: context.CallInfo, attempt: int, error: BaseException, action: str) -> None:
        self._say("retry_status_message", call, attempt, error, action)

    def call_finished(self, call: context.CallInfo, step: Any, error: BaseException | None) -> None:
        if step is not None:
            self._said.add(id(step))
        self._say("role_end_status_message", call, step, error)

    def step_finished(self, step: Any) -> None:
        if id(step) in self._said:
            self._said.discard(id(step))
        elif not step.replayed and isinstance(step.outputs, dict) and {"held", "total"} <= step.outputs.keys():
            self._say("checks_status_message", step)

    def call_replayed(self, run: context.RunInfo, step: Any, nested: bool) -> None:
        self._say("replay_status_message", step)

    def limit_reached(self, run: context.RunInfo, limit: BaseException) -> None:
        self._say("limit_status_message", limit)

    def run_finished(self, run: context.RunInfo, result: Any, error: BaseException | None) -> None:
        if not run.nested:
            self._say("run_end_status_message", result)


class _NotStreamed:
    async def sent(self) -> None:
        pass


_NOT_STREAMED = _NotStreamed()


@contextlib.contextmanager
def streamed(module: Any) -> Iterator[Any]:
    """What a loop's run holds open while `dspy.streamify` streams it (a run within it shares its own): its role
    calls write to a `RoleStream`, and its events are said as status messages. Yields what `sent()` waits for
    the last of them; while nothing streams, nothing."""
    stream = dspy.settings.send_stream
    if stream is None or isinstance(stream, RoleStream):
        yield _NOT_STREAMED
        return
    provider = next((callback.status_message_provider for callback in dspy.settings.callbacks or ()
                     if isinstance(callback, StatusStreamingCallback)), _SAYS)
    status = _Status(stream, provider, module)
    with dspy.context(send_stream=RoleStream(stream, list(dspy.settings.stream_listeners or ()))), \
            context.observing(status):
        yield status

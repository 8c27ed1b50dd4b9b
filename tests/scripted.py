"""A scripted LM for tests: a real `dspy.LM` whose engine answers from a script instead of a model.

A script is a list (answers in order) or a function of the request. An answer is a dict of output
fields (rendered in ChatAdapter's format), raw text (to simulate garbage), or an exception (raised,
to simulate an LM failure). When ChatAdapter cannot parse an answer it asks again through
JSONAdapter: that second request is answered by the next entry, which must then be JSON text
(`json.dumps(fields)`) to parse.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any

import dspy
from dspy.lm15 import Message, Response, StreamDeltaEvent, TextDelta, TextPart, Usage, response_to_events

Answer = dict[str, Any] | str | BaseException
Script = list[Answer] | Callable[["ScriptedEngine", Any], Answer]


def chat_format(fields: dict[str, Any]) -> str:
    sections = [f"[[ ## {name} ## ]]\n{value if isinstance(value, str) else json.dumps(value)}"
                for name, value in fields.items()]
    return "\n\n".join([*sections, "[[ ## completed ## ]]"])


def request_text(request: Any) -> str:
    system = request.system if isinstance(request.system, str) else ""
    return "\n".join([system, *(message.text or "" for message in request.messages)])


class ScriptedEngine:
    def __init__(self, script: Script):
        self.script = script if callable(script) else list(script)
        self.requests: list[Any] = []
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> ScriptedEngine:
        return self

    def complete(self, request: Any) -> Response:
        with self._lock:
            self.requests.append(request)
            if callable(self.script):
                answer = self.script(self, request)
            elif self.script:
                answer = self.script.pop(0)
            else:
                raise AssertionError(f"the script ran out of answers at request {len(self.requests)}")
        if isinstance(answer, BaseException):
            raise answer
        text = answer if isinstance(answer, str) else chat_format(answer)
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=10, output_tokens=5))

    def stream(self, request: Any):
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


class AsyncScriptedEngine:
    """The async side of a scripted LM; with `delay_s` every answer takes that long to arrive (the
    request is recorded when it is made, so one abandoned in flight still shows in `requests`)."""

    def __init__(self, sync: ScriptedEngine, delay_s: float = 0.0):
        self.sync = sync
        self.delay_s = delay_s

    def __deepcopy__(self, memo: dict) -> AsyncScriptedEngine:
        return self

    async def complete(self, request: Any) -> Response:
        if not self.delay_s:
            return self.sync.complete(request)
        response = self.sync.complete(request)
        await asyncio.sleep(self.delay_s)
        return response

    async def stream(self, request: Any):
        for event in self.sync.stream(request):
            yield event

    async def aclose(self) -> None:
        pass


def scripted_lm(script: Script, name: str = "scripted/test", async_delay_s: float = 0.0) -> dspy.LM:
    """A `dspy.LM` answering from `script`; `lm.engine.requests` records what it was asked.

    `async_delay_s` makes every answer on the async path (`acall`) take that long."""
    engine = ScriptedEngine(script)
    return dspy.LM(name, engine=engine, async_engine=AsyncScriptedEngine(engine, async_delay_s), cache=False,
                   num_retries=0)


def calls(lm: dspy.LM) -> int:
    return len(lm.engine.requests)


class Phase:
    """A Python phase that records the positional arguments of each call and answers from a list
    (the last answer repeats); an exception in the list is raised instead."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.args = []

    def __call__(self, *args):
        self.args.append(args)
        answer = self.answers[min(len(self.args), len(self.answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    @property
    def calls(self):
        return len(self.args)


class StreamingEngine(ScriptedEngine):
    """A scripted engine that streams each answer a few characters at a time, as a served model does."""

    def __init__(self, script: Script, piece: int = 4):
        super().__init__(script)
        self.piece = piece

    def stream(self, request: Any):
        for event in response_to_events(self.complete(request)):
            delta = getattr(event, "delta", None)
            if isinstance(event, StreamDeltaEvent) and isinstance(delta, TextDelta):
                for start in range(0, len(delta.text), self.piece):
                    yield dataclasses.replace(event, delta=dataclasses.replace(delta, text=delta.text[start:start
                                                                                                   + self.piece]))
            else:
                yield event


def streaming_lm(script: Script) -> dspy.LM:
    """A scripted LM whose answers stream in pieces (`dspy.streamify`)."""
    engine = StreamingEngine(script)
    return dspy.LM("scripted/stream", engine=engine, async_engine=AsyncScriptedEngine(engine), cache=False,
                   num_retries=0)

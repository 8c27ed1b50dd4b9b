"""Loopback fakes of the OpenAI chat API, for tests of the hosted-model path (no network): `FakeOpenAI`, which
answers every request alike, and `FaultyOpenAI`, which answers in shape but for the faults it is told to
inject (also the server of `benchmarks/faults.py`)."""

from __future__ import annotations

import collections
import email.utils
import http.server
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

_ERRORS = {401: ("Incorrect API key provided", "invalid_request_error"), 503: ("overloaded", "server_error")}


class FakeOpenAI(http.server.ThreadingHTTPServer):
    """Answers every chat request with `status`: 200 with `content` as the assistant's message, or an
    OpenAI-shaped error. `requests` counts the requests received."""

    status = 200
    content = ""
    requests = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FakeOpenAI

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.requests += 1
        if self.server.status == 200:
            body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "whatever",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": self.server.content}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}
        else:
            message, kind = _ERRORS[self.server.status]
            body = {"error": {"message": message, "type": kind, "code": None}}
        data = json.dumps(body).encode()
        self.send_response(self.server.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """A running `FakeOpenAI` that `openai/...` model strings reach: through OPENAI_BASE_URL, with which
    DSPy sends them through LiteLLM."""
    server = FakeOpenAI(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield server
    finally:
        server.shutdown()
        server.server_close()


# --- a server that answers in shape, but for the faults it is told to inject ------------------------------

# What llama-cpp-python's server answers to a response_format it does not take (its HTTP status is 500).
LLAMA_CPP_REFUSAL = ("1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                     "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}")

FAULTS = {
    "server_error": "503 with an OpenAI-shaped error",
    "rate_limited": "429 with Retry-After in seconds",
    "rate_limited_date": "429 with Retry-After as an HTTP date",
    "hang": "no answer until long after the run's deadline",
    "truncated": "a 200 whose body ends before its Content-Length, then the connection closes",
    "malformed": "a 200 whose body is not JSON",
    "schema_refusal": "a 500 refusing response_format json_schema, as llama-cpp-python's server does",
    "unparseable": "a 200 whose answer is not in the shape asked for",
}


def answer_content(body: dict, approve: bool = False) -> str:
    """A JSON object with the keys the request asks for: from its schema, else from the JSON adapter's words;
    booleans true but `approved` (`approve`), a choice its last option (FAIL, stop), strings "a <key>"."""
    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema") or response_format.get("schema")
    if schema:
        fields = schema["properties"]
    else:
        request = body["messages"][-1]["content"]
        keys = re.findall(r"`(\w+)`", request[request.rfind("Respond with a JSON object"):])
        fields = {key: {"type": "boolean" if key == "approved" or key.endswith("_passed") else "string"}
                  for key in keys}

    def value(key: str, field: dict) -> object:
        if "enum" in field:
            return field["enum"][-1]
        if field.get("type") == "boolean":
            return approve if key == "approved" else True
        return f"a {key}"

    return json.dumps({key: value(key, field) for key, field in fields.items()})


def chat_completion(body: dict, content: str) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}


class FaultyOpenAI(http.server.ThreadingHTTPServer):
    """An OpenAI-compatible chat server on loopback that answers every request in shape (`answer_content`)
    but where `faults` says otherwise: `faults[(tenant, n)]` is the fault (a key of `FAULTS`) injected into
    the n-th request (1-based) of `tenant`, the first segment of the request's path (give each run its own
    `api_base`, `base_url(tenant)`, to count its requests apart). `received[tenant]` counts the requests
    received, faulty ones included; `hang_s` is how long a hanging request hangs, `retry_after_s` what a 429
    asks for. A request asking for a stream (`"stream": true`) and no fault is answered as server-sent events."""

    daemon_threads = True
    hang_s = 30.0
    retry_after_s = 1
    stream_piece = 4  # characters per chunk of a streamed answer
    stream_usage = True  # whether a streamed answer ends with its usage, when asked for it

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FaultyHandler)
        self.faults: dict[tuple[str, int], str] = {}
        self.received: collections.Counter[str] = collections.Counter()
        self.approve = False
        self.closing = threading.Event()  # set when the server shuts down: hanging requests end then
        self._lock = threading.Lock()

    def base_url(self, tenant: str = "t") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{tenant}/v1"

    def count(self, tenant: str) -> str | None:
        """Count a request of `tenant`; the fault to inject into it, if any."""
        with self._lock:
            self.received[tenant] += 1
            return self.faults.get((tenant, self.received[tenant]))

    def handle_error(self, request, client_address) -> None:
        pass  # a client that gave a hanging request up closed its connection: expected


class _FaultyHandler(http.server.BaseHTTPRequestHandler):
    server: FaultyOpenAI
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        fault = self.server.count(self.path.strip("/").split("/")[0])
        if fault == "schema_refusal" and (body.get("response_format") or {}).get("type") == "json_schema":
            return self._send(500, {"error": {"message": LLAMA_CPP_REFUSAL, "type": "internal_server_error"}})
        if fault == "server_error":
            return self._send(503, {"error": {"message": "overloaded", "type": "server_error"}})
        if fault in ("rate_limited", "rate_limited_date"):
            wait = self.server.retry_after_s
            after = str(wait) if fault == "rate_limited" else email.utils.formatdate(time.time() + wait, usegmt=True)
            return self._send(429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"Retry-After": after})
        if fault == "hang":
            self.server.closing.wait(self.server.hang_s)
        content = "no fields here" if fault == "unparseable" else answer_content(body, self.server.approve)
        if body.get("stream") and fault is None:
            return self._stream(body, content)
        data = json.dumps(chat_completion(body, content)).encode()
        if fault == "truncated":
            return self._send_bytes(200, data[:len(data) // 2], len(data), close=True)
        if fault == "malformed":
            return self._send_bytes(200, b"<html>502 Bad Gateway</html>", close=False)
        return self._send_bytes(200, data)

    def _stream(self, body: dict, content: str) -> None:
        """The answer as server-sent events, `stream_piece` characters a chunk, then the usage when the request
        asks for it (`stream_options`) and the server reports it (`stream_usage`)."""
        piece = self.server.stream_piece
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": content[start:start + piece]},
                                "finish_reason": None}]} for start in range(0, len(content), piece)]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage") and self.server.stream_usage:
            chunks.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": len(chunks) - 1,
                                                    "total_tokens": 5 + len(chunks) - 1}})
        with suppress(OSError):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for chunk in chunks:
                chunk.update({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body.get("model")})
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        self.close_connection = True

    def _send(self, status: int, answer: dict, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(answer).encode(), headers=headers)

    def _send_bytes(self, status: int, data: bytes, length: int | None = None, close: bool = False,
                    headers: dict[str, str] | None = None) -> None:
        with suppress(OSError):  # the client may have given the request up (a hang past its deadline)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data) if length is None else length))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if close:
                self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        if close:
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def faulty_openai() -> Iterator[FaultyOpenAI]:
    """A running `FaultyOpenAI`, shut down at the end."""
    server = FaultyOpenAI()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield server
    finally:
        server.closing.set()
        server.shutdown()
        server.server_close()

"""A loopback fake of the OpenAI chat API, for tests of the hosted-model path (no network)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

# pydantic warns about a TypedDict of LiteLLM's while a request is built; as an error (pytest's setting)
# it would turn every request into a connection error.
hosted = pytest.mark.filterwarnings("ignore:Item 'summary' on TypedDict class")

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

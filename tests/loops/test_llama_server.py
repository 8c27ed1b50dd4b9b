"""End to end through a real OpenAI-compatible server: llama-cpp-python's server (the `server` extra)
runs the embedded GGUF on loopback, and each pattern runs through the `loops` command with
`--model openai/smollm2 --api-base ...` against it. No network beyond loopback."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

import dspy
import pytest
from dspy.streaming import StreamListener, StreamResponse

from benchmarks.parse_rate import SERVED_MODEL, llama_server
from loops import CreatorCriticIterator
from loops.lm import resolve
from tests.loops.trace_files import trace_steps

pytestmark = [
    pytest.mark.slow,
    pytest.mark.embedded,
    pytest.mark.skipif(importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("fastapi") is None,
                       reason="needs llama-cpp-python's server: pip install -e '.[server]'"),
]
KEY_VARIABLE = "LOOPS_TEST_SERVER_KEY"


@pytest.fixture(scope="module")
def base_url():
    with llama_server() as url:
        yield url


def loops_command(base_url: str, *args: str, adapter: str | None, trace: Path) -> subprocess.CompletedProcess:
    options = ["--model", f"openai/{SERVED_MODEL}", "--api-base", base_url, "--api-key-env", KEY_VARIABLE,
               "--temperature", "0", "--max-iterations", "1", "--trace", str(trace)]
    if adapter is not None:
        options += ["--adapter", adapter]
    # The key is any text: the server checks none, but --api-key-env must name a variable that is set.
    # A cache of this test's own: another test's identical request must not be answered from DSPy's cache.
    environment = {**os.environ, KEY_VARIABLE: "sk-loopback", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                   "DSPY_CACHEDIR": str(trace.parent / "dspy-cache")}
    return subprocess.run([sys.executable, "-m", "loops", *args, *options], capture_output=True, text=True,
                          env=environment, timeout=900)


def assert_ran_with_role_calls(outcome: subprocess.CompletedProcess, trace: Path, roles: set[str]) -> None:
    assert outcome.returncode in (0, 1), f"exit {outcome.returncode}\n{outcome.stdout}\n{outcome.stderr}"
    steps = trace_steps(trace)
    assert roles <= {step["role"] for step in steps}, steps
    for step in steps:
        assert step["error"] is None, step
        if step["role"] in roles:  # an LM role, whose tokens the server reported (a validator phase has none)
            assert step["tokens"]["output"] > 0, step


@pytest.mark.parametrize("adapter", ["compact", None])
def test_refine_through_the_server(base_url, tmp_path, adapter):
    trace = tmp_path / "trace.jsonl"
    outcome = loops_command(base_url, "refine", "A haiku about rain", adapter=adapter, trace=trace)
    assert_ran_with_role_calls(outcome, trace, {"creator", "critic"})
    # The default adapter with --api-base is the one the small model answers in shape with: one request per
    # role call (DSPy's field markers took two, the second a JSON fallback). The first request with a schema
    # (the critic's: served as openai/smollm2, a small model, the creator writes plain text) is sent again once
    # when the server refuses OpenAI's spelling of the schema (llama-cpp-python's does), and a request sent is a
    # request counted.
    counts = [step["lm_calls"] for step in trace_steps(trace)]
    assert set(counts) <= {1, 2} and counts.count(2) <= 1, counts


def test_fix_through_the_server(base_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    check = shlex.join([sys.executable, "-c", "from solution import add; assert add(2, 3) == 5"])
    outcome = loops_command(base_url, "fix", "Write add(a, b) that returns the sum", "--test-command", check,
                            "--workspace", str(tmp_path / "work"), adapter="json", trace=trace)
    assert_ran_with_role_calls(outcome, trace, {"executor"})
    assert (tmp_path / "work" / "solution.py").is_file()


def test_direct_through_the_server(base_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    outcome = loops_command(base_url, "direct", "Three names for a coffee shop", adapter="compact", trace=trace)
    assert_ran_with_role_calls(outcome, trace, {"director", "executor", "evaluator"})


def test_a_loop_streams_the_served_models_plain_text_draft_as_the_server_sends_it(base_url):
    """llama-cpp-python's server streams server-sent events, and no usage: the run says so once."""
    lm = resolve(f"openai/{SERVED_MODEL}", api_base=base_url, max_tokens=40, temperature=0.0)
    loop = CreatorCriticIterator(max_iterations=1, critic=lambda requirements, draft, iteration: False)
    streamed = dspy.streamify(loop, stream_listeners=[StreamListener("draft")], async_streaming=False)
    with dspy.context(lm=lm):
        received = list(streamed(requirements="A slogan for a bakery, streamed."))
    pieces = [item.chunk for item in received if isinstance(item, StreamResponse)]
    result = received[-1]
    assert len(pieces) > 1 and "".join(pieces) == result.trace[0].outputs["draft"] != ""
    assert sum("streams no token usage" in warning for warning in result.warnings) == 1

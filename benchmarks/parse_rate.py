"""How often a role's answer parses on the first try: the embedded model in-process vs the same GGUF
behind llama-cpp-python's OpenAI-compatible server.

    .venv/bin/python -m benchmarks.parse_rate [--runs 10] [--max-iterations 2] [--adapter compact]

Runs the same Creator–Critic–Iterator loops (one per requirement, greedy decoding) twice: with
`loops.lm.local_lm()` and with `loops.lm.resolve("openai/smollm2", api_base=...)` against a server this
script starts on loopback (`llama_server`, needs the `server` extra). A role call parsed on the first
try when its trace step has `attempts == 1`: no parse retry (and no transient error) was needed.
Prints, for each side, the role calls that did and the share. Both sides use `--adapter` (the embedded
model's default, `compact`, unless told), so the only difference is the wire.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402

from loops import CreatorCriticIterator  # noqa: E402
from loops.lm import CONTEXT_TOKENS, model_path, resolve  # noqa: E402
from loops.lm.cores import FreeCores, fixed_threads  # noqa: E402
from loops.vocabulary.adapters import ADAPTERS  # noqa: E402

SERVED_MODEL = "smollm2"  # the name the server answers to (--model_alias): requests say openai/smollm2
REQUIREMENTS = [
    "A haiku about rain",
    "A two-sentence product description for a reusable water bottle",
    "A slogan for a bicycle shop",
    "Three names for a coffee shop",
    "A one-line birthday wish for a colleague",
    "A short apology email for a late delivery",
    "A tweet announcing a library's new opening hours",
    "A limerick about a cat",
    "A title for a blog post about saving energy at home",
    "Two sentences explaining what a thermometer does",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def llama_server(startup_s: float = 120.0) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server running the embedded GGUF on a free loopback port, as a
    subprocess; yields its base URL (`http://127.0.0.1:PORT/v1`) once `/v1/models` answers, and stops it
    on exit. Its model is `openai/smollm2` to LiteLLM."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    threads = fixed_threads() or FreeCores().update(wait=True)
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path()), "--model_alias", SERVED_MODEL,
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT_TOKENS),
               # The embedded model's thread rule, once at the start (loops.lm.cores): the server's default, every
               # core for prompts, spins at barriers against anything else running, and would make the comparison
               # unfair.
               "--n_threads", str(threads), "--n_threads_batch", str(threads)]
    with tempfile.TemporaryFile() as output:  # read back only to explain a server that would not start
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_until_serving(server, base_url, output, startup_s)
            yield base_url
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_serving(server: subprocess.Popen, base_url: str, output, startup_s: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < startup_s:
        if server.poll() is not None:
            output.seek(0)
            tail = output.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"llama_cpp.server exited with code {server.returncode} before serving "
                               f"(is the `server` extra installed? pip install -e '.[server]'):\n{tail}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"llama_cpp.server did not answer at {base_url}/models within {startup_s:.0f}s")


def first_try_calls(lm: dspy.BaseLM, requirements: list[str], max_iterations: int) -> tuple[int, int, int]:
    """(role calls that parsed on the first try, role calls, LM requests) over one loop per requirement."""
    first_try = total = requests = 0
    loop = CreatorCriticIterator(max_iterations=max_iterations)
    with dspy.context(lm=lm):
        for requirement in requirements:
            result = loop(requirements=requirement, timeout_s=None)
            requests += result.lm_calls
            for step in result.trace:
                total += 1
                first_try += step.attempts == 1 and step.error is None
            print(f"  {requirement[:50]:50} calls {len(result.trace)}  "
                  f"first try {sum(s.attempts == 1 and s.error is None for s in result.trace)}  "
                  f"tokens out {[(s.tokens or {}).get('output') for s in result.trace]}  "
                  f"seconds {[round(s.seconds, 1) for s in result.trace]}", flush=True)
    return first_try, total, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=len(REQUIREMENTS), help="loops per side (one per requirement)")
    parser.add_argument("--max-iterations", type=int, default=2)
    parser.add_argument("--adapter", choices=sorted(ADAPTERS), default="compact")
    parser.add_argument("--server-only", action="store_true", help="skip the in-process side")
    parser.add_argument("--server-defaults", action="store_true",
                        help="the server side as `loops --api-base` sends it: the adapter given, the server's own "
                             "temperature and the remote max_tokens")
    arguments = parser.parse_args()
    requirements = [REQUIREMENTS[i % len(REQUIREMENTS)] for i in range(arguments.runs)]
    settings = {"adapter": arguments.adapter, "temperature": 0.0, "max_tokens": 512}  # the embedded model's own

    sides = []
    if not arguments.server_only:
        print(f"in-process (local, adapter {arguments.adapter}):", flush=True)
        started = time.monotonic()
        sides.append(("in-process", first_try_calls(resolve("local", **settings), requirements,
                                                    arguments.max_iterations), time.monotonic() - started))
    if arguments.server_defaults:
        settings = {"adapter": arguments.adapter}
    with llama_server() as base_url:
        print(f"through llama-cpp-python's server at {base_url} (openai/{SERVED_MODEL}, adapter {arguments.adapter}):",
              flush=True)
        started = time.monotonic()
        # Uncached like the embedded model: DSPy's cache would answer a rerun without asking the server.
        served_lm = resolve(f"openai/{SERVED_MODEL}", api_base=base_url, **settings).copy(cache=False)
        sides.append(("server", first_try_calls(served_lm, requirements, arguments.max_iterations),
                      time.monotonic() - started))

    print(f"\nrole calls parsed on the first try ({arguments.runs} Creator-Critic-Iterator runs, "
          f"max_iterations={arguments.max_iterations}, adapter {arguments.adapter}, "
          f"{'the server side with the CLI defaults' if arguments.server_defaults else 'temperature 0'}):")
    for name, (first_try, total, requests), seconds in sides:
        share = first_try / total if total else 0.0
        print(f"  {name:10}  {first_try:3}/{total:<3}  {share:6.1%}   LM requests {requests} "
              f"({requests / total if total else 0:.2f} per role call)   ({seconds:.0f}s)")


if __name__ == "__main__":
    main()

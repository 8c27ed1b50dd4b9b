"""Loops completed per second by `loops.batch`, against a loopback LM server that takes 50 ms per answer.

The server (a separate process, asyncio, one answer every Creator–Critic role parses) stands in for an
LM server; each loop is a Creator–Critic–Iterator run of two LM calls (creator, an approving critic), through
the LM `loops.lm.resolve(model, api_base=...)` makes, as `--api-base` does.
The ideal is latency-bound: `concurrency / (2 calls x 50 ms)` loops per second. Printed per backend and
concurrency: loops/s, and its share of the ideal.

    .venv/bin/python -m benchmarks.batch_throughput                      # asyncio at 16, 64, 256; ray at 16
    .venv/bin/python -m benchmarks.batch_throughput --backends asyncio --concurrency 256 --loops 2048
    .venv/bin/python -m benchmarks.batch_throughput --floor    # CPU per call with no server at all

`--floor` measures what no transport can save: CPU microseconds per call of a bare `dspy.Predict`
(ChatAdapter) and of a Creator–Critic role call, with an LM whose engine returns a fixed answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALLS_PER_LOOP = 2
SERVER = r'''
import asyncio, json, sys
LATENCY = float(sys.argv[1])
FIELDS = {"reasoning": "plan", "draft": "a draft", "accuracy_passed": True, "completeness_passed": True,
          "quality_passed": True, "feedback": "", "approved": True}
CONTENT = "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in FIELDS.items()) + "\n\n[[ ## completed ## ]]"
BODY = json.dumps({"id": "1", "object": "chat.completion", "created": 1, "model": "loopback",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": CONTENT}}],
                   "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}).encode()
# Head and body in one write: no Nagle stall (asyncio sets TCP_NODELAY too), as real LM servers answer.
ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(BODY)) + BODY
async def serve(reader, writer):
    # HTTP/1.1 keep-alive: each request is a head and a content-length body; every one gets ANSWER.
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            await asyncio.sleep(LATENCY)
            writer.write(ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
'''


def measure(backend: str, concurrency: int, count: int, api_base: str) -> dict[str, float]:
    import dspy

    import loops.batch
    import loops.lm
    from loops import CreatorCriticIterator, RetryPolicy

    lm = loops.lm.resolve("openai/loopback", api_base=api_base).copy(cache=False)
    examples = [{"id": n, "requirements": f"note {n}"} for n in range(count)]
    with tempfile.TemporaryDirectory() as folder, dspy.context(lm=lm):
        summary = loops.batch.run(CreatorCriticIterator(retry=RetryPolicy(backoff_s=0)), examples,
                                  out=Path(folder) / "results.jsonl", backend=backend, concurrency=concurrency,
                                  progress=False)
    return {"loops_per_s": summary.per_second, "failed": summary.failed, "succeeded": summary.succeeded}


class _FixedAnswer:
    """An engine, sync and async, that answers every request with the server's answer, at once."""

    def __init__(self, content: str):
        from dspy.lm15 import Message, Response, TextPart, Usage

        self.response = Response(id=None, model="fixed", message=Message.assistant([TextPart(content)]),
                                 finish_reason="stop", usage=Usage(input_tokens=5, output_tokens=5))

    def complete(self, request):
        return self.response


class _AsyncFixedAnswer(_FixedAnswer):
    async def complete(self, request):
        return self.response


def floor(calls: int = 400, rounds: int = 5) -> dict[str, float]:
    """Median CPU microseconds per call, with no transport: a bare Predict, sync and async, and a loop's role
    call (half the CPU of a two-call Creator–Critic loop)."""
    import asyncio
    import statistics

    import dspy

    from loops import CreatorCriticIterator, RetryPolicy

    # The server's own answer, which every Creator–Critic role parses.
    namespace: dict = {}
    exec(SERVER.split("BODY = ")[0].replace("LATENCY = float(sys.argv[1])", ""), namespace)
    content = namespace["CONTENT"]
    lm = dspy.LM("openai/fixed", engine=_FixedAnswer(content), async_engine=_AsyncFixedAnswer(content), cache=False)
    predict = dspy.Predict("requirements -> draft")
    loop = CreatorCriticIterator(retry=RetryPolicy(backoff_s=0))

    def sync_predict() -> None:
        for n in range(calls):
            predict(requirements=f"note {n}")

    def async_predict() -> None:
        async def run() -> None:
            for n in range(calls):
                await predict.acall(requirements=f"note {n}")
        asyncio.run(run())

    def role_calls() -> None:
        async def run() -> None:
            for n in range(calls // 2):
                await loop.acall(requirements=f"note {n}")
        asyncio.run(run())

    cases = {"dspy.Predict, sync": sync_predict, "dspy.Predict, async": async_predict,
             "loops role call, async": role_calls}
    found: dict[str, list[float]] = {name: [] for name in cases}
    with dspy.context(lm=lm):
        for case in cases.values():
            case()  # warm-up
        for _ in range(rounds):  # interleaved, so that a busy neighbour slows every case alike
            for name, case in cases.items():
                started = time.process_time()
                case()
                found[name].append((time.process_time() - started) / calls * 1e6)
    return {name: statistics.median(values) for name, values in found.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="asyncio,ray")
    parser.add_argument("--concurrency", default="16,64,256")
    parser.add_argument("--ray-concurrency", default="16", help="concurrencies for the ray backend")
    parser.add_argument("--loops", type=int, default=None, help="loops per measurement (default: 4 x concurrency, "
                        "at least 128)")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per LM answer (default: 0.05)")
    parser.add_argument("--floor", action="store_true", help="only the CPU per call with no transport")
    args = parser.parse_args(argv)
    if args.floor:
        for name, microseconds in floor().items():
            print(f"{name:<24} {microseconds:6.0f} us CPU per call  (<= {1e6 / microseconds:,.0f} calls/s per core)")
        return

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.latency)], stdout=subprocess.PIPE, text=True)
    try:
        api_base = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        rows = []
        for backend in args.backends.split(","):
            levels = args.ray_concurrency if backend == "ray" else args.concurrency
            if backend == "ray":
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            for concurrency in (int(level) for level in levels.split(",")):
                count = args.loops or max(128, 4 * concurrency)
                measure(backend, concurrency, min(count, 2 * concurrency), api_base)  # warm-up: imports, pools
                started = time.monotonic()
                found = measure(backend, concurrency, count, api_base)
                ideal = concurrency / (CALLS_PER_LOOP * args.latency)
                rows.append({"backend": backend, "concurrency": concurrency, "loops": count,
                             "loops_per_s": round(found["loops_per_s"], 1), "ideal": round(ideal, 1),
                             "share_of_ideal": round(found["loops_per_s"] / ideal, 3),
                             "failed": found["failed"], "seconds": round(time.monotonic() - started, 1)})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.kill()
    print(f"\n{'backend':<8} {'concurrency':>11} {'loops/s':>9} {'ideal':>8} {'share':>7}")
    for row in rows:
        print(f"{row['backend']:<8} {row['concurrency']:>11} {row['loops_per_s']:>9} {row['ideal']:>8} "
              f"{row['share_of_ideal']:>7.1%}")


if __name__ == "__main__":
    main()

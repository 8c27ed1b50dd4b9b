"""Loops per second and per CPU-second by `loops.batch`, against a loopback LM server that takes 50 ms per answer,
with DSPy's own ceiling measured alongside.

The server (a separate process, asyncio, one answer every Creator–Critic role parses) stands in for an LM
server; each loop is a Creator–Critic–Iterator run of two LM calls (creator, an approving critic), through the
LM `loops.lm.resolve(model, api_base=...)` makes, as `--api-base` does. One run prints four figures, each the
median of `--rounds` rounds (the cases interleaved within a round, so that a busy neighbour slows all alike):

1. latency-bound, asyncio, 16 loops at once: loops/s against the ideal `16 / (2 calls x 50 ms)`, beside DSPy's
   own (its bare modules, below, 16 at once);
2. CPU-bound, asyncio, 256 loops at once: loops per CPU-second of this process against DSPy's ceiling,
   `1 / (CPU per call of the loop's own DSPy modules, bare: ChainOfThought(CreatorSignature) and
   Predict(CriticSignature), through acall, 256 at once, same server)`;
3. latency-bound, Ray, 16 loops over 2 actors: loops/s (start-up excluded, reported apart) against the ideal;
4. CPU-bound, Ray, 256 loops over 2 actors: loops per CPU-second spent in the actors against (2)'s.

    .venv/bin/python -m benchmarks.batch_throughput              # the four figures, 3 rounds
    .venv/bin/python -m benchmarks.batch_throughput --rounds 1 --backends asyncio
    .venv/bin/python -m benchmarks.batch_throughput --floor      # CPU per call with no server at all

The Ray instance is started once, on 127.0.0.1, and shared by the rounds; its start-up and each batch's
(its actors building the program and the LM) are printed apart. `--floor` measures what no transport can
save: CPU microseconds per call of a bare `dspy.Predict` and of a loop's role call, with an LM whose engine
returns a fixed answer at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
# (name, backend, loops at once): the four measured batches of a round.
CASES = (("asyncio, latency-bound", "asyncio", 16), ("asyncio, CPU-bound", "asyncio", 256),
         ("ray, latency-bound", "ray", 16), ("ray, CPU-bound", "ray", 256))


def batch(backend: str, concurrency: int, count: int, api_base: str) -> Any:
    """One `loops.batch.run` of `count` Creator–Critic loops: its summary, and the CPU seconds this process spent
    (for Ray, the driver's: handing out the examples and writing their records)."""
    import dspy

    import loops.batch
    import loops.lm
    from loops import CreatorCriticIterator, RetryPolicy

    lm = loops.lm.resolve("openai/loopback", api_base=api_base, adapter="chat").copy(cache=False)
    examples = [{"id": n, "requirements": f"note {n}"} for n in range(count)]
    with tempfile.TemporaryDirectory() as folder, dspy.context(lm=lm):
        driver_cpu = time.process_time()
        summary = loops.batch.run(CreatorCriticIterator(retry=RetryPolicy(backoff_s=0)), examples,
                                  out=Path(folder) / "results.jsonl", backend=backend, concurrency=concurrency,
                                  progress=False)
        driver_cpu = time.process_time() - driver_cpu
    assert summary.succeeded == count, summary
    return summary, driver_cpu


def bare_modules(api_base: str, concurrency: int, loops_count: int) -> tuple[float, float]:
    """DSPy's own floor: a loop's worth of calls of its two DSPy modules, bare (no loops runtime), through
    `acall`, `concurrency` at once, against the same server with the same LM. Loops' worth per second of wall
    time, and per CPU-second of this process."""
    import dspy

    import loops.lm
    from loops.signatures import CreatorSignature, CriticSignature

    lm = loops.lm.resolve("openai/loopback", api_base=api_base, adapter="chat").copy(cache=False)
    creator, critic = dspy.ChainOfThought(CreatorSignature), dspy.Predict(CriticSignature)
    empty = dspy.History(messages=[])

    async def calls(count: int) -> None:
        queue = iter(range(count))

        async def slot() -> None:
            for n in queue:
                draft = await creator.acall(requirements=f"note {n}", context="", history=empty)
                await critic.acall(requirements=f"note {n}", draft=draft.draft, history=empty)
        await asyncio.gather(*(slot() for _ in range(concurrency)))

    with dspy.context(lm=lm):
        asyncio.run(calls(concurrency))  # warm-up: the session, the adapters' caches
        started, cpu_started = time.monotonic(), time.process_time()
        asyncio.run(calls(loops_count))
        return loops_count / (time.monotonic() - started), loops_count / (time.process_time() - cpu_started)


def one_round(api_base: str, loops_count: dict[int, int], backends: list[str]) -> dict[str, float]:
    """The figures of one round: each case's loops/s (latency-bound) or loops per CPU-second (CPU-bound)."""
    found = {"dspy, latency-bound": bare_modules(api_base, 16, loops_count[16])[0],
             "dspy ceiling": bare_modules(api_base, 256, loops_count[256])[1]}
    for name, backend, concurrency in CASES:
        if backend not in backends:
            continue
        summary, driver_cpu = batch(backend, concurrency, loops_count[concurrency], api_base)
        if concurrency == 16:
            found[name] = summary.per_second
        else:
            found[name] = summary.finished / summary.cpu_seconds
        if backend == "ray":
            found[f"{name} start-up s"] = summary.startup_seconds
            found[f"{name} driver ms/loop"] = 1000 * driver_cpu / summary.finished
    return found


def report(rounds: list[dict[str, float]], latency: float, ray_start: float | None) -> None:
    """Each figure's median over the rounds, and the median of its ratio to its reference within each round."""
    ideal = 16 / (CALLS_PER_LOOP * latency)
    goals = {"dspy, latency-bound": ("ideal", None), "asyncio, latency-bound": ("ideal", None),
             "asyncio, CPU-bound": ("DSPy ceiling", "dspy ceiling"),
             "ray, latency-bound": ("ideal", None), "ray, CPU-bound": ("asyncio, CPU-bound", "asyncio, CPU-bound")}
    print(f"\nmedians of {len(rounds)} rounds (server latency {latency * 1000:.0f} ms, {CALLS_PER_LOOP} calls per "
          "loop; goal: each share >= 80 %):")
    ceiling = statistics.median(found["dspy ceiling"] for found in rounds)
    print(f"  {'DSPy ceiling (its bare modules, 256 at once)':<46} {ceiling:8.1f} loops/CPU-s")
    for name, (against, reference) in goals.items():
        if name not in rounds[0]:
            continue
        value = statistics.median(found[name] for found in rounds)
        base = statistics.median(ideal if reference is None else found[reference] for found in rounds)
        share = statistics.median(found[name] / (ideal if reference is None else found[reference]) for found in rounds)
        unit = "loops/s" if "latency" in name else "loops/CPU-s"
        print(f"  {name:<46} {value:8.1f} {unit:<12} vs {against} {base:.1f}: {share:6.1%}")
    for name in (name for name in rounds[0] if name.endswith("driver ms/loop")):
        print(f"  {name:<46} {statistics.median(found[name] for found in rounds):8.2f} ms of the driver's CPU per loop")
    startups = [found[name] for found in rounds for name in found if name.endswith("start-up s")]
    if ray_start is not None and startups:
        print(f"  ray start-up, apart: ray.init {ray_start:.1f} s (once); each batch's actors {min(startups):.1f}-"
              f"{max(startups):.1f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="asyncio,ray")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the figures are their medians (default: 3)")
    parser.add_argument("--loops", type=int, default=1024, help="loops of a CPU-bound batch (default: 1024; a "
                        "latency-bound one runs half as many)")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per LM answer (default: 0.05)")
    parser.add_argument("--floor", action="store_true", help="only the CPU per call with no transport")
    args = parser.parse_args(argv)
    if args.floor:
        for name, microseconds in floor().items():
            print(f"{name:<24} {microseconds:6.0f} us CPU per call  (<= {1e6 / microseconds:,.0f} calls/s per core)")
        return
    backends = args.backends.split(",")
    ray_start = _start_ray() if "ray" in backends else None
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.latency)], stdout=subprocess.PIPE, text=True)
    try:
        api_base = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        loops_count = {16: max(64, args.loops // 2), 256: args.loops}
        for backend in backends:  # warm-up: imports, the session, the adapters' caches
            batch(backend, 16, 64, api_base)
        rounds = []
        for number in range(args.rounds):
            rounds.append(one_round(api_base, loops_count, backends))
            print(f"round {number + 1}: " + json.dumps({name: round(value, 1) for name, value in rounds[-1].items()}),
                  flush=True)
    finally:
        server.kill()
    report(rounds, args.latency, ray_start)


def _start_ray() -> float:
    """A local Ray instance on 127.0.0.1 (as loops.batch starts one), shared by every round: its start-up time."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    started = time.monotonic()
    ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    return time.monotonic() - started


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


if __name__ == "__main__":
    main()

"""Faults a server injects, and what the loop runtime makes of them: no run lost, the right stop reason,
`lm_calls` equal to the requests the server received, and the deadline kept.

A loopback OpenAI-compatible server (`tests/loops/fake_openai.py`'s `FaultyOpenAI`) answers every request in
shape but one per run, at a seeded random position among the run's first four requests, which gets the
fault: a 503, a 429 with Retry-After in seconds or as an HTTP date, no answer until long after the deadline,
a body cut short, a body that is not JSON, a refusal of the JSON schema as llama-cpp-python's server
refuses it, an answer out of shape. Each run is a `CreatorCriticIterator` of two iterations (four role
calls; the server never approves) through `loops.lm.resolve("openai/x", api_base=...)` (loops' server
engine; `--engine dspy`: DSPy's own engine, which the runtime asks for and bounds itself), synchronously
(`forward`) and asynchronously (`acall`), each with its own `api_base` so the server counts its requests
apart, DSPy's cache off.

    .venv/bin/python -m benchmarks.faults [--runs 20] [--timeout 2] [--engine server|dspy] [--seed 0]

Per fault kind and mode it prints the runs; the runs lost (the call raised, or returned without its
work: a `final` that is none of the drafts its trace shows); the wrong stop reasons (a hang must end the
run with "timeout", any other fault be survived to "max_iterations", except that DSPy's own engine does
not retry a body that is not JSON: "error"); the runs whose `lm_calls` differ from the server's count;
and the worst overrun of the run's timeout, in wall-clock time from the call to its return.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402

import loops.lm.server  # noqa: E402
from loops import CreatorCriticIterator, RetryPolicy  # noqa: E402
from loops.lm import resolve  # noqa: E402
from tests.loops.fake_openai import FAULTS, FaultyOpenAI, faulty_openai  # noqa: E402

MODES = ("sync", "async")
ROLE_CALLS = 4  # creator, critic, iterator, critic


@dataclass
class Tally:
    runs: int = 0
    lost: int = 0
    wrong_stop: int = 0
    miscounted: int = 0
    worst_overrun_s: float = -math.inf


def model(server: FaultyOpenAI, tenant: str, engine: str) -> dspy.BaseLM:
    if engine == "server":
        lm = resolve("openai/x", api_base=server.base_url(tenant), adapter="json")
    else:
        lm = resolve(dspy.LM("openai/x", api_base=server.base_url(tenant), api_key="k", num_retries=0),
                     adapter="json")
    lm.cache = False
    return lm


def one_run(server: FaultyOpenAI, fault: str, mode: str, number: int, rng: random.Random, timeout_s: float,
            engine: str) -> tuple[dspy.Prediction | None, float, str]:
    tenant = f"{fault}-{mode}-{number}"
    server.faults[(tenant, rng.randint(1, ROLE_CALLS))] = fault
    lm = model(server, tenant, engine)
    module = CreatorCriticIterator(max_iterations=2, retry=RetryPolicy(backoff_s=0.05))
    started = time.monotonic()
    try:
        with dspy.context(lm=lm):
            if mode == "sync":
                result = module(requirements="a haiku about rain", timeout_s=timeout_s)
            else:
                result = asyncio.run(_acall(module, lm, timeout_s))
    except Exception as error:  # a lost run: what the benchmark counts
        print(f"  {tenant}: raised {type(error).__name__}: {error}")
        result = None
    finally:
        if mode == "sync":
            lm.close()
    return result, time.monotonic() - started, tenant


async def _acall(module: CreatorCriticIterator, lm: dspy.BaseLM, timeout_s: float) -> dspy.Prediction:
    try:
        return await module.acall(requirements="a haiku about rain", timeout_s=timeout_s)
    finally:
        if not isinstance(lm, loops.lm.ServerLM):
            await lm.aclose()


def measure(server: FaultyOpenAI, fault: str, mode: str, runs: int, rng: random.Random, timeout_s: float,
            engine: str) -> Tally:
    tally = Tally()
    expected = "timeout" if fault == "hang" else "max_iterations"
    if fault == "malformed" and engine == "dspy":
        expected = "error"  # DSPy does not retry a 200 that is not JSON ("may or may not have been served")
    for number in range(runs):
        result, seconds, tenant = one_run(server, fault, mode, number, rng, timeout_s, engine)
        tally.runs += 1
        tally.worst_overrun_s = max(tally.worst_overrun_s, seconds - timeout_s)
        if result is None or not work_kept(result):
            tally.lost += 1
            continue
        if result.stop_reason != expected:
            tally.wrong_stop += 1
            print(f"  {tenant}: stopped with {result.stop_reason!r}, not {expected!r}: {result.warnings[-1:]}")
        if result.lm_calls != server.received[tenant]:
            tally.miscounted += 1
            print(f"  {tenant}: lm_calls={result.lm_calls}, the server received {server.received[tenant]}")
    return tally


def work_kept(result: dspy.Prediction) -> bool:
    """Whether the run returned one of the drafts it produced (the pattern's best: the last one the critic
    judged), or none when the creator never answered."""
    drafts = [step.outputs.get("draft", step.outputs.get("improved_draft")) for step in result.trace
              if step.outputs and step.role in ("creator", "iterator")]
    return result.final in drafts if drafts else result.final is None


def report(rows: list[tuple[str, str, Tally]], out: Callable[[str], None] = print) -> None:
    out(f"{'fault':<18} {'mode':<6} {'runs':>5} {'lost':>5} {'wrong stop':>11} {'lm_calls != server':>19} "
        f"{'worst overrun':>14}")
    for fault, mode, tally in rows:
        overrun = f"{tally.worst_overrun_s:+.3f} s"
        out(f"{fault:<18} {mode:<6} {tally.runs:>5} {tally.lost:>5} {tally.wrong_stop:>11} {tally.miscounted:>19} "
            f"{overrun:>14}")
    total = Tally(sum(t.runs for *_, t in rows), sum(t.lost for *_, t in rows), sum(t.wrong_stop for *_, t in rows),
                  sum(t.miscounted for *_, t in rows), max(t.worst_overrun_s for *_, t in rows))
    out(f"{'all':<18} {'':<6} {total.runs:>5} {total.lost:>5} {total.wrong_stop:>11} {total.miscounted:>19} "
        f"{total.worst_overrun_s:>+12.3f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per fault kind and mode")
    parser.add_argument("--timeout", type=float, default=2.0, help="each run's timeout_s")
    parser.add_argument("--engine", choices=("server", "dspy"), default="server")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--faults", nargs="*", choices=sorted(FAULTS), default=list(FAULTS))
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    rows = []
    with faulty_openai() as server:
        server.hang_s = 60
        server.retry_after_s = 1
        for fault in args.faults:
            for mode in MODES:
                rows.append((fault, mode, measure(server, fault, mode, args.runs, rng, args.timeout, args.engine)))
                print(f"{fault} {mode}: done", flush=True)
    loops.lm.server._schema_spelling.clear()
    print(f"\n{args.runs} runs per fault kind and mode, timeout_s={args.timeout}, engine={args.engine} "
          "(overrun: wall time from call to return less timeout_s; negative: the run ended before its timeout)")
    report(rows)


if __name__ == "__main__":
    main()

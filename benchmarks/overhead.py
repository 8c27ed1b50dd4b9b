"""What the loop runtime costs: `CreatorCriticIterator` against a minimal correct Creator–Critic loop.

Both run the same predictors and signatures against the same zero-latency scripted LM (creator,
critic rejects, iterator, critic approves: four LM calls a run), so the difference is the runtime's
own work: budgets, per-role histories, the trace, retries. Measured in CPU time, the candidates
interleaved round by round in one process, and the median of the per-round ratios reported, since
wall-clock blocks cannot tell 1.05 from 1.10 on a shared 2-core machine.

    .venv/bin/python -m benchmarks.overhead [--rounds 15] [--runs 40] [--age 600] [--concurrent 128]
        [--lines fresh,aged,unaware,openai,floor,tracing,concurrent]

The minimal loop is what a user writes who wants a correct loop and nothing more: the same three predictors,
each role's history kept as its signature's fields and passed as its `dspy.History`, the critic's verdict
taken, at most three revisions. It pays DSPy's own per-call work on a role with a history (the history-less
signature and the system message built again on every call), which the runtime does once per signature
(`loops.vocabulary.adapters.historyless_once`): that, not a shortcut, is why the runtime costs less than it.

- fresh: a new module (and new minimal predictors) for every batch of runs;
- aged: the same instances after `--age` runs each;
- concurrent: `--concurrent` simultaneous `acall`s against an LM that answers after 50 ms;
- fresh, unaware: as fresh, on an engine that does not ask the run before each request itself
  (`loops.vocabulary.context.RUN_AWARE`; DSPy's own engines, a hosted model's): the runtime hands each role's predictor
  the LM gated at the object (`_GatedLM` in `loops/running/drivers.py`) and bounds each call by the deadline on a worker
  thread. The lines above use a run-aware engine, as loops' embedded and server engines are;
- openai/: fresh, aged and concurrent with the LM a user names a hosted model by, `dspy.LM("openai/...")`,
  on a loopback OpenAI-compatible server run in a child process (its CPU time is not counted): DSPy's own
  engine, gated as "unaware" is. Both candidates pay DSPy's client (building the request, HTTP, pricing the
  answer) alike, so this ratio is nearer 1 than the zero-latency lines by construction.
- floor: no runtime at all, on the zero-latency engine and on `openai/`: the minimal loop with its role calls
  formatted as the runtime formats them (`loops.vocabulary.adapters.historyless_once`), i.e. DSPy's own per-call work as
  the runtime pays it, and nothing else (no budgets, no gate, no deadline, no trace, no history object). It is
  the least the module's ratio on that line can be while its role calls are DSPy's predictors: a goal below it
  asks for less DSPy work per call than DSPy does, not for a leaner runtime.
- tracing: the same runs with `loops.observers.tracing` on, its spans kept by the SDK's in-memory exporter, interleaved
  with runs with it off: what tracing adds per role call (its `invoke_agent` span and the `chat` span of its
  LM request, the run's `invoke_workflow` span shared among its four calls), in CPU microseconds. Tracing off
  is no observer at all: the lines above are the runtime with tracing off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Message, Response, TextPart, Usage  # noqa: E402

from loops import CreatorCriticIterator  # noqa: E402
from loops.signatures import CreatorSignature, CriticSignature, IteratorSignature  # noqa: E402
from loops.vocabulary.adapters import historyless_once  # noqa: E402
from loops.vocabulary.context import before_request  # noqa: E402
from tests.loops.fake_openai import chat_completion  # noqa: E402

LATENCY_S = 0.05


def _answer(request: Any) -> str:
    system = request.system if isinstance(request.system, str) else ""
    return _answer_to(system, request.messages[-1].text or "")


def _answer_to(system: str, prompt: str) -> str:
    """The role's answer (its system message names it), in ChatAdapter's format; the critic approves a revised
    draft only."""
    if "CREATOR" in system:
        fields = {"reasoning": "plan", "draft": "first draft"}
    elif "ITERATOR" in system:
        fields = {"improved_draft": "revised draft"}
    else:
        ok = "revised draft" in prompt.split("[[ ## draft ## ]]")[-1]
        fields = {"accuracy_passed": ok, "completeness_passed": ok, "quality_passed": ok,
                  "feedback": "" if ok else "be more specific", "approved": ok}
    return "\n\n".join([*(f"[[ ## {name} ## ]]\n{str(value).lower() if isinstance(value, bool) else value}"
                          for name, value in fields.items()), "[[ ## completed ## ]]"])


def _response(request: Any) -> Response:
    return Response(id=None, model="scripted", message=Message.assistant([TextPart(_answer(request))]),
                    finish_reason="stop", usage=Usage(input_tokens=10, output_tokens=5))


class ScriptedEngine:
    def __init__(self, latency_s: float = 0.0, run_aware: bool = True):
        self.latency_s = latency_s
        self.loops_run_aware = run_aware

    def complete(self, request: Any) -> Response:
        if self.loops_run_aware:
            before_request()
        return _response(request)

    def __deepcopy__(self, memo: dict) -> ScriptedEngine:
        return self


class AsyncScriptedEngine(ScriptedEngine):
    async def complete(self, request: Any) -> Response:
        if self.loops_run_aware:
            before_request()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return _response(request)


def scripted_lm(latency_s: float = 0.0, run_aware: bool = True) -> dspy.LM:
    engine = ScriptedEngine(latency_s, run_aware)
    return dspy.LM("scripted/bench", engine=engine, async_engine=AsyncScriptedEngine(latency_s, run_aware),
                   cache=False, num_retries=0)


class _OpenAIHandler(http.server.BaseHTTPRequestHandler):
    """An OpenAI chat completions endpoint answering as `_answer_to` does, after `latency_s`."""

    protocol_version = "HTTP/1.1"  # keep-alive: the client's connection pool is used as with a hosted model
    disable_nagle_algorithm = True  # the body is sent at once after the headers, not after a delayed ACK
    latency_s = 0.0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        messages = body["messages"]
        system = next((message["content"] for message in messages if message["role"] == "system"), "")
        if self.latency_s:
            time.sleep(self.latency_s)
        data = json.dumps(chat_completion(body, _answer_to(system, messages[-1]["content"]))).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the concurrent line opens a connection per call in flight


def serve(latency_s: float) -> None:
    """Serve `_OpenAIHandler` on a free loopback port, which is printed, until stdin closes: the server of the
    `openai/` lines, in a process of its own, so that its CPU time is not counted as the loop's."""
    _OpenAIHandler.latency_s = latency_s
    server = _Server(("127.0.0.1", 0), _OpenAIHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


@contextlib.contextmanager
def openai_server(latency_s: float = 0.0) -> Iterator[str]:
    """The base URL of a loopback OpenAI-compatible server (`serve`) running in a child process, stopped after."""
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.overhead", "--serve", str(latency_s)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        port = int(child.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()


def openai_lm(base_url: str) -> dspy.LM:
    """An `openai/` model string, as a user names a hosted model, on the loopback server: DSPy picks its engine,
    which does not ask the run before its requests (the runtime gates them)."""
    return dspy.LM("openai/gpt-4o-mini", api_base=base_url, api_key="loopback", cache=False, num_retries=0)


class MinimalLoop:
    """A minimal correct Creator–Critic loop: per-role histories keyed by each signature's fields, the
    draft the critic approves, a cap on revisions. Nothing else."""

    def __init__(self) -> None:
        self.creator = dspy.ChainOfThought(CreatorSignature)
        self.critic = dspy.Predict(CriticSignature)
        self.iterator = dspy.Predict(IteratorSignature)

    def __call__(self, requirements: str, max_iterations: int = 3) -> str:
        turns: dict[str, list[dict[str, Any]]] = {"creator": [], "critic": [], "iterator": []}

        def call(role: str, **inputs: Any) -> dspy.Prediction:
            result = getattr(self, role)(**inputs, history=dspy.History(messages=list(turns[role])))
            turns[role].append({**inputs, **result})
            return result

        draft = call("creator", requirements=requirements, context="").draft
        for _ in range(max_iterations):
            verdict = call("critic", requirements=requirements, draft=draft)
            if verdict.approved:
                break
            draft = call("iterator", requirements=requirements, draft=draft, feedback=verdict.feedback).improved_draft
        return draft

    async def acall(self, requirements: str, max_iterations: int = 3) -> str:
        turns: dict[str, list[dict[str, Any]]] = {"creator": [], "critic": [], "iterator": []}

        async def call(role: str, **inputs: Any) -> dspy.Prediction:
            result = await getattr(self, role).acall(**inputs, history=dspy.History(messages=list(turns[role])))
            turns[role].append({**inputs, **result})
            return result

        draft = (await call("creator", requirements=requirements, context="")).draft
        for _ in range(max_iterations):
            verdict = await call("critic", requirements=requirements, draft=draft)
            if verdict.approved:
                break
            draft = (await call("iterator", requirements=requirements, draft=draft,
                                feedback=verdict.feedback)).improved_draft
        return draft


class NoRuntimeLoop(MinimalLoop):
    """The minimal loop with its role calls formatted as the runtime formats them (`historyless_once`, the
    context's adapter): DSPy's per-call work as the runtime pays it, with no runtime around it (the `floor` line)."""

    def __call__(self, requirements: str, max_iterations: int = 3) -> str:
        with dspy.context(adapter=historyless_once(dspy.settings.adapter or dspy.ChatAdapter())):
            return super().__call__(requirements, max_iterations)


def _module() -> CreatorCriticIterator:
    return CreatorCriticIterator(max_iterations=3)


def cpu_seconds(batch: Callable[[], Any]) -> float:
    """The CPU time of `batch`, which starts with no garbage of an earlier batch left to collect: each
    batch pays for collecting what it allocates itself, not what the other candidate left behind."""
    gc.collect()
    started = time.process_time()
    batch()
    return time.process_time() - started


def _check(module: CreatorCriticIterator, minimal: MinimalLoop) -> None:
    result = module(requirements="a slogan")
    assert (result.final, result.approved, result.lm_calls) == ("revised draft", True, 4), result
    assert minimal("a slogan") == "revised draft"


def median_ratio(rounds: int, measure_module: Callable[[], float], measure_minimal: Callable[[], float]) -> float:
    """The median over `rounds` of module time / minimal time, the two interleaved."""
    ratios = []
    for number in range(rounds):
        # Alternate which goes first, so neither always runs on a warmer (or busier) machine.
        if number % 2:
            module_s = measure_module()
            minimal_s = measure_minimal()
        else:
            minimal_s = measure_minimal()
            module_s = measure_module()
        ratios.append(module_s / minimal_s)
    return statistics.median(ratios)


def fresh(rounds: int, runs: int) -> float:
    def module_batch() -> float:
        module = _module()
        return cpu_seconds(lambda: [module(requirements="a slogan") for _ in range(runs)])

    def minimal_batch() -> float:
        minimal = MinimalLoop()
        return cpu_seconds(lambda: [minimal("a slogan") for _ in range(runs)])

    return median_ratio(rounds, module_batch, minimal_batch)


def floor(rounds: int, runs: int) -> float:
    """As `fresh`, the module replaced by `NoRuntimeLoop`: the floor of the module's `fresh` ratio."""
    def no_runtime_batch() -> float:
        loop = NoRuntimeLoop()
        return cpu_seconds(lambda: [loop("a slogan") for _ in range(runs)])

    def minimal_batch() -> float:
        minimal = MinimalLoop()
        return cpu_seconds(lambda: [minimal("a slogan") for _ in range(runs)])

    return median_ratio(rounds, no_runtime_batch, minimal_batch)


def aged(rounds: int, runs: int, age: int) -> float:
    module, minimal = _module(), MinimalLoop()
    for _ in range(age):
        module(requirements="a slogan")
        minimal("a slogan")
    return median_ratio(rounds, lambda: cpu_seconds(lambda: [module(requirements="a slogan") for _ in range(runs)]),
                         lambda: cpu_seconds(lambda: [minimal("a slogan") for _ in range(runs)]))


def concurrent(rounds: int, count: int, lm: dspy.BaseLM) -> float:
    module, minimal = _module(), MinimalLoop()

    async def module_runs() -> None:
        with dspy.context(lm=lm):
            results = await asyncio.gather(*(module.acall(requirements="a slogan") for _ in range(count)))
            await _closed(lm)
        assert all(result.final == "revised draft" for result in results)

    async def minimal_runs() -> None:
        with dspy.context(lm=lm):
            results = await asyncio.gather(*(minimal.acall("a slogan") for _ in range(count)))
            await _closed(lm)
        assert all(result == "revised draft" for result in results)

    return median_ratio(rounds, lambda: cpu_seconds(lambda: asyncio.run(module_runs())),
                         lambda: cpu_seconds(lambda: asyncio.run(minimal_runs())))


async def _closed(lm: dspy.BaseLM) -> None:
    """DSPy's async connections of `lm` closed on the event loop that opened them (each round runs its own)."""
    if isinstance(lm, dspy.LM) and isinstance(lm._engine_spec, str):
        await lm.aclose()


def tracing_cost(rounds: int, runs: int) -> tuple[float, float] | None:
    """Per role call, the CPU microseconds tracing adds and the traced/untraced ratio (medians of interleaved
    rounds); None without OpenTelemetry's SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    import loops.observers.tracing

    provider, memory = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    calls = 4 * runs  # creator, critic, iterator, critic: four role calls a run

    def batch(module: CreatorCriticIterator) -> float:
        return cpu_seconds(lambda: [module(requirements="a slogan") for _ in range(runs)])

    def traced(module: CreatorCriticIterator) -> float:
        loops.observers.tracing.enable(provider=provider)
        try:
            return batch(module)
        finally:
            loops.observers.tracing.disable()
            assert len(memory.get_finished_spans()) == runs * 9, len(memory.get_finished_spans())
            memory.clear()

    differences, ratios = [], []
    for number in range(rounds):
        module = _module()
        for _ in range(2):  # warm, so neither side pays the first call
            module(requirements="a slogan")
        if number % 2:
            on, off = traced(module), batch(module)
        else:
            off, on = batch(module), traced(module)
        differences.append((on - off) / calls * 1e6)
        ratios.append(on / off)
    return statistics.median(differences), statistics.median(ratios)


LINES = ("fresh", "aged", "unaware", "openai", "floor", "tracing", "concurrent")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=40, help="runs per batch (fresh and aged)")
    parser.add_argument("--age", type=int, default=600)
    parser.add_argument("--concurrent", type=int, default=128)
    parser.add_argument("--lines", default=",".join(LINES), help=f"the lines to measure, of {','.join(LINES)}")
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)  # the loopback server's child process
    args = parser.parse_args(argv)
    if args.serve is not None:
        return serve(args.serve)
    lines = set(args.lines.split(","))
    if lines - set(LINES):
        parser.error(f"unknown lines {sorted(lines - set(LINES))}; known: {','.join(LINES)}")
    rounds, runs, age = args.rounds, args.runs, args.age
    with dspy.context(lm=scripted_lm(), adapter=dspy.ChatAdapter()):
        _check(_module(), MinimalLoop())
        if "fresh" in lines:
            print(f"fresh:      {fresh(rounds, runs):.3f}x a minimal loop (CPU time, median of {rounds} interleaved "
                  f"rounds of {runs} runs)")
        if "aged" in lines:
            print(f"aged:       {aged(rounds, runs, age):.3f}x after {age} runs on the same instances")
    if "unaware" in lines:
        with dspy.context(lm=scripted_lm(run_aware=False), adapter=dspy.ChatAdapter()):
            print(f"fresh, unaware: {fresh(rounds, runs):.3f}x on an engine that does not ask the run itself")
    if "openai" in lines:
        with openai_server() as base_url, dspy.context(lm=openai_lm(base_url), adapter=dspy.ChatAdapter()):
            _check(_module(), MinimalLoop())
            print(f"openai/, fresh:      {fresh(rounds, runs):.3f}x, dspy.LM('openai/...') on a loopback server")
            print(f"openai/, aged:       {aged(rounds, runs, age):.3f}x after {age} runs")
        with openai_server(LATENCY_S) as base_url, dspy.context(adapter=dspy.ChatAdapter()):
            print(f"openai/, concurrent: {concurrent(max(3, rounds // 3), args.concurrent, openai_lm(base_url)):.3f}x "
                  f"with {args.concurrent} concurrent acalls, the server answering after {LATENCY_S * 1000:.0f} ms")
    if "floor" in lines:
        with dspy.context(lm=scripted_lm(run_aware=False), adapter=dspy.ChatAdapter()):
            assert NoRuntimeLoop()("a slogan") == "revised draft"
            print(f"floor:      {floor(rounds, runs):.3f}x with no runtime at all (DSPy's per-call work as the runtime "
                  "pays it), on the zero-latency engine")
        with openai_server() as base_url, dspy.context(lm=openai_lm(base_url), adapter=dspy.ChatAdapter()):
            print(f"openai/, floor:      {floor(rounds, runs):.3f}x with no runtime at all, dspy.LM('openai/...') on "
                  "a loopback server")
    if "tracing" in lines:
        with dspy.context(lm=scripted_lm(), adapter=dspy.ChatAdapter()):
            cost = tracing_cost(rounds, runs)
        if cost is None:
            print("tracing:    not measured (OpenTelemetry's SDK is not installed: pip install 'loops[tracing]')")
        else:
            print(f"tracing:    +{cost[0]:.0f} us of CPU per role call with loops.observers.tracing on (in-memory "
                  f"exporter), {cost[1]:.3f}x the same runs with it off (median of {rounds} interleaved rounds)")
    if "concurrent" in lines:
        with dspy.context(adapter=dspy.ChatAdapter()):
            print(f"concurrent: {concurrent(max(3, rounds // 3), args.concurrent, scripted_lm(LATENCY_S)):.3f}x with "
                  f"{args.concurrent} concurrent acalls on a {LATENCY_S * 1000:.0f} ms LM")
    return None


if __name__ == "__main__":
    main()

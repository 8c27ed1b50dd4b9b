"""What the loop runtime costs: `CreatorCriticIterator` against a minimal correct Creator–Critic loop.

Both run the same predictors and signatures against the same zero-latency scripted LM (creator,
critic rejects, iterator, critic approves: four LM calls a run), so the difference is the runtime's
own work: budgets, per-role histories, the trace, retries. Measured in CPU time, the candidates
interleaved round by round in one process, and the median of the per-round ratios reported, since
wall-clock blocks cannot tell 1.05 from 1.10 on a shared 2-core machine.

    .venv/bin/python -m benchmarks.overhead [--rounds 15] [--runs 40] [--age 600] [--concurrent 128]

- fresh: a new module (and new minimal predictors) for every batch of runs;
- aged: the same instances after `--age` runs each;
- concurrent: `--concurrent` simultaneous `acall`s against an LM that answers after 50 ms;
- fresh, unaware: as fresh, on an engine that does not ask the run before each request itself
  (`loops.context.RUN_AWARE`; DSPy's own engines, a hosted model's): the runtime asks for it through a DSPy
  callback, whose machinery runs on every call DSPy decorates, and bounds each call by the deadline on a
  worker thread. The other lines use a run-aware engine, as loops' embedded and server engines are.
- tracing: the same runs with `loops.tracing` on, its spans kept by the SDK's in-memory exporter, interleaved
  with runs with it off: what tracing adds per role call (its `invoke_agent` span and the `chat` span of its
  LM request, the run's `invoke_workflow` span shared among its four calls), in CPU microseconds. Tracing off
  is no observer at all: the lines above are the runtime with tracing off.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Message, Response, TextPart, Usage  # noqa: E402

from loops import CreatorCriticIterator  # noqa: E402
from loops.context import before_request  # noqa: E402
from loops.signatures import CreatorSignature, CriticSignature, IteratorSignature  # noqa: E402

LATENCY_S = 0.05


def _answer(request: Any) -> str:
    system = request.system if isinstance(request.system, str) else ""
    prompt = request.messages[-1].text or ""
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


def aged(rounds: int, runs: int, age: int) -> float:
    module, minimal = _module(), MinimalLoop()
    for _ in range(age):
        module(requirements="a slogan")
        minimal("a slogan")
    return median_ratio(rounds, lambda: cpu_seconds(lambda: [module(requirements="a slogan") for _ in range(runs)]),
                         lambda: cpu_seconds(lambda: [minimal("a slogan") for _ in range(runs)]))


def concurrent(rounds: int, count: int) -> float:
    module, minimal = _module(), MinimalLoop()
    lm = scripted_lm(LATENCY_S)

    async def module_runs() -> None:
        with dspy.context(lm=lm):
            results = await asyncio.gather(*(module.acall(requirements="a slogan") for _ in range(count)))
        assert all(result.final == "revised draft" for result in results)

    async def minimal_runs() -> None:
        with dspy.context(lm=lm):
            results = await asyncio.gather(*(minimal.acall("a slogan") for _ in range(count)))
        assert all(result == "revised draft" for result in results)

    return median_ratio(rounds, lambda: cpu_seconds(lambda: asyncio.run(module_runs())),
                         lambda: cpu_seconds(lambda: asyncio.run(minimal_runs())))


def tracing_cost(rounds: int, runs: int) -> tuple[float, float] | None:
    """Per role call, the CPU microseconds tracing adds and the traced/untraced ratio (medians of interleaved
    rounds); None without OpenTelemetry's SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    import loops.tracing

    provider, memory = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    calls = 4 * runs  # creator, critic, iterator, critic: four role calls a run

    def batch(module: CreatorCriticIterator) -> float:
        return cpu_seconds(lambda: [module(requirements="a slogan") for _ in range(runs)])

    def traced(module: CreatorCriticIterator) -> float:
        loops.tracing.enable(provider=provider)
        try:
            return batch(module)
        finally:
            loops.tracing.disable()
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=40, help="runs per batch (fresh and aged)")
    parser.add_argument("--age", type=int, default=600)
    parser.add_argument("--concurrent", type=int, default=128)
    args = parser.parse_args(argv)
    with dspy.context(lm=scripted_lm(), adapter=dspy.ChatAdapter()):
        _check(_module(), MinimalLoop())
        print(f"fresh:      {fresh(args.rounds, args.runs):.3f}x a minimal loop (CPU time, median of {args.rounds} "
              f"interleaved rounds of {args.runs} runs)")
        print(f"aged:       {aged(args.rounds, args.runs, args.age):.3f}x after {args.age} runs on the same instances")
    with dspy.context(lm=scripted_lm(run_aware=False), adapter=dspy.ChatAdapter()):
        print(f"fresh, unaware: {fresh(args.rounds, args.runs):.3f}x on an engine that does not ask the run itself")
    with dspy.context(lm=scripted_lm(), adapter=dspy.ChatAdapter()):
        cost = tracing_cost(args.rounds, args.runs)
    if cost is None:
        print("tracing:    not measured (OpenTelemetry's SDK is not installed: pip install 'loops[tracing]')")
    else:
        print(f"tracing:    +{cost[0]:.0f} us of CPU per role call with loops.tracing on (in-memory exporter), "
              f"{cost[1]:.3f}x the same runs with it off (median of {args.rounds} interleaved rounds)")
    with dspy.context(adapter=dspy.ChatAdapter()):
        print(f"concurrent: {concurrent(max(3, args.rounds // 3), args.concurrent):.3f}x with {args.concurrent} "
              f"concurrent acalls on a {LATENCY_S * 1000:.0f} ms LM")


if __name__ == "__main__":
    main()

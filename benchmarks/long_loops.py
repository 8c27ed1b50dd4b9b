"""Long loops: prompt size per call with and without a history window, and what a checkpoint costs.

    .venv/bin/python -m benchmarks.long_loops [--iterations 30] [--window 3] [--rounds 7]

Runs a Creator–Critic–Iterator whose critic never approves against a zero-latency scripted LM
(ChatAdapter, so prompts are what a hosted model would get), and prints:
- the prompt characters of each critic call over the iterations, and the total prompt volume of the
  run, without a window and with one;
- the cost of checkpointing to SQLite per role call: CPU milliseconds (median of interleaved
  rounds, against the same run without a checkpoint) and bytes stored.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Message, Response, TextPart, Usage  # noqa: E402

from loops import Budget, CreatorCriticIterator  # noqa: E402
from loops.recording.checkpoint import SQLiteStore  # noqa: E402


def _fields(request: Any) -> dict[str, Any]:
    system = request.system if isinstance(request.system, str) else ""
    if "CREATOR" in system:
        return {"reasoning": "Plan the slogan.", "draft": "D0 " + "words " * 40}
    if "CRITIC" in system:
        return {"accuracy_passed": False, "completeness_passed": False, "quality_passed": False,
                "feedback": "Make it shorter and name the product. " * 3, "approved": False}
    number = re.findall(r"\[\[ ## draft ## \]\]\nD(\d+)", request.messages[-1].text or "")
    return {"improved_draft": f"D{int(number[-1]) + 1} " + "words " * 40}


class PromptRecorder:
    def __init__(self) -> None:
        self.prompts: list[tuple[str, int]] = []

    def complete(self, request: Any) -> Response:
        role = next(name for name in ("CREATOR", "CRITIC", "ITERATOR") if name in request.system)
        self.prompts.append((role, len(request.system) + sum(len(m.text or "") for m in request.messages)))
        text = "\n\n".join([*(f"[[ ## {k} ## ]]\n{str(v).lower() if isinstance(v, bool) else v}"
                              for k, v in _fields(request).items()), "[[ ## completed ## ]]"])
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=10, output_tokens=5))

    def __deepcopy__(self, memo: dict) -> PromptRecorder:
        return self


def _lm(engine: PromptRecorder) -> dspy.LM:
    return dspy.LM("scripted/long", engine=engine, cache=False, num_retries=0)


def prompt_sizes(iterations: int, window: int | None) -> list[tuple[str, int]]:
    engine = PromptRecorder()
    module = CreatorCriticIterator(budget=Budget(max_iterations=iterations, max_context_chars=None),
                                   history_window=window)
    with dspy.context(lm=_lm(engine), adapter=dspy.ChatAdapter()):
        module(requirements="A slogan for a reusable water bottle.")
    return engine.prompts


def checkpoint_cost(iterations: int, rounds: int) -> tuple[float, float]:
    """(CPU ms per role call, bytes per role call) of checkpointing to SQLite."""
    engine = PromptRecorder()
    module = CreatorCriticIterator(budget=Budget(max_iterations=iterations, max_context_chars=None),
                                   history_window=3)
    extra_ms, sizes = [], []
    with tempfile.TemporaryDirectory() as folder, dspy.context(lm=_lm(engine), adapter=dspy.ChatAdapter()):
        for number in range(rounds):
            path = Path(folder) / f"runs{number}.db"
            store = SQLiteStore(path)
            timings = {}
            for kind in (("plain", "checkpointed") if number % 2 else ("checkpointed", "plain")):
                started = time.process_time()
                if kind == "plain":
                    result = module(requirements="A slogan.")
                else:
                    result = module(requirements="A slogan.", checkpoint=store, run_id=f"r{number}")
                timings[kind] = time.process_time() - started
            calls = len(result.trace)
            extra_ms.append((timings["checkpointed"] - timings["plain"]) * 1000 / calls)
            sizes.append(sum(len(call.payload) for call in store.calls(f"r{number}")) / calls)
            store.close()
    return statistics.median(extra_ms), statistics.median(sizes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    runs = {"no window": prompt_sizes(args.iterations, None),
            f"window {args.window}": prompt_sizes(args.iterations, args.window)}
    print(f"prompt characters of each critic call over {args.iterations} iterations:")
    for name, prompts in runs.items():
        critic = [size for role, size in prompts if role == "CRITIC"]
        shown = ", ".join(str(size) for size in critic[:5]) + ", ... " + ", ".join(str(size) for size in critic[-3:])
        print(f"  {name:>10}: {shown}")
    for name, prompts in runs.items():
        print(f"total prompt volume, {name}: {sum(size for _, size in prompts):,} characters in {len(prompts)} calls")
    ms, size = checkpoint_cost(args.iterations, args.rounds)
    print(f"checkpoint (SQLite): {ms:.2f} ms CPU and {size:,.0f} bytes per role call "
          f"(median of {args.rounds} interleaved rounds)")


if __name__ == "__main__":
    main()

"""The embedded model's speed against its floor: a fixed workload (a refine loop of 2 iterations, then a fix
loop on one task, with the embedded defaults) run twice in one process, by the library as it was before the
prefix cache and the free-core threads ("today"), by the library now, and by llama-cpp-python called directly
with the library's own requests, the same prefix cache and the same thread rule (the floor).

    .venv/bin/python -m benchmarks.embedded_speed [--rounds 3] [--today-python PATH] [--ram-cache]
    .venv/bin/python -m benchmarks.embedded_speed threads [--rounds 5] [--loads 0,0.25,0.5,1,2]

Every candidate runs in a fresh process (its model loaded, its caches empty), one after another in an order
rotated per round, so that a machine busy with other work slows all of them alike:
- `today`: this checkout with the prefix cache off (LOOPS_LLAMA_CACHE_MB=0) and the thread count fixed at
  half the cores (what loops used before), or, with `--today-python`, that interpreter's own `loops` (e.g.
  another checkout's .venv/bin/python) as it is;
- `library`: this checkout, as a user runs it;
- `direct`: the requests the library sent (recorded once, before the rounds), in the same order, straight to
  `create_chat_completion` of a `llama_cpp.Llama` with the library's cache (`loops.lm.prefix_cache`) and
  thread rule (`loops.lm.cores`): what is left when DSPy, the adapters and the runtime are taken away;
- `direct, LlamaRAMCache` (`--ram-cache`): the same with a plain `Llama` and llama-cpp-python's own cache of
  the same size, whose states carry a copy of the last batch's logits.

Prints, for each loop of the workload, wall-clock medians over the rounds and, beside them, CPU seconds (on
a loaded machine the CPU time a process got is steadier than the wall clock, but it compares fairly only
when both sides ran on one thread: two threads spin at their barriers), in all and in the LM calls; the ratios
of the goals, taken within each round; and where the LM time went: reading prompts (llama.cpp's prompt
evaluation), generating (its evaluation of each new token), and the rest (sampling, under the JSON grammar
for the critic, states saved and loaded, Python). `threads` reads one role prompt and generates from it on
1..N threads while busy processes keep `--loads` cores busy (0.25: one process busy a quarter of the time),
to choose the rule of `loops.lm.cores`. Goals (issue 35): the refine loop's two runs together at least 2.5x
faster than today, its run 1 no slower; the library's LM time within 1.1x of the direct calls'. See
benchmarks/README.md, "The embedded model's speed".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REFINE_REQUIREMENTS = "Write a two-sentence product description for a reusable water bottle."  # make demo's
FIX_TASK = "Write a function second_largest(numbers) that returns the second largest distinct number in a list."
FIX_TESTS = ("from solution import second_largest\n\n\n"
             "def test_second_largest():\n"
             "    assert second_largest([1, 2, 3, 4]) == 3\n"
             "    assert second_largest([5, 5, 4]) == 4\n"
             "    assert second_largest([-1, -7, -3]) == -3\n")
RUNS = 2
LOOPS = ("refine", "fix")


def _perf(llama: Any) -> dict[str, float]:
    """llama.cpp's running totals for `llama`: prompt tokens read and tokens generated, and their times."""
    import llama_cpp

    data = llama_cpp.llama_perf_context(llama.ctx)
    return {"read_s": data.t_p_eval_ms / 1000, "read_tokens": data.n_p_eval,
            "generate_s": data.t_eval_ms / 1000, "generated_tokens": data.n_eval}


def _since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before[name], 3) for name in after}


def _fix_loop(lm: Any, workspace: Any) -> Any:
    """`loops fix` on the embedded model: its defaults (loops.code.code_loop_defaults), the tests by pytest."""
    from loops import ExecuteValidateController, PytestValidator
    from loops.budget import Budget
    from loops.code import code_loop_defaults

    validator = PytestValidator(workspace=workspace, timeout_s=30, env={"PYTHONDONTWRITEBYTECODE": "1"})
    return ExecuteValidateController(workspace=workspace, validator=validator,
                                     budget=Budget(max_iterations=code_loop_defaults(lm).max_iterations,
                                                   timeout_s=None))


def _part(wall: float, cpu: float, lm: float, lm_cpu: float, requests: int, llama: dict[str, float],
          threads: int, outcome: str | None = None) -> dict[str, Any]:
    """What one loop of one run took: wall and CPU seconds in all and in the LM calls, llama.cpp's counts."""
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "lm_s": round(lm, 3), "lm_cpu_s": round(lm_cpu, 3),
            "requests": requests, "llama": llama, "threads": threads, "outcome": outcome}


def loop_worker(record: Path | None) -> dict[str, Any]:
    """The workload through the library, twice, in this process: for each run and loop, times and llama.cpp's
    counts, and (`record`) every request as llama-cpp-python received it."""
    import dspy

    from loops import CreatorCriticIterator, Workspace
    from loops.lm import embedded

    requests: list[dict[str, list[Any]]] = [{loop: [] for loop in LOOPS} for _ in range(RUNS)]
    now = {"run": 0, "loop": LOOPS[0], "lm_s": 0.0, "lm_cpu_s": 0.0}

    class Recording(embedded.LlamaEngine):
        def complete(self, request: Any) -> Any:
            requests[now["run"]][now["loop"]].append(
                [embedded._llama_messages(request), embedded._generation_options(request)])
            started, cpu = time.perf_counter(), time.process_time()
            try:
                return super().complete(request)
            finally:
                now["lm_s"] += time.perf_counter() - started
                now["lm_cpu_s"] += time.process_time() - cpu

    def refine() -> str:
        return CreatorCriticIterator(max_iterations=2)(requirements=REFINE_REQUIREMENTS).stop_reason

    def fix() -> str:
        with Workspace() as workspace:
            workspace.write({"test_solution.py": FIX_TESTS})
            return _fix_loop(lm, workspace)(initial_input=FIX_TASK, test_command=(
                f"{sys.executable} -m pytest -q -p no:cacheprovider test_solution.py")).stop_reason

    started = time.perf_counter()
    llama = embedded._shared_model()
    report: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 3), "runs": []}
    engine = Recording()
    lm = dspy.LM(embedded.MODEL, engine=engine, async_engine=embedded.AsyncLlamaEngine(engine), temperature=0.0,
                 max_tokens=embedded.DEFAULT_MAX_TOKENS, cache=False)
    for run in range(RUNS):
        parts = {}
        for loop, body in zip(LOOPS, (refine, fix), strict=True):
            now.update(run=run, loop=loop, lm_s=0.0, lm_cpu_s=0.0)
            perf, cpu, started = _perf(llama), time.process_time(), time.perf_counter()
            with dspy.context(lm=lm):
                outcome = body()
            parts[loop] = _part(time.perf_counter() - started, time.process_time() - cpu, now["lm_s"],
                                now["lm_cpu_s"], len(requests[run][loop]), _since(perf, _perf(llama)), llama.n_threads,
                                outcome)
        report["runs"].append(parts)
    if record is not None:
        record.write_text(json.dumps(requests))
    return report


def direct_worker(record: Path, ram_cache: bool) -> dict[str, Any]:
    """The recorded requests straight to llama-cpp-python, as the library sent them: the library's state
    cache and thread rule, or (`ram_cache`) a plain Llama with llama-cpp-python's own cache."""
    import llama_cpp

    from loops.lm import embedded
    from loops.lm.cores import FreeCores, fixed_threads
    from loops.lm.prefix_cache import PrefixCachingLlama, PrefixStates, cache_bytes

    requests = json.loads(record.read_text())
    fixed = fixed_threads()
    free_cores = None if fixed is not None else FreeCores()
    threads = fixed or free_cores.threads
    started = time.perf_counter()
    model_class = llama_cpp.Llama if ram_cache else PrefixCachingLlama
    llama = model_class(model_path=str(embedded.model_path()), n_ctx=embedded.CONTEXT_TOKENS, n_threads=threads,
                        n_threads_batch=threads, verbose=False)
    if free_cores is not None:
        threads = free_cores.update(wait=True)
    llama.set_cache(llama_cpp.LlamaRAMCache(cache_bytes()) if ram_cache else PrefixStates(cache_bytes()))
    report: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 3), "runs": []}

    for run in requests:
        parts = {}
        for loop, calls in run.items():
            before, cpu, started = _perf(llama), time.process_time(), time.perf_counter()
            for messages, options in calls:
                if free_cores is not None:
                    threads = free_cores.update()
                    llama_cpp.llama_set_n_threads(llama.ctx, threads, threads)
                llama.create_chat_completion(messages=messages, **options)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            parts[loop] = _part(wall, cpu, wall, cpu, len(calls), _since(before, _perf(llama)), threads)
        report["runs"].append(parts)
    llama.close()
    return report


def _worker_command(python: str, *arguments: str) -> list[str]:
    return [python, "-m", "benchmarks.embedded_speed", "worker", *arguments]


def _run_worker(command: list[str], environment: dict[str, str]) -> dict[str, Any]:
    finished = subprocess.run(command, capture_output=True, text=True, env=environment,
                              cwd=Path(__file__).resolve().parent.parent, check=False)
    if finished.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f}) on {os.cpu_count()} cores"


def compare(rounds: int, today_python: str | None, ram_cache: bool) -> dict[str, list[dict[str, Any]]]:
    """Each candidate's reports, one per round, the candidates interleaved."""
    with tempfile.TemporaryDirectory() as scratch:
        record = Path(scratch) / "requests.json"
        environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        half = str(max(1, (os.cpu_count() or 2) // 2))
        today_environment = {**environment, "LOOPS_LLAMA_CACHE_MB": "0", "LOOPS_LLAMA_THREADS": half}
        today_command = _worker_command(sys.executable, "loop")
        if today_python is not None:  # that interpreter's loops as it is, run by this file (not a module of it)
            today_environment = environment
            today_command = [today_python, str(Path(__file__).resolve()), "worker", "loop"]
        # Once first, recording the requests the direct candidates replay (and warming the page cache).
        _run_worker(_worker_command(sys.executable, "loop", "--record", str(record)), environment)
        candidates = {
            "today": (today_command, today_environment),
            "library": (_worker_command(sys.executable, "loop"), environment),
            "direct": (_worker_command(sys.executable, "direct", "--record", str(record)), environment),
        }
        if ram_cache:
            candidates["direct, LlamaRAMCache"] = (
                _worker_command(sys.executable, "direct", "--record", str(record), "--ram-cache"), environment)
        names = list(candidates)
        reports: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for round_number in range(rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                command, candidate_environment = candidates[name]
                report = _run_worker(command, candidate_environment)
                report["load"] = _load()
                reports[name].append(report)
                print(f"round {round_number + 1} {name}: " + json.dumps(report), file=sys.stderr, flush=True)
    return reports


def _median(reports: list[dict[str, Any]], read: Any) -> float:
    return statistics.median(read(report) for report in reports)


def _ratio(first: list[dict[str, Any]], second: list[dict[str, Any]], read: Any) -> float:
    """The median over rounds of first/second within a round: the two ran one after the other, under one load."""
    return statistics.median(read(one) / read(other) for one, other in zip(first, second, strict=True))


def _field(number: int, loop: str, field: str) -> Any:
    return lambda report: report["runs"][number][loop][field]


def _llama(number: int, loop: str, field: str) -> Any:
    return lambda report: report["runs"][number][loop]["llama"][field]


def _both(loop: str, field: str = "wall_s") -> Any:
    return lambda report: sum(entry[loop][field] for entry in report["runs"])


def summary(reports: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The table of medians, the goals' ratios and where the LM time went."""
    lines = []
    for loop in LOOPS:
        lines += [f"{loop}: wall seconds (CPU seconds), medians",
                  f"  {'candidate':24} {'run 1':>16} {'run 2':>16} {'LM run 1':>16} {'LM run 2':>16}  threads"]
        for name, mine in reports.items():
            cells = [f"{_median(mine, _field(number, loop, wall)):7.2f} "
                     f"({_median(mine, _field(number, loop, cpu)):6.2f})"
                     for wall, cpu in (("wall_s", "cpu_s"), ("lm_s", "lm_cpu_s")) for number in range(RUNS)]
            threads = sorted({entry[loop]["threads"] for report in mine for entry in report["runs"]})
            lines.append(f"  {name:24} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {cells[3]:>16}  {threads}")
    today, library, direct = reports["today"], reports["library"], reports["direct"]
    lines += ["", "ratios within each round, medians (CPU time compares fairly only when both ran on one thread):"]
    for loop in LOOPS:
        goal = " (goal >= 2.5)" if loop == "refine" else ""
        first = " (goal >= 1.0)" if loop == "refine" else ""
        lines.append(
            f"  today / library, {loop}: both runs {_ratio(today, library, _both(loop)):.2f}x{goal}, "
            f"run 1 {_ratio(today, library, _field(0, loop, 'wall_s')):.2f}x{first}, "
            f"run 2 {_ratio(today, library, _field(1, loop, 'wall_s')):.2f}x; in CPU time: both runs "
            f"{_ratio(today, library, _both(loop, 'cpu_s')):.2f}x, run 1 "
            f"{_ratio(today, library, _field(0, loop, 'cpu_s')):.2f}x")
    for loop in LOOPS:
        lines.append(f"  library / direct, LM time of {loop}: " + ", ".join(
            f"run {number + 1} {_ratio(library, direct, _field(number, loop, 'lm_s')):.2f}x "
            f"(CPU {_ratio(library, direct, _field(number, loop, 'lm_cpu_s')):.2f}x)" for number in range(RUNS))
            + " (goal <= 1.1)")
    lines += ["", "where the LM time went (medians): reading prompts + generating tokens + the rest"]
    for name, mine in reports.items():
        for loop in LOOPS:
            for number in range(RUNS):
                lm = _median(mine, _field(number, loop, "lm_s"))
                read = _median(mine, _llama(number, loop, "read_s"))
                generate = _median(mine, _llama(number, loop, "generate_s"))
                tokens = _median(mine, _llama(number, loop, "read_tokens"))
                lines.append(f"  {name:24} {loop:6} run {number + 1}: {lm:7.2f} s = {read:7.2f} s "
                             f"({read / lm:4.0%}, {tokens:5.0f} tokens) + {generate:7.2f} s ({generate / lm:4.0%}) + "
                             f"{lm - read - generate:6.2f} s ({(lm - read - generate) / lm:4.0%})")
    return lines


# ---- threads against load ---------------------------------------------------------------------------------

BUSY = """import sys, time
share, period = float(sys.argv[1]), 0.1
while True:
    started = time.monotonic()
    while time.monotonic() - started < share * period:
        pass
    time.sleep((1 - share) * period)
"""


@contextlib.contextmanager
def busy_cores(cores: float):
    """Processes keeping `cores` cores busy (1.5: one busy all the time, one half the time)."""
    shares = [1.0] * int(cores) + ([cores - int(cores)] if cores - int(cores) > 0 else [])
    processes = [subprocess.Popen([sys.executable, "-c", BUSY, str(share)]) for share in shares]
    try:
        time.sleep(0.5)
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait()


def threads_table(rounds: int, loads: list[float]) -> list[str]:
    """Read a critic prompt (~340 tokens) and generate 32 tokens on 1..N threads under each load."""
    import llama_cpp

    from loops.lm import embedded
    from loops.lm.cores import FreeCores

    llama = embedded._shared_model()
    llama.set_cache(None)  # every round reads the whole prompt
    messages = [{"role": "system", "content": "You are a careful critic. " * 40},
                {"role": "user", "content": "Judge this draft: a bottle that keeps water cold for a day. " * 8}]
    most = FreeCores().most
    lines = [f"{'busy cores':>10} {'threads':>7} {'read s':>7} {'generate s':>10} {'free cores seen':>15}"]
    for load in loads:
        with busy_cores(load):
            seen = FreeCores()
            times: dict[int, list[tuple[float, float]]] = {count: [] for count in range(1, most + 1)}
            for round_number in range(rounds):
                counts = list(times) if round_number % 2 == 0 else list(reversed(times))
                for count in counts:
                    llama_cpp.llama_set_n_threads(llama.ctx, count, count)
                    llama.reset()
                    before = llama_cpp.llama_perf_context(llama.ctx)
                    llama.create_chat_completion(messages=messages, max_tokens=32, temperature=0.0)
                    after = llama_cpp.llama_perf_context(llama.ctx)
                    times[count].append(((after.t_p_eval_ms - before.t_p_eval_ms) / 1000,
                                         (after.t_eval_ms - before.t_eval_ms) / 1000))
            others = seen.others_use() or 0.0
            for count, measured in times.items():
                lines.append(f"{load:10.2f} {count:7d} {statistics.median(read for read, _ in measured):7.2f} "
                             f"{statistics.median(generate for _, generate in measured):10.2f} "
                             f"{len(seen.cpus) - others:15.2f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedded_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=("compare", "threads", "worker"), default="compare")
    parser.add_argument("worker", nargs="?", choices=("loop", "direct"), help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--today-python", default=None,
                        help="an interpreter whose own loops is today's (default: this checkout, cache off, "
                             "half the cores)")
    parser.add_argument("--ram-cache", action="store_true",
                        help="also replay the requests with llama-cpp-python's LlamaRAMCache")
    parser.add_argument("--loads", default="0,0.25,0.5,1,2", help="threads: busy cores to run under")
    parser.add_argument("--record", type=Path, default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.mode == "worker":
        report = (loop_worker(arguments.record) if arguments.worker == "loop"
                  else direct_worker(arguments.record, arguments.ram_cache))
        print(json.dumps(report))
    elif arguments.mode == "threads":
        print(_load())
        print("\n".join(threads_table(arguments.rounds, [float(load) for load in arguments.loads.split(",")])))
        print(_load())
    else:
        print(_load(), flush=True)
        reports = compare(arguments.rounds, arguments.today_python, arguments.ram_cache)
        print("\n".join(summary(reports)))
        print(_load())


if __name__ == "__main__":
    main()

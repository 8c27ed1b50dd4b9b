"""The embedded model's speed against its floor: a fixed workload (a refine loop of 2 iterations, then a fix
loop on one task, with the embedded defaults) run twice in one process, by the library as it was before the
prefix cache and the free-core threads ("today"), by the library now, and by llama-cpp-python called directly
with the library's own requests, the same prefix cache and the same thread rule (the floor).

    .venv/bin/python -m benchmarks.embedded_speed [--rounds 3] [--today-python PATH] [--ram-cache]
    .venv/bin/python -m benchmarks.embedded_speed refine [--rounds 5]
    .venv/bin/python -m benchmarks.embedded_speed mbpp [--limit 8 | --task-ids 554,557] [--data PATH]
    .venv/bin/python -m benchmarks.embedded_speed memory
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

`refine` and `mbpp` take turns in one process instead, which a loaded machine slows more evenly still: two
llama.cpp models loaded side by side, `today` a plain `llama_cpp.Llama` on half the cores with no state cache
(the engine code is the same: before issue 35 it differed only in that model), and the library's shared
model. `refine` runs the refine loop twice from an empty model (and cache) per candidate and round, the order
rotated, `direct` replaying the library's requests; it says whether today's and the library's answers were
the same. `mbpp` runs benchmarks.mbpp's `defaults` config on validation tasks, each task by both in turn
(who goes first alternates), each keeping its model and cache from task to task as one benchmark run does,
and prints the median seconds per task, the tasks solved and whether every candidate's code was the same.
`memory` runs the refine loop twice and the fix loop once in a process with the cache off and one with the
default cache, and prints their resident memory and what the cache holds.

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
import functools
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# make demo's request when the figures in benchmarks/README.md were taken (kept so that they can be taken again)
REFINE_REQUIREMENTS = "Write a two-sentence product description for a reusable water bottle."
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
    """`loops fix` on the embedded model: its defaults (loops.patterns.code.code_loop_defaults), the tests by pytest."""
    from loops import ExecuteValidateController, PytestValidator
    from loops.patterns.code import code_loop_defaults
    from loops.vocabulary.budget import Budget

    validator = PytestValidator(workspace=workspace, timeout_s=30, env={"PYTHONDONTWRITEBYTECODE": "1"})
    return ExecuteValidateController(workspace=workspace, validator=validator,
                                     budget=Budget(max_iterations=code_loop_defaults(lm).max_iterations,
                                                   timeout_s=None))


def _threads(llama: Any) -> str:
    """The threads a model generates and reads prompts on, as "generating/reading" (the table's threads column)."""
    return f"{llama.n_threads}/{llama.n_threads_batch}"


def _part(wall: float, cpu: float, lm: float, lm_cpu: float, requests: int, llama: dict[str, float],
          threads: str, outcome: str | None = None) -> dict[str, Any]:
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
                                now["lm_cpu_s"], len(requests[run][loop]), _since(perf, _perf(llama)), _threads(llama),
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
    from loops.lm.cores import FreeCores, fixed_threads, thread_counts
    from loops.lm.prefix_cache import PrefixCachingLlama, PrefixStates, cache_bytes

    requests = json.loads(record.read_text())
    fixed = fixed_threads()
    free_cores = None if fixed is not None else FreeCores()
    threads = fixed or free_cores.threads
    started = time.perf_counter()
    model_class = llama_cpp.Llama if ram_cache else PrefixCachingLlama
    generating, reading = thread_counts(threads)
    llama = model_class(model_path=str(embedded.model_path()), n_ctx=embedded.CONTEXT_TOKENS, n_threads=generating,
                        n_threads_batch=reading, verbose=False)
    # The library's thread rule, on a plain Llama too (`use_threads` reads only what every Llama has).
    use_threads = functools.partial(PrefixCachingLlama.use_threads, llama)
    if free_cores is not None:
        use_threads(free_cores.update(wait=True))
    llama.set_cache(llama_cpp.LlamaRAMCache(cache_bytes()) if ram_cache else PrefixStates(cache_bytes()))
    report: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 3), "runs": []}

    for run in requests:
        parts = {}
        for loop, calls in run.items():
            before, cpu, started = _perf(llama), time.process_time(), time.perf_counter()
            for messages, options in calls:
                if free_cores is not None:
                    use_threads(free_cores.update())
                llama.create_chat_completion(messages=messages, **options)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            parts[loop] = _part(wall, cpu, wall, cpu, len(calls), _since(before, _perf(llama)), _threads(llama))
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
    loops = [loop for loop in LOOPS if loop in next(iter(reports.values()))[0]["runs"][0]]
    lines = []
    for loop in loops:
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
    for loop in loops:
        goal = " (goal >= 2.5)" if loop == "refine" else ""
        first = " (goal >= 1.0)" if loop == "refine" else ""
        lines.append(
            f"  today / library, {loop}: both runs {_ratio(today, library, _both(loop)):.2f}x{goal}, "
            f"run 1 {_ratio(today, library, _field(0, loop, 'wall_s')):.2f}x{first}, "
            f"run 2 {_ratio(today, library, _field(1, loop, 'wall_s')):.2f}x; in CPU time: both runs "
            f"{_ratio(today, library, _both(loop, 'cpu_s')):.2f}x, run 1 "
            f"{_ratio(today, library, _field(0, loop, 'cpu_s')):.2f}x")
    for loop in loops:
        lines.append(f"  library / direct, whole {loop} loop: " + ", ".join(
            f"run {number + 1} {_ratio(library, direct, _field(number, loop, 'wall_s')):.2f}x"
            for number in range(RUNS)))
        lines.append(f"  library / direct, LM time of {loop}: " + ", ".join(
            f"run {number + 1} {_ratio(library, direct, _field(number, loop, 'lm_s')):.2f}x "
            f"(CPU {_ratio(library, direct, _field(number, loop, 'lm_cpu_s')):.2f}x)" for number in range(RUNS))
            + " (goal <= 1.1)")
    lines += ["", "where the LM time went (medians): reading prompts + generating tokens + the rest"]
    for name, mine in reports.items():
        for loop in loops:
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


# ---- candidates interleaved in one process ------------------------------------------------------------------


class Candidate:
    """A way to run the embedded model inside this process, with its own llama.cpp model, so that candidates can
    take turns under the same load: `today` a plain `llama_cpp.Llama` on half the cores with no state cache (the
    engine of loops before issue 35: the same engine code, given that model), `library` the shared model as a
    user gets it (`loops.lm.embedded`: prefix cache, free-core threads). Each records the requests it sent,
    the time spent in its engine and llama.cpp's counters."""

    def __init__(self, name: str, llama: Any, shared: bool):
        import dspy

        from loops.lm import embedded

        self.name, self.llama, self.shared = name, llama, shared
        self.requests: list[list[Any]] = []
        self.lm_s = self.lm_cpu_s = 0.0
        candidate = self

        class Timed(embedded.LlamaEngine):
            def complete(self, request: Any) -> Any:
                candidate.requests.append([embedded._llama_messages(request), embedded._generation_options(request)])
                started, cpu = time.perf_counter(), time.process_time()
                try:
                    return super().complete(request)
                finally:
                    candidate.lm_s += time.perf_counter() - started
                    candidate.lm_cpu_s += time.process_time() - cpu

        engine = Timed() if shared else Timed(llama)
        self.lm = dspy.LM(embedded.MODEL, engine=engine, async_engine=embedded.AsyncLlamaEngine(engine),
                          temperature=0.0, max_tokens=embedded.DEFAULT_MAX_TOKENS, cache=False)

    def start_empty(self) -> None:
        """As a fresh process would start: an empty context, and an empty prefix cache for the library."""
        from loops.lm import embedded
        from loops.lm.prefix_cache import PrefixStates, cache_bytes

        with embedded._generation_lock:
            if self.shared and self.llama.cache is not None:
                self.llama.set_cache(PrefixStates(cache_bytes()))
            self.llama.reset()

    def measure(self, body: Any) -> tuple[Any, dict[str, Any]]:
        """`body()` under this candidate's LM, and what it took."""
        import dspy

        self.requests, self.lm_s, self.lm_cpu_s = [], 0.0, 0.0
        perf, cpu, started = _perf(self.llama), time.process_time(), time.perf_counter()
        with dspy.context(lm=self.lm):
            value = body()
        part = _part(time.perf_counter() - started, time.process_time() - cpu, self.lm_s, self.lm_cpu_s,
                     len(self.requests), _since(perf, _perf(self.llama)), _threads(self.llama))
        return value, part


def in_process_candidates() -> dict[str, Candidate]:
    import llama_cpp

    from loops.lm import embedded

    half = max(1, (os.cpu_count() or 2) // 2)  # loops' thread rule before issue 35
    today = llama_cpp.Llama(model_path=str(embedded.model_path()), n_ctx=embedded.CONTEXT_TOKENS, n_threads=half,
                            n_threads_batch=half, verbose=False)
    return {"today": Candidate("today", today, shared=False),
            "library": Candidate("library", embedded._shared_model(), shared=True)}


def replay(llama: Any, requests: list[list[Any]]) -> tuple[list[str], dict[str, Any]]:
    """`requests` straight to llama-cpp-python's `create_chat_completion` on `llama` (the shared model: its
    cache), with the library's thread rule: the floor under the library's calls."""
    from loops.lm import embedded

    answers = []
    perf, cpu, started = _perf(llama), time.process_time(), time.perf_counter()
    for messages, options in requests:
        if embedded._free_cores is not None:
            llama.use_threads(embedded._free_cores.update())
        answers.append(llama.create_chat_completion(messages=messages, **options)["choices"][0]["message"]["content"])
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return answers, _part(wall, cpu, wall, cpu, len(requests), _since(perf, _perf(llama)), _threads(llama))


def refine_rounds(rounds: int) -> dict[str, list[dict[str, Any]]]:
    """The refine loop run twice from an empty model by each candidate, the candidates taking turns in this
    process (the order rotated per round); `direct` replays the library's requests of the round before."""
    from loops import CreatorCriticIterator

    candidates = in_process_candidates()
    library = candidates["library"]

    def refine() -> tuple[str, str]:
        result = CreatorCriticIterator(max_iterations=2)(requirements=REFINE_REQUIREMENTS)
        return result.stop_reason, str(result.final)

    library.start_empty()
    library.measure(refine)  # warms DSPy and the adapters; its requests are the first round's `direct`
    recorded = [library.requests]
    names = ["today", "library", "direct"]
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    outputs: dict[str, set[str]] = {name: set() for name in names}
    for round_number in range(rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            runs = []
            if name == "direct":
                library.start_empty()
                for _ in range(RUNS):
                    answers, part = replay(library.llama, recorded[-1])
                    runs.append({"refine": part})
                    outputs[name].add(json.dumps(answers))
            else:
                candidate = candidates[name]
                candidate.start_empty()
                for _ in range(RUNS):
                    value, part = candidate.measure(refine)
                    part["outcome"] = value[0]
                    runs.append({"refine": part})
                    asked = [request[0][-1]["content"] for request in candidate.requests]
                    outputs[name].add(json.dumps([value, asked]))
                    if name == "library":
                        recorded.append(candidate.requests)
            reports[name].append({"runs": runs, "load": _load()})
            print(f"round {round_number + 1} {name}: " + json.dumps(runs), file=sys.stderr, flush=True)
    print(f"distinct outputs per candidate over the rounds: {({name: len(seen) for name, seen in outputs.items()})}; "
          f"today and library the same: {outputs['today'] == outputs['library']}", file=sys.stderr)
    return reports


def mbpp_tasks(data: Path, limit: int | None, task_ids: set[int] | None) -> dict[str, list[dict[str, Any]]]:
    """MBPP's `defaults` config on validation tasks, each task run by `today` and the library in turn (who goes
    first alternates), each candidate keeping its model, context and cache from task to task as a run of
    benchmarks.mbpp does."""
    from benchmarks import mbpp

    candidates = in_process_candidates()
    names = list(candidates)
    records: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for number, task in enumerate(mbpp.load_tasks(data, "validation", limit, task_ids)):
        for name in names if number % 2 == 0 else names[::-1]:
            record, part = candidates[name].measure(lambda task=task: mbpp.run_task("defaults", task))
            entry = {"task_id": task["task_id"], "passed": record["passed"], "seconds": record["seconds"],
                     "lm_calls": record["lm_calls"], **part, "load": _load(),
                     "codes": [attempt.get("raw_code") for attempt in record["attempts"]]}
            records[name].append(entry)
            shown = {**{key: value for key, value in entry.items() if key != "codes"},
                     "codes_hash": hashlib.sha256(json.dumps(entry["codes"]).encode()).hexdigest()[:12]}
            print(f"task {task['task_id']} {name}: " + json.dumps(shown), file=sys.stderr, flush=True)
    return records


def mbpp_summary(records: dict[str, list[dict[str, Any]]]) -> list[str]:
    today, library = records["today"], records["library"]
    lines = [f"MBPP defaults, {len(today)} validation tasks ({', '.join(str(entry['task_id']) for entry in today)}),"
             " each run by both in turn in one process:",
             f"  {'candidate':10} {'median s/task':>13} {'(CPU s)':>8} {'sum s':>7} {'LM share':>8} {'read share':>10}"
             "  passed"]
    for name, entries in records.items():
        lm = sum(entry["lm_s"] for entry in entries)
        lines.append(f"  {name:10} {statistics.median(entry['wall_s'] for entry in entries):13.1f} "
                     f"{statistics.median(entry['cpu_s'] for entry in entries):8.1f} "
                     f"{sum(entry['wall_s'] for entry in entries):7.0f} "
                     f"{lm / sum(entry['wall_s'] for entry in entries):8.0%} "
                     f"{sum(entry['llama']['read_s'] for entry in entries) / lm:10.0%}  "
                     f"{sorted(entry['task_id'] for entry in entries if entry['passed'])}")
    ratios = [one["wall_s"] / other["wall_s"] for one, other in zip(today, library, strict=True)]
    cpu_ratios = [one["cpu_s"] / other["cpu_s"] for one, other in zip(today, library, strict=True)]
    same = sum(one["codes"] == other["codes"] for one, other in zip(today, library, strict=True))
    medians = {name: statistics.median(entry["wall_s"] for entry in entries) for name, entries in records.items()}
    lines += [f"  library's median s/task / today's: {medians['library'] / medians['today']:.2f} (goal <= 0.5)",
              f"  today / library per task, median: {statistics.median(ratios):.2f}x wall, "
              f"{statistics.median(cpu_ratios):.2f}x CPU",
              f"  tasks whose every candidate's code was the same both ways: {same} of {len(today)}"]
    return lines


def memory_worker() -> dict[str, Any]:
    """This process's memory after loading the model and after the refine loop twice and the fix loop once
    (the prefix cache as LOOPS_LLAMA_CACHE_MB says), and what the cache holds."""
    import resource

    import psutil

    from loops.lm import embedded

    process = psutil.Process()
    candidate = Candidate("library", embedded._shared_model(), shared=True)
    loaded = process.memory_info().rss
    from loops import CreatorCriticIterator, Workspace

    for _ in range(RUNS):
        candidate.measure(lambda: CreatorCriticIterator(max_iterations=2)(requirements=REFINE_REQUIREMENTS))

    def fix() -> Any:
        with Workspace() as workspace:
            workspace.write({"test_solution.py": FIX_TESTS})
            return _fix_loop(candidate.lm, workspace)(initial_input=FIX_TASK, test_command=(
                f"{sys.executable} -m pytest -q -p no:cacheprovider test_solution.py"))

    candidate.measure(fix)
    cache = candidate.llama.cache
    states = [] if cache is None else list(cache._states.values())
    return {"cache_mb": None if cache is None else cache.capacity_bytes / (1 << 20),
            "rss_loaded_mb": loaded / (1 << 20), "rss_after_mb": process.memory_info().rss / (1 << 20),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "states": len(states), "cache_size_mb": sum(size for _, _, size in states) / (1 << 20),
            "tokens_held": sum(len(tokens) for tokens, _, _ in states)}


def memory() -> list[str]:
    lines = [f"{'LOOPS_LLAMA_CACHE_MB':>20} {'RSS loaded':>10} {'RSS after':>9} {'peak RSS':>8} {'states':>6} "
             f"{'cache MB':>8} {'tokens':>6} {'KiB/token':>9}"]
    for megabytes in ("0", None):
        environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "LOOPS_LLAMA_CACHE_MB": megabytes or ""}
        report = _run_worker(_worker_command(sys.executable, "memory"), environment)
        per_token = report["cache_size_mb"] * 1024 / report["tokens_held"] if report["tokens_held"] else 0.0
        lines.append(f"{megabytes or 'unset (256)':>20} {report['rss_loaded_mb']:10.0f} {report['rss_after_mb']:9.0f} "
                     f"{report['peak_rss_mb']:8.0f} {report['states']:6d} {report['cache_size_mb']:8.1f} "
                     f"{report['tokens_held']:6d} {per_token:9.1f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedded_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=("compare", "refine", "mbpp", "memory", "threads", "worker"),
                        default="compare")
    parser.add_argument("worker", nargs="?", choices=("loop", "direct", "memory"), help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--today-python", default=None,
                        help="an interpreter whose own loops is today's (default: this checkout, cache off, "
                             "half the cores)")
    parser.add_argument("--ram-cache", action="store_true",
                        help="also replay the requests with llama-cpp-python's LlamaRAMCache")
    parser.add_argument("--loads", default="0,0.25,0.5,1,2", help="threads: busy cores to run under")
    parser.add_argument("--limit", type=int, default=None, help="mbpp: the first N validation tasks")
    parser.add_argument("--task-ids", default=None, help="mbpp: these validation tasks (e.g. 554,557)")
    parser.add_argument("--data", type=Path, default=None, help="mbpp: the tasks (default: benchmarks.mbpp's)")
    parser.add_argument("--record", type=Path, default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.mode == "worker":
        if arguments.worker == "memory":
            report = memory_worker()
        elif arguments.worker == "loop":
            report = loop_worker(arguments.record)
        else:
            report = direct_worker(arguments.record, arguments.ram_cache)
        print(json.dumps(report))
        return
    print(_load(), flush=True)
    if arguments.mode == "threads":
        lines = threads_table(arguments.rounds, [float(load) for load in arguments.loads.split(",")])
    elif arguments.mode == "refine":
        lines = summary(refine_rounds(arguments.rounds))
    elif arguments.mode == "mbpp":
        from benchmarks import mbpp

        task_ids = {int(value) for value in arguments.task_ids.split(",")} if arguments.task_ids else None
        lines = mbpp_summary(mbpp_tasks(arguments.data or mbpp.DEFAULT_DATA, arguments.limit, task_ids))
    elif arguments.mode == "memory":
        lines = memory()
    else:
        lines = summary(compare(arguments.rounds, arguments.today_python, arguments.ram_cache))
    print("\n".join(lines))
    print(_load())

if __name__ == "__main__":
    main()

"""What a SQLite checkpoint store's guarantees cost: the integrity check, ending each run whole, and pruning.

    .venv/bin/python -m benchmarks.checkpoint_store [--megabytes 200] [--runs 60] [--rounds 7] [--keep 50]

Prints:
- the integrity check a process makes when it first opens a file (SQLite's `quick_check`, which
  `SQLiteStore` runs) against the fuller `integrity_check`, in CPU and wall milliseconds per MB of
  file, on a file of `--megabytes` grown from real runs' records (median of `--rounds`, interleaved);
- what a run pays to leave the file whole when it ends (its write-ahead log folded in): runs of a
  Creator–Critic–Iterator on a zero-latency scripted LM, with a checkpoint given as a path (the store
  opened, checked when changed by another, and closed per run) or as one `SQLiteStore` (checkpointed
  per run), each against the same runs without a checkpoint, in CPU and wall ms per run (median of
  interleaved rounds);
- `prune_runs(keep_last=--keep)` on a file of a thousand short runs: the bytes before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402

from loops import CreatorCriticIterator  # noqa: E402
from loops.recording.checkpoint import SQLiteStore, prune_runs  # noqa: E402
from tests.loops.test_long_loops import never_approving  # noqa: E402
from tests.scripted import scripted_lm  # noqa: E402


def _record(checkpoint: Path | SQLiteStore | None, runs: int, prefix: str, iterations: int = 2) -> None:
    module = CreatorCriticIterator(max_iterations=iterations)
    with dspy.context(lm=scripted_lm(never_approving)):
        for number in range(runs):
            call = {"checkpoint": checkpoint, "run_id": f"{prefix}{number}"} if checkpoint is not None else {}
            module(requirements=f"a slogan {number}", **call)


def grown_file(path: Path, megabytes: float) -> None:
    """A checkpoint file of about `megabytes`: five real runs, their records copied under new run ids."""
    _record(path, 5, "seed", iterations=3)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        copies = 0
        while path.stat().st_size < megabytes * 1e6:
            db.execute("BEGIN")
            for _ in range(500):
                copies += 1
                db.execute("INSERT INTO runs SELECT ?, program, inputs, created, stop_reason FROM runs "
                           "WHERE run_id = 'seed0'", (f"copy{copies}",))
                db.execute("INSERT INTO calls SELECT ?, seq, role, digest, nested, payload FROM calls WHERE run_id = ?",
                           (f"copy{copies}", f"seed{copies % 5}"))
            db.execute("COMMIT")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def check_cost(path: Path, rounds: int) -> dict[str, tuple[float, float]]:
    """(CPU ms per MB, wall ms per MB) of each check, the file in the page cache (read once before)."""
    megabytes = path.stat().st_size / 1e6
    timings: dict[str, list[tuple[float, float]]] = {"quick_check": [], "integrity_check": []}
    path.read_bytes()
    for number in range(rounds):
        for pragma in (("quick_check", "integrity_check") if number % 2 else ("integrity_check", "quick_check")):
            db = sqlite3.connect(path)
            wall, cpu = time.perf_counter(), time.process_time()
            assert db.execute(f"PRAGMA {pragma}").fetchall() == [("ok",)]
            timings[pragma].append(((time.process_time() - cpu) * 1000 / megabytes,
                                    (time.perf_counter() - wall) * 1000 / megabytes))
            db.close()
    return {pragma: (statistics.median(cpu for cpu, _ in found), statistics.median(wall for _, wall in found))
            for pragma, found in timings.items()}


def run_end_cost(runs: int, rounds: int) -> dict[str, tuple[float, float]]:
    """(CPU ms, wall ms) per run of a checkpoint given as a path and as one store, over no checkpoint."""
    extra: dict[str, list[tuple[float, float]]] = {"path": [], "store": []}
    with tempfile.TemporaryDirectory() as folder:
        for number in range(rounds):
            store = SQLiteStore(Path(folder) / f"store{number}.db")
            kinds = ["none", "path", "store"]
            kinds = kinds[number % 3:] + kinds[:number % 3]  # rotated: none first, then second, then third
            spent = {}
            for kind in kinds:
                checkpoint = {"none": None, "path": Path(folder) / f"path{number}.db", "store": store}[kind]
                wall, cpu = time.perf_counter(), time.process_time()
                _record(checkpoint, runs, f"{kind}{number}-")
                spent[kind] = (time.process_time() - cpu, time.perf_counter() - wall)
            store.close()
            for kind in extra:
                extra[kind].append(tuple((spent[kind][at] - spent["none"][at]) * 1000 / runs for at in (0, 1)))
    return {kind: (statistics.median(cpu for cpu, _ in found), statistics.median(wall for _, wall in found))
            for kind, found in extra.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=200)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keep", type=int, default=50)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.db"
        grown_file(path, args.megabytes)
        costs = check_cost(path, args.rounds)
        print(f"integrity check of a {path.stat().st_size / 1e6:,.0f} MB checkpoint file (median of {args.rounds}):")
        for pragma, (cpu, wall) in costs.items():
            print(f"  {pragma:>15}: {cpu:.2f} ms CPU, {wall:.2f} ms wall per MB")
    ended = run_end_cost(args.runs, args.rounds)
    print(f"ending each run whole, over the same runs without a checkpoint ({args.runs} runs of 4 calls, median of "
          f"{args.rounds} rounds):")
    for kind, (cpu, wall) in ended.items():
        what = "a path (opened and closed per run)" if kind == "path" else "one SQLiteStore (checkpointed per run)"
        print(f"  {what:>40}: {cpu:+.2f} ms CPU, {wall:+.2f} ms wall per run")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as store:
            _record(store, 1000, "r")
        pruned = prune_runs(path, keep_last=args.keep)
        print(f"prune_runs(keep_last={args.keep}) of 1,000 runs of 4 calls: {len(pruned.deleted):,} deleted, "
              f"{pruned.bytes_before:,} bytes before, {pruned.bytes_after:,} after "
              f"({pruned.bytes_before / 1000:,.0f} bytes per run before)")


if __name__ == "__main__":
    main()

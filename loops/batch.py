"""Many loops at once: a program run on many examples, results streamed to JSON lines as they finish.

    summary = loops.batch.run(program, examples, out="results.jsonl", concurrency=64)

- `backend="asyncio"` drives up to `concurrency` loops in this process at once (`program.acall`): the
  loops wait on their LM server, not on each other, so hundreds fit in one process.
- `backend="ray"` runs each example — its workspace and its test runs — on a Ray worker (an actor per
  cluster CPU, up to `concurrency`, each keeping the program; `ray.init()` locally, or `address=` of a
  running cluster), for validators that need more cores than one machine has. Ray is an optional extra
  (`pip install 'loops[ray]'`).

One JSON object per example is appended to `out` as soon as it finishes (id, success, stop reason,
final, iterations, LM calls, tokens, seconds, warnings; `score` with a `metric`), so a batch that was
interrupted resumes where it stopped: examples already in `out` are skipped. An example that fails —
its loop raised, its inputs were wrong — is recorded with its `error` and the batch goes on.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from loops.errors import ConfigurationError, MissingDependencyError

__all__ = ["BACKENDS", "BatchSummary", "arun", "run"]

BACKENDS = ("asyncio", "ray")


@dataclass(frozen=True)
class BatchSummary:
    """What a batch did: examples finished (succeeded or not), failed (raised), skipped (already in
    `out`), the wall time and loops finished per second."""

    finished: int
    succeeded: int
    failed: int
    skipped: int
    seconds: float

    @property
    def per_second(self) -> float:
        return (self.finished + self.failed) / self.seconds if self.seconds else 0.0


def run(program: dspy.Module, examples: Iterable[dspy.Example | dict[str, Any]], *, out: str | os.PathLike[str],
        backend: str = "asyncio", concurrency: int = 16, address: str | None = None,
        metric: Callable[..., Any] | None = None, progress: bool = True) -> BatchSummary:
    """Run `program` on every example not yet in `out`, `concurrency` at a time, appending one record
    per example to `out` as it finishes. Examples are `dspy.Example`s (their inputs are the program's
    keyword arguments) or dicts of inputs; an example's id is its `id` or `task_id`, else its position."""
    batch = _Batch(program, examples, out, backend, concurrency, address, metric, progress)
    with batch:
        if backend == "asyncio":
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(_asyncio_batch(program, batch.pending, concurrency, metric, batch.write))
            else:
                raise ConfigurationError("loops.batch.run was called inside a running event loop (a notebook "
                                         "cell, say): use `await loops.batch.arun(...)` there instead")
        else:
            _ray_batch(program, dspy.settings.lm, batch.pending, concurrency, address, metric, batch.write)
    return batch.summary()


async def arun(program: dspy.Module, examples: Iterable[dspy.Example | dict[str, Any]], *,
               out: str | os.PathLike[str], concurrency: int = 16, metric: Callable[..., Any] | None = None,
               progress: bool = True) -> BatchSummary:
    """`run` with the asyncio backend, awaited in a running event loop (a notebook, an async service)."""
    batch = _Batch(program, examples, out, "asyncio", concurrency, None, metric, progress)
    with batch:
        await _asyncio_batch(program, batch.pending, concurrency, metric, batch.write)
    return batch.summary()


class _Batch:
    """One batch's bookkeeping: its checks (before any LM call), the examples left to run, the output
    file, the counts and the progress bar."""

    def __init__(self, program: dspy.Module, examples: Iterable[Any], out: str | os.PathLike[str], backend: str,
                 concurrency: int, address: str | None, metric: Callable[..., Any] | None, progress: bool):
        if backend not in BACKENDS:
            raise ConfigurationError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if address is not None and backend != "ray":
            raise ConfigurationError("address= is a Ray cluster's address: it needs backend='ray'")
        if dspy.settings.lm is None and any(predictor.lm is None for _, predictor in program.named_predictors()):
            raise ConfigurationError("no LM is configured: call dspy.configure(lm=...) before loops.batch.run")
        self.path = Path(out)
        done = _finished_ids(self.path)
        self.pending = [(key, inputs) for key, inputs in _items(examples) if key not in done]
        self.skipped = len(done)
        self.counts = {"finished": 0, "succeeded": 0, "failed": 0}
        self.progress = _Progress(progress, len(self.pending))

    def __enter__(self) -> _Batch:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cut_short = self.path.exists() and self.path.stat().st_size and not self.path.read_bytes().endswith(b"\n")
        self.handle = self.path.open("a", encoding="utf-8")
        if cut_short:  # the last line of a killed batch: end it, so the next record starts a line of its own
            self.handle.write("\n")
        self.started = time.monotonic()
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)
        self.handle.close()
        self.seconds = time.monotonic() - self.started

    def write(self, record: dict[str, Any]) -> None:
        self.handle.write(json.dumps(record, default=str) + "\n")
        self.handle.flush()
        if record.get("stop_reason") is None:
            self.counts["failed"] += 1
        else:
            self.counts["finished"] += 1
            self.counts["succeeded"] += bool(record.get("success"))
        self.progress.advance(time.monotonic() - self.started)

    def summary(self) -> BatchSummary:
        return BatchSummary(skipped=self.skipped, seconds=self.seconds, **self.counts)


# --- the backends ----------------------------------------------------------------------------------------


async def _asyncio_batch(program: dspy.Module, pending: list[tuple[str, dict[str, Any]]], concurrency: int,
                         metric: Callable[..., Any] | None, write: Callable[[dict[str, Any]], None]) -> None:
    queue = iter(pending)

    async def worker() -> None:
        for key, inputs in queue:  # one shared iterator: each worker takes the next example
            started = time.monotonic()
            try:
                prediction = await program.acall(**inputs)
            except Exception as exc:  # recorded, never fatal: the batch goes on
                write(_failure(key, exc, time.monotonic() - started))
                continue
            write(_record(key, inputs, prediction, time.monotonic() - started, metric))

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(pending)) or 1)))


def _ray_batch(program: dspy.Module, lm: Any, pending: list[tuple[str, dict[str, Any]]], concurrency: int,
               address: str | None, metric: Callable[..., Any] | None,
               write: Callable[[dict[str, Any]], None]) -> None:
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("the ray backend needs Ray, which is not installed. Fix: pip install "
                                     "'loops[ray]'") from None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network but the cluster's own
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    # Actors that keep the program and the LM: a task per example would ship and unpickle them every time.
    worker_class = ray.remote(num_cpus=1)(_Worker)
    shared = ray.put((program, _portable(lm), metric))
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    idle = [worker_class.remote(shared) for _ in range(min(concurrency, cpus, len(pending)))]
    in_flight: dict[Any, tuple[str, Any]] = {}
    queue = iter(pending)
    while True:
        while idle:
            taken = _take(queue, 1)
            if not taken:
                break
            actor = idle.pop()
            key, inputs = taken[0]
            in_flight[actor.run.remote(key, inputs)] = (key, actor)
        if not in_flight:
            break
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        key, actor = in_flight.pop(ready[0])
        try:
            write(ray.get(ready[0]))
        except Exception as exc:  # the worker itself died: this example's failure only, and a new worker
            write(_failure(key, exc, 0.0))
            actor = worker_class.remote(shared)
        idle.append(actor)


class _Worker:
    """A Ray actor: one example at a time, each in its own workspace, with the program and LM it keeps."""

    def __init__(self, shared: tuple[Any, Any, Any]):
        self.shared = shared

    def run(self, key: str, inputs: dict[str, Any]) -> dict[str, Any]:
        return _run_on_worker(self.shared, key, inputs)


def _run_on_worker(shared: tuple[Any, Any, Any], key: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """One example on a Ray worker: the program, in its own workspace, with the LM rebuilt there."""
    program, lm, metric = shared
    started = time.monotonic()
    try:
        with dspy.context(lm=_rebuilt(lm)):
            prediction = program(**inputs)
    except Exception as exc:
        return _failure(key, exc, time.monotonic() - started)
    return _record(key, inputs, prediction, time.monotonic() - started, metric)


def _portable(lm: Any) -> Any:
    """The LM as it travels to a worker: the embedded model by name (its weights load on the worker)."""
    from loops.lm import is_embedded

    return "local" if is_embedded(lm) else lm


def _rebuilt(lm: Any) -> Any:
    if lm == "local":
        from loops.lm import local_lm

        return local_lm()
    return lm


# --- records -----------------------------------------------------------------------------------------------


def _items(examples: Iterable[dspy.Example | dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    seen: set[str] = set()
    for number, example in enumerate(examples):
        if isinstance(example, dspy.Example):
            inputs = dict(example.inputs()) if example._input_keys else {
                key: value for key, value in example.items() if key not in ("id", "task_id")}
            key = example.get("id", example.get("task_id", number))
        elif isinstance(example, dict):
            inputs = {name: value for name, value in example.items() if name != "id"}
            key = example.get("id", number)
        else:
            raise ConfigurationError(f"example {number} is a {type(example).__name__}: give dspy.Examples or dicts "
                                     "of the program's inputs")
        key = str(key)
        if key in seen:
            raise ConfigurationError(f"two examples have the id {key!r}: ids must be unique, as a resumed batch "
                                     "skips the ids it finds in out")
        seen.add(key)
        yield key, inputs


def _finished_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    done = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            done.add(str(json.loads(line)["id"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a line cut short when the batch was killed: that example runs again
    return done


def _record(key: str, inputs: dict[str, Any], prediction: Any, seconds: float,
            metric: Callable[..., Any] | None) -> dict[str, Any]:
    final = prediction.get("final")
    record = {"id": key, "success": bool(prediction.get("success")), "stop_reason": prediction.get("stop_reason"),
              "final": _jsonable(getattr(final, "content", final)), "iterations": prediction.get("iterations"),
              "lm_calls": prediction.get("lm_calls"), "tokens": prediction.get("tokens"),
              "seconds": round(seconds, 3), "warnings": list(prediction.get("warnings") or [])}
    if metric is not None:
        example = dspy.Example(**inputs).with_inputs(*inputs)
        try:
            record["score"] = float(metric(example, prediction))
        except Exception as exc:
            record["score_error"] = f"{type(exc).__name__}: {exc}"
    return record


def _failure(key: str, exc: BaseException, seconds: float) -> dict[str, Any]:
    return {"id": key, "error": f"{type(exc).__name__}: {exc}", "stop_reason": None, "seconds": round(seconds, 3)}


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _take(iterator: Iterator[Any], count: int) -> list[Any]:
    taken = []
    for item in iterator:
        taken.append(item)
        if len(taken) == count:
            break
    return taken


class _Progress:
    """A progress bar with loops finished per second (rich), or nothing."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total, self.count, self.bar, self.task = enabled, total, 0, None, None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[rate]} loops/s"), TimeElapsedColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("batch", total=self.total, rate="-")
        return self

    def advance(self, elapsed: float) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1, rate=f"{self.count / elapsed:.1f}" if elapsed else "-")

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

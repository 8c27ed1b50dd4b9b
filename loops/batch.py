"""Many loops at once: a program run on many examples, results streamed to JSON lines as they finish.

    summary = loops.batch.run(program, examples, out="results.jsonl", concurrency=64)

- `backend="asyncio"` drives up to `concurrency` loops in this process at once (`program.acall`): the
  loops wait on their LM server, not on each other, so hundreds fit in one process.
- `backend="ray"` spreads the `concurrency` loops over Ray actors, one per cluster CPU (fewer if
  `concurrency` is smaller): each actor builds the program and its LM once and runs its share of the
  loops at once on its own event loop, each example in its own workspace, so that a cluster's cores
  run the validators and the per-call CPU of many drivers. With no `address=`, the batch starts a
  local Ray instance bound to 127.0.0.1 and shuts it down when it ends; `address=` joins a running
  cluster. Ray is an optional extra (`pip install 'loops[ray]'`).

One JSON object per example is appended to `out` as soon as it finishes: its id, its inputs (each cut
to `INPUT_CHARS` characters), success, stop reason, final, iterations, LM calls, tokens, seconds,
warnings, and `score` with a `metric`. A batch that was interrupted or killed resumes where it stopped:
the examples already in `out` are skipped (`retry_failed=True` runs again those recorded as failed),
and a line of `out` cut short or damaged is skipped with a warning, its example run again. An example
whose loop raised is recorded with its `error` and the batch goes on; a `ConfigurationError` (a rejected
key, an unknown model) stops the batch at that example, with nothing recorded for it, since it would fail
the same way on every run.

Before the first example runs, every example is checked against the program's inputs (`bad_examples`: its
input contract, `loops.vocabulary.contracts`): an example holds inputs only, never a limit (the limits are the
program's, the same for every example), and those the program would refuse are all listed in one
`ConfigurationError`, with nothing run. The examples, their records and the results file are
`loops.batch_records`'s; this module runs the loops.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dspy

from loops.batch_records import INPUT_CHARS, BadExample, Record, _examples, _failure, _Output, _record, bad_examples
from loops.errors import ConfigurationError, MissingDependencyError
from loops.observers import tracing
from loops.vocabulary import context

__all__ = ["BACKENDS", "INPUT_CHARS", "BadExample", "BatchSummary", "arun", "bad_examples", "current_example", "run"]

BACKENDS = ("asyncio", "ray")
_log = logging.getLogger("loops.batch")


@dataclass(frozen=True)
class BatchSummary:
    """What a batch did: examples finished (succeeded or not), failed (their loop raised), skipped
    (already in `out`; `skipped_unsuccessful` of them recorded without success, `skipped_failed` of those as
    failed, which `retry_failed=True` runs again), the seconds spent running
    them and, apart, starting up (Ray's instance and actors), the CPU seconds spent running them (this
    process's for asyncio, the actors' for Ray) and the number of workers (actors) that ran them."""

    finished: int
    succeeded: int
    failed: int
    skipped: int
    skipped_unsuccessful: int
    seconds: float
    skipped_failed: int = 0
    startup_seconds: float = 0.0
    cpu_seconds: float = 0.0
    workers: int = 1

    @property
    def per_second(self) -> float:
        """Examples done per second of running, start-up excluded."""
        return (self.finished + self.failed) / self.seconds if self.seconds else 0.0

    @property
    def all_succeeded(self) -> bool:
        """Whether every example of the batch, run now or before, succeeded."""
        return self.failed == 0 and self.succeeded == self.finished and self.skipped_unsuccessful == 0


def run(program: dspy.Module, examples: Iterable[dspy.Example | dict[str, Any]], *, out: str | os.PathLike[str],
        backend: str = "asyncio", concurrency: int = 16, address: str | None = None,
        metric: Callable[..., Any] | None = None, progress: bool = True, retry_failed: bool = False,
        options: Mapping[str, Any] | None = None) -> BatchSummary:
    """Run `program` on every example not yet in `out`, `concurrency` at a time, appending one record
    per example to `out` as it finishes. Examples are `dspy.Example`s (their inputs are the program's
    keyword arguments) or dicts of inputs; an example's id is its `id` or `task_id`, else its position.
    Every example is checked first (`bad_examples`): none runs unless all can.

    `options` go to every example's call beside its inputs: a loop module's limits (`timeout_s=60`), and
    `checkpoint="runs.db"`, in which each example's run is recorded under its id as `run_id` (an example
    interrupted mid-loop then resumes from its record when the batch runs again).

    Interrupted (Ctrl-C), it stops at once and raises `KeyboardInterrupt` saying how many examples are
    done; what finished is in `out`, and the same call resumes from there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigurationError("loops.batch.run was called inside a running event loop (a notebook cell, say): "
                                 "use `await loops.batch.arun(...)` there instead")
    batch = _Batch(program, examples, out, backend, concurrency, address, metric, progress, retry_failed, options)
    try:
        asyncio.run(batch.drive())
    except KeyboardInterrupt:
        raise KeyboardInterrupt(batch.interrupted()) from None
    return batch.summary()


async def arun(program: dspy.Module, examples: Iterable[dspy.Example | dict[str, Any]], *,
               out: str | os.PathLike[str], backend: str = "asyncio", concurrency: int = 16,
               address: str | None = None, metric: Callable[..., Any] | None = None, progress: bool = True,
               retry_failed: bool = False, options: Mapping[str, Any] | None = None) -> BatchSummary:
    """`run`, awaited in a running event loop (a notebook, an async service)."""
    batch = _Batch(program, examples, out, backend, concurrency, address, metric, progress, retry_failed, options)
    await batch.drive()
    return batch.summary()


class _Batch:
    """One batch: its checks (before any LM call), the examples left to run, the output, the counts and
    the progress bar, and the backend that runs them."""

    def __init__(self, program: dspy.Module, examples: Iterable[Any], out: str | os.PathLike[str], backend: str,
                 concurrency: int, address: str | None, metric: Callable[..., Any] | None, progress: bool,
                 retry_failed: bool, options: Mapping[str, Any] | None):
        if backend not in BACKENDS:
            raise ConfigurationError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if address is not None and backend != "ray":
            raise ConfigurationError("address= is a Ray cluster's address: it needs backend='ray'")
        if options and "run_id" in options:
            raise ConfigurationError("options must not hold a run_id: with a checkpoint, each example's run is "
                                     "recorded under the example's own id")
        if dspy.settings.lm is None and any(predictor.lm is None for _, predictor in program.named_predictors()):
            raise ConfigurationError("no LM is configured: call dspy.configure(lm=...) before loops.batch.run")
        self.program, self.backend, self.concurrency, self.address, self.metric = (
            program, backend, concurrency, address, metric)
        self.options = dict(options or {})
        self.lm, self.adapter = dspy.settings.lm, dspy.settings.adapter
        self.origin = tracing.carrier()  # what the caller is inside: each example's trace links to it
        items, bad = _examples(program, examples)
        if bad:
            raise ConfigurationError(f"{len(bad)} of {len(items) + sum(example.id is None for example in bad)} "
                                     "examples cannot run, and none ran:\n" + "\n".join(map(str, bad)))
        self.out = _Output(Path(out), retry_failed)
        self.pending = [(key, inputs) for key, inputs in items if key not in self.out.results]
        self.skipped = len(items) - len(self.pending)
        self.skipped_unsuccessful = sum(not self.out.results[key] for key, _ in items if key in self.out.results)
        self.skipped_failed = sum(self.out.results.get(key, False) is None for key, _ in items)
        self.counts = {"finished": 0, "succeeded": 0, "failed": 0}
        self.progress = _Progress(progress, len(self.pending))
        self.seconds = self.startup_seconds = self.cpu_seconds = 0.0
        self.workers = 1

    async def drive(self) -> None:
        started = time.monotonic()
        try:
            with self.progress:
                if not self.pending:
                    pass
                elif self.backend == "asyncio":
                    self.progress.running()
                    cpu_started = time.process_time()
                    await _in_slots(self.pending, self.concurrency, self._run_here, self.write)
                    self.cpu_seconds = time.process_time() - cpu_started
                else:
                    await self._run_on_ray()
        finally:
            self.out.close()
            self.seconds = time.monotonic() - started - self.startup_seconds

    async def _run_here(self, slot: int, key: str, inputs: dict[str, Any]) -> Record:
        return await _run_example(self.program, context.ExampleInfo(key, "asyncio", self.origin), inputs,
                                  self.metric, self.options)

    async def _run_on_ray(self) -> None:
        started = time.monotonic()
        ray = _import_ray(self.address)
        started_here = not ray.is_initialized()
        if started_here:
            _start_ray(ray, self.address)
        actors = None
        try:
            shared = (self.program, self.lm, self.adapter, self.metric, self.options, tracing.worker_settings())
            actors = _Actors(ray, shared, self.concurrency, len(self.pending), self.origin)
            cpu_before = await actors.cpu_seconds()  # once each actor has built its program and LM
            self.startup_seconds, self.workers = time.monotonic() - started, len(actors.actors)
            self.progress.running()
            await _in_slots(self.pending, len(actors.owners), actors.run_one, self.write)
            cpu_after = await actors.cpu_seconds()
            self.cpu_seconds = sum(after - before for before, after in zip(cpu_before, cpu_after, strict=True))
        finally:
            if actors is not None:
                actors.stop()
            if started_here:
                ray.shutdown()

    def write(self, record: Record) -> None:
        self.out.append(record)
        failed = "error" in record
        self.counts["failed" if failed else "finished"] += 1
        self.counts["succeeded"] += bool(record.get("success"))
        self.progress.advance(bool(record.get("success")))

    def summary(self) -> BatchSummary:
        return BatchSummary(skipped=self.skipped, skipped_unsuccessful=self.skipped_unsuccessful,
                            skipped_failed=self.skipped_failed,
                            seconds=self.seconds, startup_seconds=self.startup_seconds,
                            cpu_seconds=self.cpu_seconds, workers=self.workers, **self.counts)

    def interrupted(self) -> str:
        done = self.skipped + self.counts["finished"] + self.counts["failed"]
        total = self.skipped + len(self.pending)
        return (f"interrupted: {done} of {total} examples are done, in {self.out.path}; the same batch run again "
                "resumes from there")


# --- running: slots that take the next example, and the one path that runs an example -----------------------


async def _in_slots(pending: list[tuple[str, dict[str, Any]]], concurrency: int,
                    run_one: Callable[[int, str, dict[str, Any]], Awaitable[Record]],
                    write: Callable[[Record], None]) -> None:
    """Run the pending examples in `concurrency` slots, each taking the next example when its last one is
    recorded. A `ConfigurationError` stops them all, naming the example; so does a cancellation (Ctrl-C)."""
    queue = iter(pending)

    async def slot(number: int) -> None:
        for key, inputs in queue:  # one shared iterator: each slot takes the next example
            try:
                record = await run_one(number, key, inputs)
            except ConfigurationError as exc:
                raise ConfigurationError(f"example {key!r}: {exc} (the batch stopped there; what is recorded "
                                         "stays done)") from exc
            write(record)

    tasks = [asyncio.create_task(slot(number)) for number in range(min(concurrency, len(pending)))]
    if not tasks:
        return
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


_example: contextvars.ContextVar[str | None] = contextvars.ContextVar("loops_batch_example", default=None)


def current_example() -> str | None:
    """The id of the example whose loop runs in this context (an observer of a batch's runs tells them apart so),
    None outside a batch's example."""
    return _example.get()


async def _run_example(program: dspy.Module, example: context.ExampleInfo, inputs: dict[str, Any],
                       metric: Callable[..., Any] | None, options: Mapping[str, Any]) -> Record:
    """One example, on either backend: its record, or its failure's; a `ConfigurationError` propagates. Its
    observers hear of it (`loops.observers.tracing` gives it a trace of its own), however it ends."""
    observers = context.observers()
    if not observers:
        return await _example_record(program, example.key, inputs, metric, options)
    context.notify("example_started", example, to=observers)
    try:
        with context.scopes(example, to=observers):
            record = await _example_record(program, example.key, inputs, metric, options)
    except BaseException as exc:
        context.notify("example_finished", example, None, exc, to=observers)
        raise
    context.notify("example_finished", example, record, None, to=observers)
    return record


async def _example_record(program: dspy.Module, key: str, inputs: dict[str, Any],
                          metric: Callable[..., Any] | None, options: Mapping[str, Any]) -> Record:
    started = time.monotonic()
    token = _example.set(key)
    try:
        recording = {"run_id": key} if "checkpoint" in options else {}
        prediction = await program.acall(**inputs, **options, **recording)
    except ConfigurationError:
        raise
    except Exception as exc:  # recorded, never fatal: the batch goes on
        return _failure(key, inputs, exc, time.monotonic() - started)
    finally:
        _example.reset(token)
    return _record(key, inputs, prediction, time.monotonic() - started, metric)


# --- Ray: a local instance on loopback, or a running cluster; async actors ------------------------------------


def _import_ray(address: str | None) -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network but the cluster's own
    if _on_loopback(address) and "ray" not in sys.modules:
        # Ray advertises (and its servers listen on) the machine's network address unless it is told it is one
        # machine alone; it reads this when imported. Then its node is 127.0.0.1 and every server binds there.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("the ray backend needs Ray, which is not installed. Fix: pip install "
                                     "'loops[ray]'") from None
    return ray


def _on_loopback(address: str | None) -> bool:
    if address in (None, "local"):
        return True
    host = urlsplit(address if "://" in address else f"//{address}").hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")


def _start_ray(ray: Any, address: str | None) -> None:
    if address not in (None, "local", "auto"):
        _check_answers(address)
    try:
        # "local", not None: with no address Ray joins a cluster `ray start` left on this machine instead of
        # starting the local instance this batch owns (and shuts down).
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise ConfigurationError(f"no Ray cluster answers at address {address!r}: {exc} Start one with `ray start "
                                 "--head` (docs/scale.md), or leave the address out for a local instance") from None
    node = ray.util.get_node_ip_address()
    if address is None and node != "127.0.0.1":
        _log.warning("the local Ray instance listens on %s, not only on 127.0.0.1: Ray was imported before "
                     "loops.batch could keep it on loopback. Set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before "
                     "importing ray to keep it on this machine.", node)


def _check_answers(address: str) -> None:
    """A mistyped address fails now, in a line: Ray itself would retry it for minutes, warning all along."""
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ConfigurationError(f"address {address!r} is not a Ray cluster's host:port (e.g. 10.0.0.5:6379, or "
                                 "ray://10.0.0.5:10001)")
    try:
        socket.create_connection((parts.hostname, port), timeout=5).close()
    except OSError as exc:
        raise ConfigurationError(f"no Ray cluster answers at address {address!r} ({exc.strerror or exc}): start one "
                                 "with `ray start --head` (docs/scale.md), or leave the address out for a local "
                                 "instance") from None


class _Actors:
    """The batch's Ray actors: one per CPU of the cluster (fewer if `concurrency` is smaller), each
    running its share of the loops at once on its event loop (its max_concurrency), the shares adding up to
    `concurrency`. Twice as many examples are handed out as run (`owners`: each slot's actor): the other half
    waits in the actors, so that an actor starts its next loop the moment one ends, not a round trip later."""

    def __init__(self, ray: Any, shared: tuple[Any, ...], concurrency: int, pending: int, origin: dict[str, str]):
        count = max(1, min(concurrency, int(ray.cluster_resources().get("CPU", 1)), pending))
        self.origin = origin
        self.ray, self.shares = ray, [concurrency // count + (number < concurrency % count) for number in range(count)]
        self.worker, self.shared = ray.remote(num_cpus=1)(_Worker), ray.put(shared)
        self.actors = [self._new(number) for number in range(count)]
        self.owners = [number for number, share in enumerate(self.shares) for _ in range(2 * share)]

    def _new(self, number: int) -> Any:
        return self.worker.options(max_concurrency=self.shares[number]).remote(self.shared)

    async def cpu_seconds(self) -> list[float]:
        return await asyncio.gather(*(actor.cpu_seconds.remote() for actor in self.actors))

    async def run_one(self, slot: int, key: str, inputs: dict[str, Any]) -> Record:
        number = self.owners[slot]
        actor = self.actors[number]
        try:
            record, spans = await actor.run.remote(key, inputs, self.origin)
            tracing.export(spans)  # the example's trace, made in the worker, leaves through this process
            return record
        except self.ray.exceptions.RayActorError as exc:  # the actor died: this example's failure, and a new actor
            if self.actors[number] is actor:
                self.actors[number] = self._new(number)
            return _failure(key, inputs, exc, 0.0)
        except self.ray.exceptions.RayTaskError as exc:  # _run_example records all but a ConfigurationError
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            if isinstance(cause, ConfigurationError):
                raise ConfigurationError(str(cause)) from None
            return _failure(key, inputs, cause, 0.0)

    def stop(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)


class _Worker:
    """A Ray actor: many examples at once on its event loop, each in its own workspace, with the program
    and the LM it built once.

    The LM arrives as it is, every setting with it (its kwargs, its profile: adapter, history window), as the
    program's own per-role LMs do, and so does an adapter configured beside it (`dspy.configure(adapter=...)`):
    the embedded model's engine carries no weights (the actor's process loads its own shared model on first
    use), so it needs no rebuilding, which would run another LM than asyncio's."""

    def __init__(self, shared: tuple[Any, ...]):
        self.program, self.lm, self.adapter, self.metric, self.options, traced = shared
        if traced is not None:
            tracing.trace_in_worker(traced)

    async def run(self, key: str, inputs: dict[str, Any], origin: dict[str, str]) -> tuple[Record, list[Any]]:
        """The example's record, and its trace's spans when the batch is traced (`loops.observers.tracing.spans_of`)."""
        example = context.ExampleInfo(key, "ray", origin)
        with dspy.context(lm=self.lm, adapter=self.adapter):
            record = await _run_example(self.program, example, inputs, self.metric, self.options)
        return record, tracing.spans_of(example)

    async def cpu_seconds(self) -> float:
        return time.process_time()


class _Progress:
    """A progress bar with the share of examples that succeeded and loops finished per second (rich), or nothing."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total, self.count, self.succeeded, self.bar, self.task = enabled, total, 0, 0, None, None

    def __enter__(self) -> _Progress:
        return self

    def running(self) -> None:
        """Loops start running now (start-up is over): the bar shows from here, and the rate counts from here."""
        self.started = time.monotonic()
        if self.enabled and self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[succeeded]} succeeded"),
                                TextColumn("{task.fields[rate]} loops/s"), TimeElapsedColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("batch", total=self.total, succeeded="-", rate="-")

    def advance(self, succeeded: bool) -> None:
        self.count += 1
        self.succeeded += succeeded
        if self.bar is not None:
            elapsed = time.monotonic() - self.started
            self.bar.update(self.task, advance=1, succeeded=f"{self.succeeded / self.count:.0%}",
                            rate=f"{self.count / elapsed:.1f}" if elapsed else "-")

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

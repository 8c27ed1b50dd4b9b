"""The run in progress in this context (thread or task): the one place every engine, tool, retry and
DSL primitive reads the run's deadline from, finds the run to report to, and asks before an LM request.

It sits below everything else of the library (it imports only `loops.errors`), so that an engine, a
validator or the DSL can ask "is there a run, how long has it left, may I send this request?" without
importing the runtime. The runtime sets the context when it drives a run (`running`); nothing else does.

Every LM request of a run passes `before_request` first (pydantic-ai's `UsageLimits.check_before_request`
is the shape): the run's deadline and every limit are checked there, and the request is counted there. A
run-aware engine (`RUN_AWARE`: the embedded model's, the server engines) asks before each request it sends,
re-sends included, and bounds each wait by `time_left`; for any other LM the runtime asks for it, before
each LM call DSPy makes (a DSPy callback), and gives the call up at the deadline itself.

A person's time is not the run's: while a role answered by a person (`loops.person`) waits for them, no
deadline fires, and after it every deadline of this context (the run's, those of the runs it runs within,
a DSL program's clock) moves forward by the wait (`paused`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from loops.errors import DeadlinePassed, RequestRefused

__all__ = ["RUN_AWARE", "DeadlinePassed", "Observer", "RequestRefused", "before_request", "current_run", "deadline",
           "given_up", "observers", "observing", "on_pause", "paused", "run_aware", "running", "time_left",
           "within_deadline"]

# The attribute (on an LM or its engine) saying that its engine asks `before_request` before every request it
# sends and ends every wait at the run's deadline by itself.
RUN_AWARE = "loops_run_aware"
_T = TypeVar("_T")


class Observer(Protocol):
    """Receives a run's progress, e.g. to draw a live display. Both methods are optional."""

    def role_started(self, role: str, iteration: int) -> None: ...

    def step_finished(self, step: Any) -> None: ...


_observers: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar("loops_observers", default=())
_current_run: contextvars.ContextVar[Any] = contextvars.ContextVar("loops_current_run", default=None)


class _Until:
    """A run's deadline, shared by every context that runs within it (a worker thread's copy included), so that
    a person's wait moves it for all of them."""

    __slots__ = ("at",)

    def __init__(self, at: float):
        self.at = at

    def shift(self, seconds: float) -> None:
        self.at += seconds


_deadline: contextvars.ContextVar[_Until | None] = contextvars.ContextVar("loops_deadline", default=None)
_pause_listeners: contextvars.ContextVar[tuple[Callable[[float], None], ...]] = contextvars.ContextVar(
    "loops_pause_listeners", default=())


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """Report the progress of every loop run in this context (thread or task) to `observer`."""
    token = _observers.set((*_observers.get(), observer))
    try:
        yield observer
    finally:
        _observers.reset(token)


def observers() -> tuple[Observer, ...]:
    """The observers of this context, innermost last."""
    return _observers.get()


def current_run() -> Any:
    """The run (`loops.Run`) whose phase is executing now, if any: a phase may make role calls that belong
    to it."""
    return _current_run.get()


def deadline() -> float | None:
    """The `time.monotonic()` instant at which the current run's time is up, if it has a timeout.

    An LM backend that can stop mid-generation (the embedded model) checks it between tokens."""
    until = _deadline.get()
    return None if until is None else until.at


def time_left() -> float | None:
    """Seconds until the current run's deadline (0 once it has passed); None without one."""
    until = deadline()
    return None if until is None else max(0.0, until - time.monotonic())


def before_request() -> None:
    """Ask the current run whether one more LM request may be sent, and count it if so: raises
    `RequestRefused` (carrying the `LimitReached`) when the run's time or a limit is spent. Outside a run it
    does nothing. Called before every request, first tries, retries, re-asks and re-sends alike."""
    run = _current_run.get()
    if run is not None:
        run.before_request()


def run_aware(lm: Any) -> bool:
    """Whether `lm`'s engine asks `before_request` itself and stops at the run's deadline (`RUN_AWARE`)."""
    return bool(getattr(lm, RUN_AWARE, False) or getattr(getattr(lm, "engine", None), RUN_AWARE, False))


def given_up(what: str) -> RequestRefused:
    """What an engine raises for a request it gave up at the run's deadline (`what` says which)."""
    return RequestRefused(DeadlinePassed(f"{what} was abandoned at the run's deadline"))


def within_deadline(work: Callable[[], _T], what: str) -> _T:
    """`work()`, given up at the current run's deadline: for a call that cannot stop itself (a blocking read,
    llama.cpp reading a prompt), it runs on a worker thread with this context, and the caller goes on at the
    deadline (`given_up`) while the worker finishes on its own. Without a deadline, just `work()`."""
    until = deadline()
    if until is None:
        return work()
    outcome = _WORKERS.submit(contextvars.copy_context().run, work)
    try:
        return outcome.result(timeout=max(0.0, until - time.monotonic()))
    except concurrent.futures.TimeoutError:
        raise given_up(what) from None


class _Workers:
    """Daemon threads for `within_deadline`: a call gets an idle one, or a new one when none is idle (so calls
    given up and still running never hold others up); one that finishes waits for the next call, up to `keep`
    idle. Not a `ThreadPoolExecutor`: its threads are joined at exit, so a call given up while it hangs would
    hold the process open; and not a new thread per call: DSPy's per-thread state, built again in every new
    thread, cost ~0.25 ms of CPU a call."""

    def __init__(self, keep: int = 8):
        self._idle: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()
        self._keep = keep

    def submit(self, work: Callable[..., _T], *args: Any) -> concurrent.futures.Future:
        outcome: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), daemon=True, name="loops-deadline").start()
        inbox.put((work, args, outcome))
        return outcome

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        me = threading.current_thread()
        while True:
            work, args, outcome = inbox.get()
            me.name = "loops-deadline (busy)"
            try:
                outcome.set_result(work(*args))
            except BaseException as exc:  # handed to the caller, who re-raises it
                outcome.set_exception(exc)
            me.name = "loops-deadline"
            with self._lock:
                if len(self._idle) >= self._keep:
                    return
                self._idle.append(inbox)


_WORKERS = _Workers()


@contextlib.contextmanager
def running(run: Any, until: float | None) -> Iterator[None]:
    """Make `run` the current run of this context, with its deadline, for the duration of the block; a
    person's wait in it (`paused`) moves that deadline."""
    shared = None if until is None else _Until(until)
    run_token, deadline_token = _current_run.set(run), _deadline.set(shared)
    try:
        with contextlib.nullcontext() if shared is None else on_pause(shared.shift):
            yield
    finally:
        _current_run.reset(run_token)
        _deadline.reset(deadline_token)


@contextlib.contextmanager
def on_pause(listener: Callable[[float], None]) -> Iterator[None]:
    """Tell `listener(seconds)` of every wait for a person in this context (`paused`): a clock of its own (a run's
    start, a DSL program's deadline) moves forward by it."""
    token = _pause_listeners.set((*_pause_listeners.get(), listener))
    try:
        yield
    finally:
        _pause_listeners.reset(token)


def paused(seconds: float) -> None:
    """A person took `seconds` to answer: the run's deadline, those of the runs it runs within and every other
    clock listening in this context (`on_pause`) move forward by them, so that the wait is not charged."""
    for listener in _pause_listeners.get():
        listener(seconds)

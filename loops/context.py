"""The run in progress in this context (thread or task): the one place every engine, tool, retry and
DSL primitive reads the run's deadline from, and finds the run to report to.

It sits below everything else of the library (it imports only `loops.errors`), so that an engine, a
validator or the DSL can ask "is there a run, and how long has it left?" without importing the runtime.
The runtime sets the context when it drives a run (`running`); nothing else does.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from typing import Any, Protocol

from loops.errors import DeadlinePassed

__all__ = ["DeadlinePassed", "Observer", "current_run", "deadline", "observers", "observing", "running", "time_left"]


class Observer(Protocol):
    """Receives a run's progress, e.g. to draw a live display. Both methods are optional."""

    def role_started(self, role: str, iteration: int) -> None: ...

    def step_finished(self, step: Any) -> None: ...


_observers: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar("loops_observers", default=())
_current_run: contextvars.ContextVar[Any] = contextvars.ContextVar("loops_current_run", default=None)
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("loops_deadline", default=None)


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
    return _deadline.get()


def time_left() -> float | None:
    """Seconds until the current run's deadline (0 once it has passed); None without one."""
    until = _deadline.get()
    return None if until is None else max(0.0, until - time.monotonic())


@contextlib.contextmanager
def running(run: Any, until: float | None) -> Iterator[None]:
    """Make `run` the current run of this context, with its deadline, for the duration of the block."""
    run_token, deadline_token = _current_run.set(run), _deadline.set(until)
    try:
        yield
    finally:
        _current_run.reset(run_token)
        _deadline.reset(deadline_token)

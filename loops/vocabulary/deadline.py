"""A run's one clock: when it started, how long it has taken, and the instant its time is up.

One `Deadline` serves the run, `loops.vocabulary.context` (what engines, tools and the DSL read through
`context.deadline()` and `context.time_left()`) and the run's budget checks; a person's wait moves it once
(`shift`), for every reader at the same time, since they all hold the same object.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Deadline"]


class Deadline:
    """When a run's time is up: `at`, a `time.monotonic()` instant (None without a timeout), and how long the
    run has taken (`elapsed`, on `clock`, which a test may replace)."""

    __slots__ = ("at", "clock", "started")

    def __init__(self, timeout_s: float | None, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.started = clock()
        self.at = None if timeout_s is None else time.monotonic() + timeout_s

    def elapsed(self) -> float:
        """Seconds the run has taken, a person's waits apart."""
        return self.clock() - self.started

    def left(self) -> float | None:
        """Seconds until `at` (0 once it has passed); None without one."""
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def shift(self, seconds: float) -> None:
        """A person took `seconds` to answer: the wait is not the run's time."""
        self.started += seconds
        if self.at is not None:
            self.at += seconds

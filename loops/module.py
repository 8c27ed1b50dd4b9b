"""The base of every loop module: budgets and retries set once, overridable per call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dspy

from loops.budget import Budget, RetryPolicy
from loops.runtime import Program, Run, adrive, drive


class LoopModule(dspy.Module):
    """A `dspy.Module` whose `forward` and `aforward` drive one loop, `_loop`, written once.

    Subclasses define `_loop(self, run, **inputs)` (a generator; see `loops.runtime`) and the
    fields of an empty result (`result_defaults`), and call `self._forward(...)` /
    `self._aforward(...)` from their `forward` / `aforward`. Any `Budget` limit can be passed as a
    keyword to a call (`module(requirements=..., max_iterations=5, timeout_s=30)`), or a whole
    `budget=Budget(...)`.
    """

    result_defaults: dict[str, Any] = {}

    def __init__(
        self,
        *,
        max_iterations: int | None = None,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
        strict: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self.budget = (budget or Budget()).override(max_iterations=max_iterations)
        self.retry = retry or RetryPolicy()
        self.strict = strict
        self.clock = clock

    def _forward(self, limits: dict[str, Any], **inputs: Any) -> dspy.Prediction:
        return drive(self._program(limits, inputs))

    async def _aforward(self, limits: dict[str, Any], **inputs: Any) -> dspy.Prediction:
        return await adrive(self._program(limits, inputs))

    def _program(self, limits: dict[str, Any], inputs: dict[str, Any]) -> Program:
        budget = limits.pop("budget", None) or self.budget
        run = Run(
            module=self,
            budget=budget.override(**limits),
            retry=self.retry,
            clock=self.clock,
            strict=self.strict,
            defaults=dict(self.result_defaults),
        )
        return run.program(self._loop, **inputs)

    def _loop(self, run: Run, **inputs: Any) -> Program:
        raise NotImplementedError

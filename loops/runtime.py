"""The one loop runtime shared by every pattern (and by the DSL).

A pattern writes its control flow once, as a generator that delegates every role call to the run::

    def _loop(self, run, requirements):
        draft = (yield from run.call("creator", requirements=requirements)).draft
        ...
        return run.finish("approved")

The generator yields low-level operations (call a role, wait before a retry). `drive` performs them
synchronously, for `forward()` (what DSPy optimizers call); `adrive` performs the very same
operations asynchronously, for `aforward()`. Budgets, retries, per-role histories, the trace and
graceful stops live in `Run`, written once for both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import json
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import dspy
from dspy.utils import exceptions as dspy_errors
from dspy.utils.usage_tracker import track_usage

from loops.budget import Budget, RetryPolicy
from loops.errors import LimitReached, RoleFailed, RunError

STOP_REASONS = ("approved", "completed", "stopped", "max_iterations", "timeout", "context_limit",
                "lm_calls", "error")
LIMIT_REASONS = frozenset({"max_iterations", "timeout", "context_limit", "lm_calls"})

_TRANSIENT_ERRORS = (
    dspy_errors.LMRateLimitError,
    dspy_errors.LMTimeoutError,
    dspy_errors.LMServerError,
    dspy_errors.LMTransportError,
    TimeoutError,
    ConnectionError,
)
# LiteLLM's exception classes, matched by name so the local path never has to import litellm.
_TRANSIENT_NAMES = frozenset({"RateLimitError", "Timeout", "APITimeoutError", "APIConnectionError",
                              "ServiceUnavailableError", "InternalServerError"})


def is_transient(error: BaseException) -> bool:
    """Whether trying the same LM call again later may succeed."""
    if isinstance(error, _TRANSIENT_ERRORS):
        return True
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__)


def is_unparseable(error: BaseException) -> bool:
    return isinstance(error, dspy_errors.AdapterParseError)


@dataclass
class Step:
    """One role call of a run, as it appears in `prediction.trace`."""

    role: str
    iteration: int
    inputs: dict[str, Any]
    outputs: dict[str, Any] | None
    seconds: float
    attempts: int = 1
    lm_calls: int = 0
    tokens: dict[str, int] | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (values JSON cannot hold are rendered as text)."""
        return json.loads(json.dumps(asdict(self), default=_jsonable))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "toDict"):
        return value.toDict()
    return str(value)


class Observer(Protocol):
    """Receives a run's progress, e.g. to draw a live display. Both methods are optional."""

    def role_started(self, role: str, iteration: int) -> None: ...

    def step_finished(self, step: Step) -> None: ...


_observers: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar("loops_observers", default=())


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """Report the progress of every loop run in this context (thread or task) to `observer`."""
    token = _observers.set((*_observers.get(), observer))
    try:
        yield observer
    finally:
        _observers.reset(token)


# --- the operations a run's generator yields, and the two drivers that perform them ---------------


@dataclass(frozen=True)
class _Invoke:
    target: Any
    args: tuple
    kwargs: dict[str, Any]
    adapter: dspy.Adapter | None = None

    def _context(self) -> contextlib.AbstractContextManager:
        return dspy.context(adapter=self.adapter) if self.adapter is not None else contextlib.nullcontext()

    def perform(self) -> tuple[Any, int, dict[str, int] | None]:
        with track_usage() as usage, self._context():
            result = self.target(*self.args, **self.kwargs)
            if inspect.isawaitable(result):
                result = _run_coroutine(result)
        return (result, *_usage_summary(usage))

    async def aperform(self) -> tuple[Any, int, dict[str, int] | None]:
        with track_usage() as usage, self._context():
            if isinstance(self.target, dspy.Module) and hasattr(self.target, "aforward"):
                result = await self.target.acall(*self.args, **self.kwargs)
            elif inspect.iscoroutinefunction(self.target):
                result = await self.target(*self.args, **self.kwargs)
            else:
                # A plain phase (a validator running tests, say) may block: keep the event loop free.
                result = await asyncio.to_thread(self.target, *self.args, **self.kwargs)
                if inspect.isawaitable(result):
                    result = await result
        return (result, *_usage_summary(usage))


@dataclass(frozen=True)
class _Sleep:
    seconds: float

    def perform(self) -> None:
        time.sleep(self.seconds)

    async def aperform(self) -> None:
        await asyncio.sleep(self.seconds)


def _run_coroutine(awaitable: Any) -> Any:
    """An async phase driven by the synchronous `forward`, even inside a running event loop (Jupyter)."""
    async def wait() -> Any:
        return await awaitable
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(contextvars.copy_context().run, asyncio.run, wait()).result()


def _usage_summary(usage: Any) -> tuple[int, dict[str, int] | None]:
    entries = [entry for per_lm in usage.usage_data.values() for entry in per_lm]
    if not entries:
        return 0, None
    tokens = {"input": 0, "output": 0}
    for entry in entries:
        tokens["input"] += int(entry.get("prompt_tokens") or 0)
        tokens["output"] += int(entry.get("completion_tokens") or 0)
    return len(entries), tokens


Program = Generator[Any, Any, Any]


def drive(program: Program) -> Any:
    """Run a loop program synchronously and return its result."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            operation = program.throw(error) if error is not None else program.send(reply)
        except StopIteration as done:
            return done.value
        reply, error = None, None
        try:
            reply = operation.perform()
        except Exception as exc:
            error = exc


async def adrive(program: Program) -> Any:
    """Run a loop program asynchronously and return its result; the same program `drive` runs."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            operation = program.throw(error) if error is not None else program.send(reply)
        except StopIteration as done:
            return done.value
        reply, error = None, None
        try:
            reply = await operation.aperform()
        except Exception as exc:
            error = exc


# --- one run ------------------------------------------------------------------------------------


@dataclass
class Run:
    """The state of one loop run: never stored on the module, so concurrent runs share nothing."""

    module: dspy.Module
    budget: Budget
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    clock: Callable[[], float] = time.monotonic
    strict: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.iteration = 0
        self.lm_calls = 0
        self.context_chars = 0
        self.turns: dict[str, list[dict[str, Any]]] = {}
        self.trace: list[Step] = []
        self.warnings: list[str] = []
        self.best: dict[str, Any] | None = None
        self.best_score: Any = None
        self.current: dict[str, Any] = {}
        self.error: BaseException | None = None
        self._context_warned = False
        self._observers = _observers.get()

    # What patterns call -------------------------------------------------------------------------

    def call(self, role: str, config: dict[str, Any] | None = None, adapter: dspy.Adapter | None = None,
             **inputs: Any) -> Program:
        """Call the LLM role `role` with keyword `inputs` plus that role's own history; returns its result.

        `config` is passed to the predictor (e.g. a temperature) and `adapter` replaces the context's
        adapter for this call; neither appears in the trace. Retries transient failures and
        unparseable answers per the retry policy; raises `LimitReached` when the budget is spent and
        `RoleFailed` when the role fails for good.
        """
        return self._call(role, inputs, config=config, remember=True, adapter=adapter)

    def call_phase(self, role: str, phase: Any = None, /, **contract_args: Any) -> Program:
        """Call a pluggable phase (a callable or a user's `dspy.Module`; the module's `role` attribute
        unless `phase` is given) with the contract's arguments, positionally and in order, so any
        parameter names work; returns what it returns."""
        return self._call(role, contract_args, config=None, remember=False, target=phase)

    def forget(self, role: str) -> None:
        """Start `role` over with an empty history (e.g. for a fresh attempt rather than a repair)."""
        self.turns.pop(role, None)

    def _call(self, role: str, inputs: dict[str, Any], *, config: dict[str, Any] | None, remember: bool,
              target: Any = None, adapter: dspy.Adapter | None = None) -> Program:
        """`remember` marks an LLM role: keyword inputs, its own history, at least one LM call per attempt.
        Otherwise a pluggable phase: the inputs go positionally, in the contract's order."""
        target = target if target is not None else getattr(self.module, role)
        self._check_limits()
        history_field = _history_field(target) if remember else None
        args = () if remember else tuple(inputs.values())
        kwargs = dict(inputs) if remember else {}
        if history_field is not None:
            kwargs[history_field] = dspy.History(messages=list(self.turns.get(role, [])))
        if config:
            kwargs["config"] = dict(config)
        self._notify("role_started", role, self.iteration)
        started = self.clock()
        attempts = parse_failures = lm_calls = 0
        while True:
            attempts += 1
            try:
                result, calls, tokens = yield _Invoke(target, args, kwargs, adapter)
                lm_calls += calls
                break
            except Exception as exc:
                lm_calls += 1 if remember else 0
                if is_unparseable(exc) and parse_failures < self.retry.parse_retries:
                    parse_failures += 1
                    # A new rollout at some temperature: the same request would get the same answer.
                    kwargs["config"] = {**(config or {}), "temperature": self.retry.parse_retry_temperature,
                                        "rollout_id": parse_failures}
                    self.warn(f"{role}: answer could not be parsed; asked again")
                    continue
                if is_transient(exc) and attempts < self.retry.attempts:
                    yield _Sleep(self.retry.delay_s(attempts))
                    self._check_limits()  # the wait may have spent the rest of the budget
                    continue
                self.lm_calls += lm_calls
                self._record(Step(role, self.iteration, inputs, None, self.clock() - started, attempts,
                                  lm_calls, None, f"{type(exc).__name__}: {exc}"))
                what = "its answer could not be parsed" if is_unparseable(exc) else _describe(exc)
                raise RoleFailed(role, f"{role} failed after {attempts} attempt(s): {what}") from exc
        if remember:
            lm_calls = max(lm_calls, attempts)  # a cached answer reports no usage but was still a call
        self.lm_calls += lm_calls
        outputs = _outputs_of(result)
        if history_field is not None:
            turn = {**inputs, **outputs}
            self.turns.setdefault(role, []).append(turn)
            self._grow_context(len(json.dumps(turn, default=str)))
        self._record(Step(role, self.iteration, inputs, outputs, self.clock() - started, attempts,
                          lm_calls, tokens))
        return result

    def next_iteration(self) -> bool:
        """Start another iteration if the budget allows one; False at `max_iterations`."""
        if self.iteration >= self.budget.max_iterations:
            return False
        self.iteration += 1
        return True

    def keep(self, score: Any, **result: Any) -> None:
        """Offer a candidate result; the best by `score` (ties: the latest) ends a run cut short."""
        if self.best is None or score >= self.best_score:
            self.best, self.best_score = result, score

    def update(self, **result: Any) -> None:
        """Set result fields that any finish returns, over the best candidate's (e.g. the latest attempt)."""
        self.current.update(result)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def finish(self, stop_reason: str, **result: Any) -> dspy.Prediction:
        """The run's prediction: `result` over the fields set by `update` over the best candidate."""
        if stop_reason == "max_iterations":
            self.warn(f"stopped at max_iterations={self.budget.max_iterations}")
        fields = {**self.defaults, **(self.best or {}), **self.current, **result}
        prediction = dspy.Prediction(
            **fields,
            iterations=self.iteration,
            stop_reason=stop_reason,
            warnings=list(self.warnings),
            trace=list(self.trace),
            histories={role: dspy.History(messages=list(turns)) for role, turns in self.turns.items()},
            lm_calls=self.lm_calls,
            error=self.error,
        )
        if self.strict and stop_reason in LIMIT_REASONS:
            limit = LimitReached(stop_reason, self.warnings[-1] if self.warnings else stop_reason)
            limit.prediction = prediction
            raise limit
        return prediction

    # What the module's forward/aforward hand to a driver ------------------------------------------

    def program(self, loop: Callable[..., Program], **inputs: Any) -> Program:
        """The pattern's loop wrapped so that a limit or a failure ends it with the work kept."""
        try:
            return (yield from loop(self, **inputs))
        except LimitReached as limit:
            self.warn(str(limit))
            return self.finish(limit.reason)
        except Exception as exc:
            self.error = exc
            self.warn(f"stopped by an error: {_describe(exc)}")
            prediction = self.finish("error")
            if self.strict:
                if not isinstance(exc, RunError):
                    raise
                exc.prediction = prediction
                raise
            return prediction

    # Internals ----------------------------------------------------------------------------------

    def _check_limits(self) -> None:
        budget = self.budget
        elapsed = self.clock() - self.started
        if budget.timeout_s is not None and elapsed >= budget.timeout_s:
            raise LimitReached("timeout", f"stopped after {elapsed:.1f}s: timeout_s={budget.timeout_s} reached")
        if budget.max_lm_calls is not None and self.lm_calls >= budget.max_lm_calls:
            raise LimitReached("lm_calls", f"stopped after {self.lm_calls} LM calls: max_lm_calls reached")
        if budget.max_context_chars is not None and self.context_chars >= budget.max_context_chars:
            raise LimitReached(
                "context_limit",
                f"stopped: role histories hold {self.context_chars} chars, "
                f"max_context_chars={budget.max_context_chars}",
            )

    def _grow_context(self, chars: int) -> None:
        self.context_chars += chars
        limit = self.budget.max_context_chars
        warn_at = None if limit is None else self.budget.context_warning_ratio * limit
        if warn_at is not None and not self._context_warned and self.context_chars >= warn_at:
            self._context_warned = True
            self.warn(f"role histories hold {self.context_chars} chars, "
                      f"{self.context_chars / limit:.0%} of max_context_chars={limit}")

    def _record(self, step: Step) -> None:
        self.trace.append(step)
        self._notify("step_finished", step)

    def _notify(self, event: str, *args: Any) -> None:
        for observer in self._observers:
            handler = getattr(observer, event, None)
            if handler is not None:
                handler(*args)


def _history_field(target: Any) -> str | None:
    """The name of the `dspy.History` input of a predictor's signature, if it has one."""
    predictors = target.predictors() if isinstance(target, dspy.Module) else []
    if isinstance(target, dspy.Predict):
        predictors = [target]
    if len(predictors) != 1:
        return None
    for name, info in predictors[0].signature.input_fields.items():
        if info.annotation is dspy.History:
            return name
    return None


def _outputs_of(result: Any) -> dict[str, Any]:
    if isinstance(result, dspy.Prediction):
        return dict(result.items())
    return {"result": result}


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")

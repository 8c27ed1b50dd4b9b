"""The one loop runtime shared by every pattern (and by the DSL).

A pattern writes its control flow once, as a generator that delegates every role call to the run::

    def _loop(self, run, requirements, context) -> RoleCalls:
        draft = (yield from run.call("creator", requirements=requirements, context=context)).draft
        ...
        return run.finish("approved")

The generator yields low-level operations (call a role, wait before a retry). `drive` performs them
synchronously, for `forward()` (what DSPy optimizers call); `adrive` performs the very same
operations asynchronously, for `aforward()`. Budgets, retries, per-role histories, the trace and
graceful stops live in `Run`, written once for both.

A role may be answered by a person (`loops.person`): their turn is a call like an LLM role's, traced,
kept in the role's history and recorded; when nobody can answer, the run pauses ("awaiting_input").

The runtime knows a model only by its profile (`loops.profile`: adapter, history window, price) and
renders its results through `loops.display`; it imports no model module and no notebook code. The run
in progress, with its deadline, is published in `loops.context` for engines, tools and the DSL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import json
import linecache
import logging
import sysconfig
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import dspy
from dspy.utils import exceptions as dspy_errors
from dspy.utils.callback import ACTIVE_CALL_ID, BaseCallback
from dspy.utils.usage_tracker import UsageTracker

from loops import checkpoint, context, display, person, profile
from loops.adapters import historyless_once
from loops.budget import Budget, RetryPolicy
from loops.checks import Check, CheckReport, run_checks
from loops.contracts import PhaseContract
from loops.demos import curate_trace, demos_without_history
from loops.errors import (
    AwaitingInput,
    ConfigurationError,
    DeadlinePassed,
    LimitReached,
    LoopsError,
    RequestRefused,
    RoleFailed,
    RunError,
)

__all__ = [
    "LIMIT_REASONS",
    "RESULT_FIELDS",
    "STOP_REASONS",
    "UNSET",
    "LoopResult",
    "RoleCalls",
    "Run",
    "Step",
    "StopReason",
    "adrive",
    "condense_turns",
    "drive",
    "failure_action",
    "is_transient",
    "outside_the_gate",
    "predictor_of",
    "setup_error",
]

StopReason = Literal["approved", "stopped", "completed", "no_progress", "max_iterations", "timeout", "context_limit",
                     "lm_calls", "tokens", "cost", "error", "awaiting_input"]
STOP_REASONS: Mapping[str, str] = {
    "approved": "the critic approved the draft (Creator–Critic–Iterator)",
    "stopped": "the controller decided to stop, or the evaluator passed the result (Execute–Validate, Director)",
    "completed": "a DSL program ran to its end, no loop form deciding its outcome, or gave its own verdict",
    "no_progress": "every candidate of an iteration repeated code already tried (Execute–Validate)",
    "max_iterations": "the iteration budget ran out",
    "timeout": "the run's wall-clock budget (timeout_s) ran out",
    "context_limit": "the role histories reached max_context_chars, or a prompt would not fit the model's context "
                     "window (the embedded model's, counted before it is sent)",
    "lm_calls": "the LM request budget (max_lm_calls) ran out",
    "tokens": "the token budget (max_tokens, input plus output as the LMs report them) ran out",
    "cost": "the cost budget (max_cost_usd) ran out",
    "error": "a role or phase failed for good; the cause is on `error`",
    "awaiting_input": "a role answered by a person had nobody to answer it: the run paused, its checkpoint holding "
                      "the question (`question`); answer it and resume the run",
}
assert set(STOP_REASONS) == set(get_args(StopReason))
LIMIT_REASONS = frozenset({"max_iterations", "timeout", "context_limit", "lm_calls", "tokens", "cost"})
RESULT_FIELDS = ("final", "success", "best_attempt", "iterations", "stop_reason", "warnings", "trace", "histories",
                 "lm_calls", "error")

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
# A developer's mistake that surfaces only when the LM is called: no retry can fix it.
_SETUP_ERRORS = (
    dspy_errors.LMConfigurationError,
    dspy_errors.LMAuthError,
    dspy_errors.LMBillingError,
    dspy_errors.LMUnsupportedModelError,
    dspy_errors.LMUnsupportedFeatureError,
)
_SETUP_NAMES = frozenset({"AuthenticationError", "PermissionDeniedError", "NotFoundError", "BadRequestError"})
_CHAT_ADAPTER = dspy.ChatAdapter()  # DSPy's default, where neither the call nor the context sets one


def is_transient(error: BaseException) -> bool:
    """Whether trying the same LM call again later may succeed."""
    if isinstance(error, _TRANSIENT_ERRORS):
        return True
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__)


def is_unparseable(error: BaseException) -> bool:
    return isinstance(error, dspy_errors.AdapterParseError)


def setup_error(error: BaseException) -> ConfigurationError | None:
    """The developer's mistake behind an exception raised by a role call (no LM, a rejected key, an
    unknown model), as a `ConfigurationError`; None for a failure during the run."""
    if isinstance(error, ConfigurationError):
        return error
    if isinstance(error, ValueError) and "No LM is loaded" in str(error):
        return ConfigurationError("no LM is configured: call dspy.configure(lm=...) (e.g. loops.lm.local_lm() for "
                                  "the embedded offline model) or pass one with dspy.context(lm=...)")
    if isinstance(error, _SETUP_ERRORS) or any(cls.__name__ in _SETUP_NAMES for cls in type(error).__mro__):
        return ConfigurationError(f"the LM refused the request, which no retry can fix: {_describe(error)}; check "
                                  "the model name, the API key and the provider's settings")
    return None


@dataclass(slots=True)
class Step:
    """One role call of a run, as it appears in `prediction.trace` (and reaches observers and `--trace`).

    `lm_calls` are the LM requests the call sent, `cached` the LM calls DSPy's cache answered instead,
    `tokens` and `cost_usd` what its requests used (those of the calls made within it included); `note` what
    the loop made of it (a verdict it did not take at its word, code it did not test again); `replayed`
    marks a step answered from a checkpoint's record, whose counts are those of the process that recorded
    it; `human` a person's answer (`loops.person`), whose `seconds` are the person's; `depth` how many calls
    it ran within (0 for a call of the pattern; 1 for a role call a phase made, such as a DSL atom called
    in a loop's phase, or a call of a loop form's run within its program); `started_at` when the call started
    (seconds since the epoch, `time.time()`; a replayed step keeps the time it first ran), from which a run's
    timeline is drawn."""

    role: str
    iteration: int
    inputs: dict[str, Any]
    outputs: dict[str, Any] | None
    seconds: float
    attempts: int = 1
    lm_calls: int = 0
    tokens: dict[str, int] | None = None
    error: str | None = None
    note: str | None = None
    cached: int = 0
    cost_usd: float | None = None
    replayed: bool = False
    human: bool = False
    depth: int = 0
    started_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (values JSON cannot hold are rendered as text)."""
        return json.loads(json.dumps(asdict(self), default=_jsonable))

    def __repr__(self) -> str:
        # One short line: a trace holds dozens of steps, and their inputs hold whole histories of drafts.
        tokens = f", tokens={self.tokens['input']}/{self.tokens['output']}" if self.tokens else ""
        return (f"Step({self.role!r}, iteration={self.iteration}, {self.seconds:.1f}s{tokens}, "
                f"{display.step_outcome(self)!r})")

    def _repr_html_(self) -> str:
        return display.step_html(self)


class LoopResult(dspy.Prediction):
    """What every loop returns: a `dspy.Prediction` with `RESULT_FIELDS`, `tokens`, `cost_usd` and the
    pattern's aliases, which shows itself briefly. Its repr is a few lines (the trace and histories are
    counted, not dumped); in Jupyter it is a summary, the trace as a table and each role's history
    folded (`loops.display`). It equals a plain `dspy.Prediction` with the same fields."""

    def __repr__(self) -> str:
        return display.result_text(self)

    def _repr_html_(self) -> str:
        return display.result_html(self)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "toDict"):
        return value.toDict()
    return str(value)


class _Unset:
    """The one "not given" marker; it stays itself when an optimizer deep-copies or pickles a module."""

    def __repr__(self) -> str:
        return "<unset>"

    def __copy__(self) -> _Unset:
        return self

    def __deepcopy__(self, memo: dict) -> _Unset:
        return self

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # a limit or option not given: the default applies


# --- the operations a run's generator yields, and the two drivers that perform them ---------------


@dataclass(slots=True)
class _Invoke:
    target: Any
    args: tuple
    kwargs: dict[str, Any]
    adapter: dspy.Adapter | None = None
    deadline: float | None = None
    llm: bool = False  # an LLM role's call
    run_aware: bool = False  # its LM's engine asks the run before each request and stops at the deadline itself
    observed: tuple[context.CallInfo, tuple[Any, ...]] | None = None  # the call and its run's observers

    def _context(self) -> contextlib.AbstractContextManager:
        """The adapter, and DSPy's callbacks with the run's gate first, unless the call's requests pass the
        gate without them: its LM asks the run itself, or it is handed the LM gated (`_GatedLM`). A phase's LMs
        are unknown, so a phase is gated by the callback. An enclosing call's gate is taken out, so that a call
        a phase makes is gated once."""
        given = dspy.settings.callbacks or ()
        callbacks = _without_gate(given)
        if not (self.run_aware or isinstance(self.kwargs.get("lm"), _GatedLM)):
            callbacks.insert(0, _GATE)
        if self.adapter is None:
            # DSPy's callback machinery runs on every decorated call once any callback is set: leave it off.
            return contextlib.nullcontext() if len(callbacks) == len(given) else dspy.context(callbacks=callbacks)
        return dspy.context(callbacks=callbacks, adapter=self.adapter)

    def _scopes(self) -> contextlib.AbstractContextManager:
        """What the call's observers hold open while its work runs, in the thread or task that runs it."""
        if self.observed is None:
            return contextlib.nullcontext()
        call, observers = self.observed
        return context.scopes(call, to=observers)

    def perform(self) -> Any:
        try:
            # An LM that cannot stop by itself is given up at the deadline on a worker thread; not while
            # `dspy.streamify` streams, which sends each chunk from the thread it runs the program on (an AnyIO
            # worker thread), where the run's gate still refuses any request past the deadline.
            if self.deadline is not None and self.llm and not self.run_aware and dspy.settings.send_stream is None:
                return context.within_deadline(self._perform, "the LM call")
            return self._perform()
        except RequestRefused as refused:  # the run's limits refused a request of this call
            raise refused.limit from None

    def _perform(self) -> Any:
        with self._context(), self._scopes():
            result = self.target(*self.args, **self.kwargs)
            if inspect.isawaitable(result):
                result = _run_coroutine(result)
        return result

    async def aperform(self) -> Any:
        try:
            if self.deadline is None:
                return await self._acall()
            scope = asyncio.timeout(max(0.0, self.deadline - time.monotonic()))
            try:
                async with scope:
                    return await self._acall()
            except TimeoutError as late:
                if not scope.expired():
                    raise
                raise DeadlinePassed("abandoned at the run's deadline") from late
        except RequestRefused as refused:
            raise refused.limit from None

    async def _acall(self) -> Any:
        with self._context(), self._scopes():
            if isinstance(self.target, dspy.Module) and hasattr(self.target, "aforward"):
                result = await self.target.acall(*self.args, **self.kwargs)
            elif inspect.iscoroutinefunction(self.target):
                result = await self.target(*self.args, **self.kwargs)
            else:
                # A plain phase (a validator running tests, say) may block: keep the event loop free.
                result = await asyncio.to_thread(self.target, *self.args, **self.kwargs)
            if inspect.isawaitable(result):
                result = await result
        return result


@dataclass(frozen=True, slots=True)
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


# A loop, as the generator of operations (role calls, waits) a driver performs.
RoleCalls = Generator[Any, Any, Any]


def drive(program: RoleCalls) -> Any:
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


async def adrive(program: RoleCalls) -> Any:
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


class _UsageLog(UsageTracker):
    """DSPy's usage tracker, also keeping every entry in order (one entry is one LM request answered),
    the tokens they report and what they cost; and which LM calls it heard from (DSPy reports no usage for
    an answer from its cache).

    A model's own price (the embedded model's: free) is always counted. LiteLLM's prices are looked up only
    when `priced` (a cost budget needs them): loading LiteLLM's price map costs seconds, which a run without
    one does not pay, so its cost is then None, unknown, as it is when nobody knows a model's price. Under a
    cost budget a request of unknown price counts as free (`unpriced` says which models)."""

    def __init__(self, priced: bool = False, observers: tuple[Any, ...] = ()) -> None:
        super().__init__()
        self.observers = observers  # told of every answer (`lm_answered`)
        self.entries: list[dict[str, Any]] = []
        self.tokens = 0
        self.priced = priced
        self.cost_usd: float | None = 0.0
        self.unpriced: set[str] = set()
        self.answered: set[str | None] = set()  # DSPy's ids of the LM calls (callbacks) that reported usage

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        call_id = ACTIVE_CALL_ID.get()
        request = _request.get()
        if request is None:
            self.answered.add(call_id)
        else:  # an LM call gated at the LM (`_GatedLM`)
            request.answered = True
        super().add_usage(lm, usage_entry)
        if not usage_entry:
            return
        if self.observers:
            context.notify("lm_answered", call_id, lm, usage_entry, to=self.observers)
        self.entries.append(usage_entry)
        self.tokens += int(usage_entry.get("prompt_tokens") or 0) + int(usage_entry.get("completion_tokens") or 0)
        if self.cost_usd is None:
            return
        price = profile.price_of(lm)
        cost = price(lm, usage_entry) if self.priced or price is not profile.litellm_price else None
        if cost is not None:
            self.cost_usd += cost
        elif self.priced:
            self.unpriced.add(lm)
        else:
            self.cost_usd = None


class _RequestGate(BaseCallback):
    """DSPy's hook around every LM call of a role or phase call (`_Invoke`), a JSON-adapter fallback's
    included: an LM whose engine does not ask the run itself (`loops.context.run_aware`) is asked for here,
    before the call, and a call DSPy answered from its cache is counted as cached rather than sent. It is
    first among the callbacks, so a refused call is one no other callback saw start; a role on a run-aware
    LM goes without it (DSPy's callbacks cost ~0.1 ms of CPU per decorated call)."""

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        run = context.current_run()
        if isinstance(run, Run):
            run.lm_call_started(call_id, instance)

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        run = context.current_run()
        if isinstance(run, Run):
            run.lm_call_ended(call_id, exception)


_GATE = _RequestGate()


def _without_gate(callbacks: Sequence[Any]) -> list[Any]:
    return [callback for callback in callbacks if not isinstance(callback, _RequestGate)]


def outside_the_gate() -> contextlib.AbstractContextManager:
    """DSPy's callbacks less the gate of an enclosing phase call (`_RequestGate`), for a loop run within it: each
    of its own calls is gated as it needs, and with no callback set DSPy's callback machinery stays off (a loop
    module's `__call__` is one of the calls DSPy decorates)."""
    given = dspy.settings.callbacks or ()
    callbacks = _without_gate(given)
    return contextlib.nullcontext() if len(callbacks) == len(given) else dspy.context(callbacks=callbacks)


class _Request:
    """One LM call of a role, gated at its LM (`_GatedLM`): whether an answer's usage reached the run (`_UsageLog`);
    none did when DSPy's cache answered."""

    __slots__ = ("answered",)

    def __init__(self) -> None:
        self.answered = False


_request: contextvars.ContextVar[_Request | None] = contextvars.ContextVar("loops_gated_request", default=None)


class _GatedLM:
    """A role's LM (one whose engine does not ask the run itself) as the role call hands it to its predictor (DSPy's
    `lm=`): before each LM call, the predictor's first or a JSON fallback's, it asks the run for the request, and
    a call DSPy's cache answered counts as cached rather than sent; what `_RequestGate` does, without DSPy's
    callback machinery, which once any callback is set binds the arguments of every call DSPy decorates (~0.2 ms
    of CPU a role call). The twin is the LM's own class with this one first, sharing the LM's `__dict__`: it reads
    and changes the LM itself (its settings, engines, history), and DSPy's callbacks of its own still run."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        run = context.current_run()
        if not isinstance(run, Run):
            return super().__call__(*args, **kwargs)
        request, token = run.gated_request()
        try:
            result = super().__call__(*args, **kwargs)
        finally:
            _request.reset(token)
        run.gated_request_answered(request)
        return result

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        run = context.current_run()
        if not isinstance(run, Run):
            return await super().acall(*args, **kwargs)
        request, token = run.gated_request()
        try:
            result = await super().acall(*args, **kwargs)
        finally:
            _request.reset(token)
        run.gated_request_answered(request)
        return result


_gated_classes: dict[type, type | None] = {}
# The predictors that take the LM of a call as DSPy's `lm=` keyword (`Predict._forward_preprocess`).
_TAKE_LM = ((dspy.Predict.forward, dspy.Predict.aforward), (dspy.ChainOfThought.forward, dspy.ChainOfThought.aforward))


def gated_lm(lm: Any, target: Any, inputs: Mapping[str, Any]) -> _GatedLM | None:
    """`lm` gated at the object (`_GatedLM`) for a role call of `target` with `inputs`, when `target` takes it as
    DSPy's `lm=` keyword (a `dspy.Predict`, a `dspy.ChainOfThought`) and no input of its is named `lm`; else None,
    and its requests are gated by the callback."""
    if isinstance(lm, _GatedLM):
        return lm
    cls, kind = type(lm), type(target)
    if lm is None or "lm" in inputs or (getattr(kind, "forward", None), getattr(kind, "aforward", None)) not in (
            _TAKE_LM):
        return None
    try:
        gated = _gated_classes[cls]
    except KeyError:
        try:
            gated = type(cls.__name__, (_GatedLM, cls), {"__module__": cls.__module__,
                                                         "__qualname__": cls.__qualname__})
        except TypeError:  # a class that cannot be subclassed
            gated = None
        _gated_classes[cls] = gated
    shared = getattr(lm, "__dict__", None)
    if gated is None or shared is None:
        return None
    twin = object.__new__(gated)
    twin.__dict__ = shared
    return twin


class _TruncatedAnswers(logging.Filter):
    """DSPy logs an answer cut at its request's max_tokens (`dspy.clients.lm`: "LM response was truncated"), a line
    that lands in the middle of the live table or a notebook's output: within a run it is one of the run's warnings
    instead, once per role, and the log line is dropped. Outside a run the line stays, as DSPy prints it."""

    def filter(self, record: logging.LogRecord) -> bool:
        run = context.current_run()
        if not isinstance(run, Run) or "truncated" not in record.getMessage():
            return True
        run.answer_cut()
        return False


logging.getLogger("dspy.clients.lm").addFilter(_TruncatedAnswers())


FailureAction = Literal["propagate", "setup", "timeout", "reparse", "retry", "give_up"]


def failure_action(error: BaseException, *, llm: bool, attempts: int, parse_failures: int, retry: RetryPolicy,
                   out_of_time: bool) -> FailureAction:
    """What a role call does after an attempt of it failed with `error` (`attempts` made so far, of which
    `parse_failures` were answers that could not be parsed):

    - "propagate": the error is no failure of this call (a limit that refused its next request, or a limit
      or failure of a role call a phase made, already recorded; a `loops.sexp.DslError`, a bug in the DSL
      program that must keep its position);
    - "setup": a developer's mistake that surfaced at the call (no LM, a rejected key): it raises;
    - "timeout": the run's time is up;
    - "reparse": ask an LLM role again, at a little temperature, for an answer that parses;
    - "retry": a transient fault (rate limit, time-out, dropped connection): wait, then send again;
    - "give_up": the role failed for good.
    """
    if isinstance(error, LoopsError) and not isinstance(error, ConfigurationError | DeadlinePassed):
        return "propagate"
    if setup_error(error) is not None:
        return "setup"
    if isinstance(error, DeadlinePassed) or out_of_time:
        return "timeout"
    # Only an LLM role is asked again with a config of its own: a phase (a user's program) takes no `config`.
    if is_unparseable(error) and llm and parse_failures < retry.parse_retries:
        return "reparse"
    if is_transient(error) and attempts < retry.attempts:
        return "retry"
    return "give_up"


class _Tally:
    """What one role call has used so far: attempts, and where the run's counts stood before it."""

    def __init__(self, run: Run, role: str, inputs: dict[str, Any], call: context.CallInfo | None = None):
        self.run, self.role, self.inputs, self.call = run, role, inputs, call
        self.started, self.started_at = run.clock(), time.time()
        self.entries_before, self.calls_before, self.cached_before = len(run.usage.entries), run.lm_calls, run.cached
        self.cost_before = run.usage.cost_usd
        self.attempts = self.parse_failures = 0
        self.failed: Step | None = None  # the call's step, when it failed for good

    def requests(self) -> int:
        """LM requests sent by this call so far (those of the role calls nested in it included)."""
        return self.run.lm_calls - self.calls_before

    def step(self, outputs: dict[str, Any] | None, error: str | None = None) -> Step:
        """The call as a trace step, with what it used."""
        run = self.run
        entries = run.usage.entries[self.entries_before:]
        cost = None if run.usage.cost_usd is None else run.usage.cost_usd - (self.cost_before or 0.0)
        return Step(self.role, run.iteration, self.inputs, outputs, run.clock() - self.started, self.attempts,
                    self.requests(), _tokens(entries) if entries else None, error,
                    cached=run.cached - self.cached_before, cost_usd=cost, depth=run._base_depth + run._depth,
                    started_at=self.started_at)

    def fail(self, error: str) -> None:
        """Record the call as a failed step."""
        self.failed = self.step(None, error)
        self.run._record(self.failed)


@dataclass
class Run:
    """The state of one loop run: never stored on the module, so concurrent runs share nothing."""

    module: dspy.Module
    budget: Budget
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    clock: Callable[[], float] = time.monotonic
    strict: bool = False
    aliases: Mapping[str, str] = field(default_factory=dict)
    contracts: Mapping[str, PhaseContract] = field(default_factory=dict)
    windows: int | Mapping[str, int | None] | None | object = UNSET
    history_summary: bool = False
    replay: checkpoint.Replay | None = None
    parent: Any = None  # the run this one runs within (a DSL loop form's run within its program's), if any

    def __post_init__(self) -> None:
        self.started = self.clock()
        timeout = self.budget.timeout_s
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.iteration = 0
        self.lm_calls = 0  # LM requests this process sent for the run
        self.replayed = 0  # LM requests the checkpoint's record answered instead (sent by an earlier process)
        self.cached = 0  # LM calls DSPy's cache answered (no request)
        self.context_chars = 0
        self.turns: dict[str, list[dict[str, Any]]] = {}
        self.trace: list[Step] = []
        self.warnings: list[str] = []
        self.best: dict[str, Any] | None = None
        self.best_score: Any = None
        self.current: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.question: person.Question | None = None  # what the run paused on ("awaiting_input")
        self.result: LoopResult | None = None  # the run's prediction, once `program` has it
        self._observers = context.observers()
        self.info = self._run_info() if self._observers else None  # the run as its observers know it
        self.usage = _UsageLog(priced=self.budget.max_cost_usd is not None, observers=self._observers)
        self._turn_chars: dict[str, list[int]] = {}
        self._shown_chars: dict[str, int] = {}
        self._role_windows: dict[str, int | None] = {}
        self._depth = 0  # calls in flight: a call made while a phase runs is nested in it
        self._saved_warnings: set[int] = set()
        self._unpriced_warned: set[str] = set()
        self._context_warned = False
        self._predictions: list[Any] = []  # what this run's LLM role calls returned, for `demos.curate_trace`
        self._credited: list[Any] = []
        self._gated: set[str] = set()  # LM calls the run counted when they started (`lm_call_started`)
        self._unpublished: Step | None = None  # the last step, until the pattern moves on from it (`publish`)
        self._calling: list[str] = []  # the roles whose calls are in flight, the innermost last
        self._cut: set[str] = set()  # the roles an answer of which was cut at its max_tokens (`answer_cut`)
        # The calls this run runs within: those in flight in the run it runs within, and that run's own depth.
        self._base_depth = (self.parent._base_depth + self.parent._depth) if isinstance(self.parent, Run) else 0
        if isinstance(self.parent, Run):
            self.parent.publish()  # its last step comes before this run's first

    # What patterns call -------------------------------------------------------------------------

    def call(self, role: str, config: dict[str, Any] | None = None, adapter: dspy.Adapter | None = None,
             predictor: Any = None, demos: Sequence[dspy.Example] | None = None, **inputs: Any) -> RoleCalls:
        """Call the LLM role `role` (the module's attribute, or `predictor`) with keyword `inputs` plus that
        role's own history; returns its prediction.

        `config` is passed to the predictor (e.g. a temperature), `adapter` replaces the context's
        adapter and `demos` the predictor's own demos for this call; none of them appears in the trace.
        Retries transient failures and unparseable answers per the retry policy; raises `LimitReached`
        when the budget is spent and `RoleFailed` when the role fails for good.
        """
        target = predictor if predictor is not None else getattr(self.module, role)
        if isinstance(target, person.Human):
            return (yield from self._ask(role, target, inputs))
        inner, history_field = predictor_of(target)
        lm = inner.lm if inner is not None and inner.lm is not None else dspy.settings.lm
        if history_field is not None and role not in self._role_windows:
            self._role_windows[role] = self._window(role, lm)
        warnings_at = len(self.warnings)
        inputs_hash = self._inputs_hash(inputs)
        recorded = self._replayed(role, inputs_hash)
        if recorded is not None:
            result = recorded
        else:
            kwargs = dict(inputs)
            if history_field is not None:
                kwargs[history_field] = dspy.History(messages=self._shown_turns(role))
            if config:
                kwargs["config"] = dict(config)
            if demos is not None:
                kwargs["demos"] = list(demos)
            gated = None if context.run_aware(lm) else gated_lm(lm, target, inputs)
            if gated is not None:
                kwargs["lm"] = gated
            if adapter is None and dspy.settings.adapter is None:
                adapter = profile.adapter_for(lm)  # the adapter the role's model answers in shape with
            if history_field is not None:
                adapter = adapter or dspy.settings.adapter or _CHAT_ADAPTER
                if inner.demos or demos:
                    adapter = demos_without_history(adapter)
                adapter = historyless_once(adapter)
            result = yield from self._call(role, target, (), kwargs, inputs, adapter, llm=True,
                                           run_aware=context.run_aware(lm), model=getattr(lm, "model", None))
            self._predictions.append(result)
        turn = None
        if history_field is not None:
            turn = {**inputs, **result}
            self._remember(role, turn)
        if recorded is None:
            self._save(role, inputs_hash, result, turn, warnings_at)
        return result

    def call_now(self, role: str, predictor: Any, **inputs: Any) -> Any:
        """`call`, performed at once: for a phase (running inside this run) that makes its own role calls,
        such as a DSL atom called from a loop phase. Synchronous; a phase runs in a worker thread under
        `aforward`, so the event loop stays free."""
        return drive(self.call(role, predictor=predictor, **inputs))

    def call_phase(self, role: str, phase: Any = None, /, **arguments: Any) -> RoleCalls:
        """Call a pluggable phase (the module's attribute `role` unless `phase` is given) with its
        contract's arguments (`PhaseContract.call`: a plain callable positionally in the contract's order, a
        `dspy.Module` by keyword); returns what it returns, a module's prediction read at its value field
        (`PhaseContract.value_of`)."""
        contract = self.contracts[role]
        if arguments.keys() != set(contract.params):
            raise TypeError(f"{role} is called with {contract.params}, not {tuple(arguments)}")
        target = phase if phase is not None else getattr(self.module, role)
        if isinstance(target, person.Human):  # a person in a phase's place: the contract's answers, as a role call
            asked = {name: arguments[name] for name in contract.params if name != "iteration"}
            answer = yield from self._ask(role, target.for_contract(contract), asked)
            return person.phase_value(contract, dict(answer.items()), arguments)
        args, kwargs = contract.call(target, arguments)
        result = yield from self.invoke(role, target, arguments, args=args, kwargs=kwargs)
        return contract.value_of(target, result)

    def invoke(self, role: str, target: Any, inputs: Mapping[str, Any], *, args: tuple = (),
               kwargs: Mapping[str, Any] | None = None, adapter: dspy.Adapter | None = None) -> RoleCalls:
        """Call `target(*args, **kwargs)` as the step `role` of the run (a phase, a wrapped DSPy program): under
        the run's limits and retry policy, its LM requests counted at the run's gate, traced with `inputs`,
        recorded in the checkpoint and replayed from it (by `inputs`); under `adapter` when one is given.
        Returns what it returns."""
        warnings_at = len(self.warnings)
        inputs = dict(inputs)
        inputs_hash = self._inputs_hash(inputs)
        result = self._replayed(role, inputs_hash)
        if result is None:
            result = yield from self._call(role, target, args, dict(kwargs or {}), inputs, adapter, llm=False)
            self._save(role, inputs_hash, result, None, warnings_at)
        return result

    def check(self, checks: Sequence[Check], value: Any, *, floor: str | None = None,
              role: str = "checks") -> CheckReport:
        """Run `checks` on `value` (`loops.checks.run_checks`; `floor` says why it is junk, if it is) and trace
        them as a step of `role` whose outputs are the report (`CheckReport.to_dict`): observers and `--trace`
        see which checks held. Free: no LM request, no budget, nothing recorded in a checkpoint (a replay runs
        them again). A check that raises ends the run gracefully (`RoleFailed`); one that returns what no check
        returns is a developer's mistake (`ContractError`), raised, as is an error of the library's own (a DSL
        check's, with its position)."""
        self._notify("role_started", role, self.iteration)
        started = self.clock()
        try:
            report = run_checks(checks, value, floor=floor)
        except LoopsError:  # a developer's mistake (a check returning no verdict), a DSL program's error: as itself
            raise
        except Exception as error:
            self._record(Step(role, self.iteration, {"value": value}, None, self.clock() - started,
                              error=_describe(error)))
            raise RoleFailed(role, f"a check raised {_describe(error)}{_raised_at(error)}") from error
        self._record(Step(role, self.iteration, {"value": value}, report.to_dict(), self.clock() - started))
        return report

    def credit(self, prediction: Any, **used: Any) -> None:
        """Mark a role call's prediction as the one the run's result rests on (e.g. the kept one of several
        samples): an optimizer's demo of that role is this call rather than the role's last
        (`loops.demos`). `used` are output fields as the loop used them (e.g. the code after cleaning),
        which the demo shows instead of the raw answer."""
        self._credited.append((prediction, used))

    def forget(self, role: str) -> None:
        """Start `role` over with an empty history (e.g. for a fresh attempt rather than a repair)."""
        self.turns.pop(role, None)

    def next_iteration(self) -> bool:
        """Start another iteration if the budget allows one; False at `max_iterations`."""
        if self.iteration >= self.budget.max_iterations:
            self.warn(f"stopped at max_iterations={self.budget.max_iterations}")
            return False
        self.iteration += 1
        return True

    def offer_candidate(self, score: Any, **result: Any) -> None:
        """Offer a candidate result; the best by `score` (ties: the latest) ends a run cut short."""
        if self.best is None or score >= self.best_score:
            self.best, self.best_score = result, score

    def set_latest(self, **result: Any) -> None:
        """Set result fields that any finish returns, over the best candidate's (e.g. the latest attempt)."""
        self.current.update(result)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def note(self, message: str) -> None:
        """Annotate the last step of the trace (e.g. a verdict the loop did not take at its word); observers
        and `--trace` see it on the step (`publish`)."""
        step = self.trace[-1]
        step.note = message if step.note is None else f"{step.note}; {message}"

    def answer_cut(self) -> None:
        """An answer of the role being called was cut at its request's max_tokens: a warning, once per role."""
        role = self._calling[-1] if self._calling else "a role"
        if role not in self._cut:
            self._cut.add(role)
            self.warn(f"{role}: an answer was cut at the token limit of its request (max_tokens, --max-tokens), so it "
                      "may be incomplete")

    def publish(self) -> None:
        """Tell the observers of the last step recorded, if they have not heard of it. A step is published once
        the pattern has moved on from it (its next call, or the run's end), so that what the pattern makes of
        it (`note`) is on it when observers and `--trace` see it."""
        step, self._unpublished = self._unpublished, None
        if step is not None:
            self._notify("step_finished", step)

    def time_left(self) -> float | None:
        """Seconds until the run's timeout, None without one."""
        if self.budget.timeout_s is None:
            return None
        return max(0.0, self.budget.timeout_s - (self.clock() - self.started))

    def finish(self, stop_reason: StopReason, **result: Any) -> LoopResult:
        """The run's prediction: `result` over the fields set by `set_latest` over the best candidate."""
        self.publish()
        measured = {
            "iterations": self.iteration,
            "stop_reason": stop_reason,
            "warnings": list(self.warnings),
            "trace": list(self.trace),
            "histories": {role: dspy.History(messages=list(turns)) for role, turns in self.turns.items()},
            "lm_calls": self.lm_calls,
            "error": self.error,
        }
        fields = {**dict.fromkeys(RESULT_FIELDS), "success": False, **(self.best or {}), **self.current, **result,
                  **measured}
        fields.update({alias: fields[name] for alias, name in self.aliases.items()})
        return LoopResult(**fields, replayed=self.replayed, cached=self.cached, tokens=self.usage.tokens,
                          cost_usd=self.usage.cost_usd, question=self.question)

    # What the module's forward/aforward hand to a driver ------------------------------------------

    @contextlib.contextmanager
    def active(self) -> Iterator[Run]:
        """The context a run's program is driven in: its usage log, its deadline, itself as current run, and
        what its observers hold open for it (`loops.context.Observer.scope`). Its checkpoint's claim on the run
        id is given up when it ends, and its observers hear that it finished, however it ends."""
        self._notify("run_started", self.info)
        error = None
        try:
            with (context.running(self, self.deadline), context.on_pause(self._paused),
                  dspy.context(usage_tracker=self.usage), self._scopes(self.info)):
                yield self
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self.replay is not None:
                self.replay.release()
            self._notify("run_finished", self.info, self.result, error)

    def before_request(self) -> None:
        """The one check every LM request of the run passes before it is sent (`loops.context.before_request`):
        the deadline and every limit; a request let through is counted in `lm_calls`."""
        try:
            self._check_limits()
        except LimitReached as limit:
            raise RequestRefused(limit) from None
        self.lm_calls += 1
        if self._observers:
            context.notify("request_sent", self.info, to=self._observers)

    def lm_call_started(self, call_id: str, lm: Any) -> None:
        """DSPy is about to call `lm` (`_RequestGate`): ask for its request, unless its engine asks itself."""
        if not context.run_aware(lm):
            self.before_request()
            self._gated.add(call_id)

    def lm_call_ended(self, call_id: str, exception: BaseException | None) -> None:
        """DSPy's LM call ended: one that reported no usage and did not fail was answered from DSPy's cache."""
        counted = call_id in self._gated
        self._gated.discard(call_id)
        if exception is None and call_id not in self.usage.answered:
            self.cached += 1
            self.lm_calls -= 1 if counted else 0
        self.usage.answered.discard(call_id)

    def gated_request(self) -> tuple[_Request, contextvars.Token]:
        """An LM call of a role's gated LM (`_GatedLM`) is about to start: its request asked for and counted, and
        the call made the one its answer reports to (until the token is reset)."""
        self.before_request()
        request = _Request()
        return request, _request.set(request)

    def gated_request_answered(self, request: _Request) -> None:
        """A gated LM call returned: one that reported no usage was answered from DSPy's cache, no request sent."""
        if not request.answered:
            self.cached += 1
            self.lm_calls -= 1

    def program(self, loop: Callable[..., RoleCalls], **inputs: Any) -> RoleCalls:
        """The pattern's loop wrapped so that a limit or a run failure ends it with the work kept.

        A developer's mistake (`ConfigurationError`) and a bug in the pattern itself propagate."""
        try:
            prediction = yield from loop(self, **inputs)
        except AwaitingInput as pause:
            prediction = self._paused_on(pause)
        except LimitReached as limit:
            self.warn(str(limit))
            self._notify("limit_reached", self.info, limit)
            prediction = self.finish(limit.reason)
        except RunError as failure:
            self.error = failure
            self.warn(f"stopped by an error: {_describe(failure)}")
            prediction = self.finish("error")
        finally:
            self.publish()  # a run that raised (a developer's mistake) still shows its last step
        if self.replay is not None:
            unrecorded = self.replay.finish(prediction.stop_reason)
            if unrecorded:
                prediction.warnings.append(unrecorded)
        if self.parent is not None and prediction.stop_reason == "awaiting_input":
            pause = AwaitingInput(self.question)  # the run this one runs within pauses too
            pause.prediction = prediction
            raise pause
        curate_trace(self._predictions, self._credited)
        self.result = prediction
        if self.strict and (prediction.stop_reason in LIMIT_REASONS or prediction.stop_reason == "error"):
            raised = self.error if isinstance(self.error, RunError) else LimitReached(
                prediction.stop_reason, prediction.warnings[-1])
            raised.prediction = prediction
            raise raised
        return prediction

    # Internals ----------------------------------------------------------------------------------

    def _window(self, role: str, lm: Any) -> int | None:
        windows = self.windows
        if isinstance(windows, Mapping):
            windows = windows.get(role, UNSET)
        if windows is UNSET:
            return profile.profile_of(lm).history_window  # what the model's context can hold
        return windows

    def _shown_turns(self, role: str) -> list[dict[str, Any]]:
        """The turns a role sees: all of them, or the last `history_window`, after a digest of the older
        ones when `history_summary` is set."""
        turns = self.turns.get(role, ())
        window = self._role_windows.get(role)
        if window is None or len(turns) <= window:
            return list(turns)
        older, kept = turns[:len(turns) - window], list(turns[len(turns) - window:])
        return [condense_turns(older), *kept] if self.history_summary else kept

    def _remember(self, role: str, turn: dict[str, Any]) -> None:
        """Add a turn to the role's history, and count what the histories now put in the prompts."""
        self.turns.setdefault(role, []).append(turn)
        sizes = self._turn_chars.setdefault(role, [])
        sizes.append(sum(len(value) if isinstance(value, str) else len(str(value)) for value in turn.values()))
        window = self._role_windows.get(role)
        shown = sum(sizes if window is None else sizes[len(sizes) - window:] if window else ())
        previous, self._shown_chars[role] = self._shown_chars.get(role, 0), shown
        self._context_now(self.context_chars - previous + shown)

    def _inputs_hash(self, inputs: dict[str, Any]) -> str | None:
        """What a call's inputs are recorded and replayed by, taken once before the call (which may change
        them); None when the run has no checkpoint."""
        return None if self.replay is None else checkpoint.stable_hash(inputs)

    def _replayed(self, role: str, inputs_hash: str | None) -> Any:
        """The recorded result of this call when the run is being replayed (its trace step, warnings, LM
        requests as `replayed`, tokens and cost restored, so the budget is the whole run's), else None."""
        if self.replay is None:
            return None
        self._check_limits()
        found = self.replay.take(role, inputs_hash, nested=self._depth > 0)
        if found is None:
            return None
        inner, call = found
        for record in (*inner, call):
            result, step, warnings, turn = self.replay.unpacked(record)
            if record is not call and turn is not None:
                self._remember(record.role, turn)
            self.warnings.extend(warnings)
            if record is call:  # a phase's record counts the calls nested in it too
                self.replayed += step.lm_calls
                self.usage.tokens += sum(step.tokens.values()) if step.tokens else 0
                if self.usage.cost_usd is not None and step.cost_usd is not None:
                    self.usage.cost_usd += step.cost_usd
            step.replayed = True
            step.depth = self._base_depth + self._depth + (record is not call)
            self._record(step)
            self._notify("call_replayed", self.info, step, record is not call or self._depth > 0)
        return result

    def _ask(self, role: str, asked: person.Human, inputs: dict[str, Any]) -> RoleCalls:
        """A person's turn in `role`'s place, as a role call: replayed from the checkpoint's record, else the
        answer recorded there for the question the run paused on, else asked (`loops.person`); kept in the
        role's history and recorded. `AwaitingInput`, with the question kept in the checkpoint, when nobody
        can answer."""
        warnings_at = len(self.warnings)
        inputs_hash = self._inputs_hash(inputs)
        recorded = result = self._replayed(role, inputs_hash)
        if recorded is None:
            answered = None if self.replay is None else self.replay.answer_for(role, inputs_hash)
            if answered is not None:
                self._notify("resumed", self.info, role)
            try:
                result = yield from self._call(role, asked, (asked.question(role, inputs, self.iteration), answered),
                                               {}, inputs, None, llm=False, human=True)
            except AwaitingInput as pause:
                if self.replay is None:
                    raise person.nobody_to_answer([role]) from None
                self.replay.ask(role, inputs_hash, pause.question)
                raise
        turn = {**inputs, **result}
        self._remember(role, turn)
        if recorded is None:
            self._save(role, inputs_hash, result, turn, warnings_at)
            if self.replay is not None:
                self.replay.settle()  # answered (here or from elsewhere): the question is the call's record now
        return result

    def _paused(self, seconds: float) -> None:
        """A person answered in this run, or in one it runs within, after `seconds` (`loops.context.paused`): its
        clock and deadline move past the wait, which is not the run's time."""
        self.started += seconds
        if self.deadline is not None:
            self.deadline += seconds

    def _paused_on(self, pause: AwaitingInput) -> LoopResult:
        """The run's end when nobody can answer a person's question now: the question kept on the result (and in
        the checkpoint), and, unless it runs within another run, a warning saying how to answer and resume."""
        self.question = pause.question
        self._notify("paused", self.info, pause.question)
        if self.parent is None:
            store, run_id = (getattr(self.replay.store, "path", "FILE"), self.replay.run_id) if self.replay else (
                "FILE", "RUN_ID")
            self.warn(f"waiting for a person to answer as the {pause.question.role}: `loops runs show {store} "
                      f"{run_id}` shows the question, `loops runs answer {store} {run_id} "
                      f"{pause.question.usage()}` (or loops.answer) records the answer, and the same call with "
                      f"run_id={run_id!r} (the same command with --run-id {run_id}) goes on")
        return self.finish("awaiting_input")

    def _save(self, role: str, inputs_hash: str | None, result: Any, turn: dict[str, Any] | None,
              warnings_at: int) -> None:
        """Record a finished call for replay, with the warnings it raised (less its nested calls')."""
        if self.replay is None:
            return
        raised = [index for index in range(warnings_at, len(self.warnings)) if index not in self._saved_warnings]
        self._saved_warnings.update(raised)
        self.replay.save(role, inputs_hash, self._depth > 0, result, self.trace[-1],
                         [self.warnings[index] for index in raised], turn)

    def _call(self, role: str, target: Any, args: tuple, kwargs: dict[str, Any], inputs: dict[str, Any],
              adapter: dspy.Adapter | None, *, llm: bool, run_aware: bool = False, human: bool = False,
              model: str | None = None) -> RoleCalls:
        """One role or phase call with retries; records a step with its outputs (before observers hear of
        it). `llm` marks an LLM role, `run_aware` one whose LM asks the run itself (`loops.context`), `human`
        a person's turn: no deadline fires while they answer, and the run's clocks move past the wait.

        Every LM request is counted where it passes the run's gate (`before_request`): first tries, retries,
        re-asks, JSON fallbacks and engines' re-sends alike, failed and abandoned ones included."""
        self.publish()
        self._check_limits()
        call = None
        if self._observers:
            call = context.CallInfo(self.info, role, self.iteration, "human" if human else "llm" if llm else "phase",
                                    model)
            self._notify("role_started", role, self.iteration)
            self._notify("call_started", call)
        observed = None if call is None else (call, self._observers)
        tally = _Tally(self, role, inputs, call)
        try:
            while True:
                tally.attempts += 1
                self._depth += 1
                self._calling.append(role)
                asked_at = time.monotonic()
                try:
                    result = yield _Invoke(target, args, kwargs, adapter, None if human else self.deadline, llm,
                                           run_aware, observed)
                    break
                except Exception as exc:
                    self._depth -= 1
                    self._calling.pop()
                    kwargs = yield from self._after_failure(tally, exc, kwargs, llm)
        except BaseException as exc:
            self._notify("call_finished", call, tally.failed, exc)
            raise
        self._depth -= 1
        self._calling.pop()
        if human:
            context.paused(time.monotonic() - asked_at)
        if run_aware and not tally.requests():
            self.cached += 1  # its engine was never reached: DSPy's cache answered
        # A module phase's prediction holds its signature, which may be built at run time (a string signature's):
        # its step keeps a copy of its fields, which a checkpoint can record.
        shown = dspy.Prediction(**result) if isinstance(result, dspy.Prediction) else result
        step = tally.step(dict(result.items()) if llm or human else {"result": shown})
        step.human = human
        self._record(step)
        self._notify("call_finished", call, step, None)
        return result

    def _after_failure(self, tally: _Tally, error: Exception, kwargs: dict[str, Any], llm: bool) -> RoleCalls:
        """What follows a failed attempt (`failure_action`): the keyword arguments of the next attempt,
        after a wait when it is a retry; or the step recorded as failed and the error that ends the call."""
        role = tally.role
        action = failure_action(error, llm=llm, attempts=tally.attempts, parse_failures=tally.parse_failures,
                                retry=self.retry, out_of_time=self._out_of_time())
        self._notify("attempt_failed", tally.call, tally.attempts, error, action)
        if action == "propagate":
            if llm and isinstance(error, LimitReached) and tally.requests():
                tally.fail(str(error))  # the run's limits refused this call's next request: keep what it sent
            raise error
        if action in ("reparse", "retry"):
            try:
                self._check_limits(f" in {role} before a retry")  # the budget, all of it, before every retry
            except LimitReached as limit:
                tally.fail(_describe(error))
                raise limit from error
        if action == "reparse":
            tally.parse_failures += 1
            self.warn(f"{role}: answer could not be parsed; asked again")
            # A new rollout at some temperature: the same request would get the same answer.
            return {**kwargs, "config": {**kwargs.get("config", {}), "temperature": self.retry.parse_retry_temperature,
                                         "rollout_id": tally.parse_failures}}
        if action == "retry":
            pause, left = self.retry.delay_s(tally.attempts, getattr(error, "retry_after", None)), self.time_left()
            if left is None or pause < left:
                yield _Sleep(pause)
                return kwargs
            tally.fail(_describe(error))
            raise LimitReached("timeout", f"stopped in {role}: no time left to retry after {_describe(error)} "
                               f"(the wait before it: {pause:.1f}s)") from error
        if action == "setup":
            tally.fail(_describe(error))
            mistake = setup_error(error)
            if mistake is error:
                raise error
            raise mistake from error
        if action == "timeout":
            tally.fail("abandoned at the deadline")
            raise LimitReached("timeout", f"stopped in {role} after {self.clock() - self.started:.1f}s: "
                               f"timeout_s={self.budget.timeout_s} reached") from error
        tally.fail(_describe(error))
        what = "its answer could not be parsed" if is_unparseable(error) else _describe(error)
        if not llm:  # a phase is the caller's code: point at the line that raised
            what += _raised_at(error)
        raise RoleFailed(role, f"{role} failed after {tally.attempts} attempt(s): {what}") from error

    def _out_of_time(self) -> bool:
        timeout = self.budget.timeout_s
        return timeout is not None and self.clock() - self.started >= timeout

    def _check_limits(self, where: str = "") -> None:
        """Raise `LimitReached` when the run's time or a limit is spent (`where` says where it stopped). LM
        calls count the whole run's, those replayed from a checkpoint included, as tokens and cost do."""
        budget = self.budget
        elapsed = self.clock() - self.started
        if budget.timeout_s is not None and elapsed >= budget.timeout_s:
            raise LimitReached("timeout", f"stopped{where} after {elapsed:.1f}s: timeout_s={budget.timeout_s} reached")
        calls = self.lm_calls + self.replayed
        if budget.max_lm_calls is not None and calls >= budget.max_lm_calls:
            raise LimitReached("lm_calls", f"stopped{where} after {calls} LM calls: "
                               f"max_lm_calls={budget.max_lm_calls} reached")
        if budget.max_tokens is not None and self.usage.tokens >= budget.max_tokens:
            raise LimitReached("tokens", f"stopped{where} after {self.usage.tokens} tokens: "
                               f"max_tokens={budget.max_tokens} reached")
        if budget.max_cost_usd is not None:
            unpriced = sorted(self.usage.unpriced - self._unpriced_warned)
            if unpriced:
                self.warn(f"no price is known for {unpriced}: their requests count as free against max_cost_usd")
                self._unpriced_warned.update(unpriced)
            if self.usage.cost_usd >= budget.max_cost_usd:
                raise LimitReached("cost", f"stopped{where} after ${self.usage.cost_usd:.4f}: max_cost_usd="
                                   f"{budget.max_cost_usd} reached")
        if budget.max_context_chars is not None and self.context_chars >= budget.max_context_chars:
            raise LimitReached(
                "context_limit",
                f"stopped{where}: role histories hold {self.context_chars} chars, "
                f"max_context_chars={budget.max_context_chars}",
            )

    def _context_now(self, chars: int) -> None:
        self.context_chars = chars
        limit = self.budget.max_context_chars
        warn_at = None if limit is None else self.budget.context_warning_ratio * limit
        if warn_at is not None and not self._context_warned and self.context_chars >= warn_at:
            self._context_warned = True
            self.warn(f"role histories hold {self.context_chars} chars, "
                      f"{self.context_chars / limit:.0%} of max_context_chars={limit}")

    def _record(self, step: Step) -> None:
        """Add a finished call to the trace; observers hear of it once the pattern moves on (`publish`)."""
        self.publish()
        self.trace.append(step)
        self._unpublished = step

    def _notify(self, event: str, *args: Any) -> None:
        if self._observers:
            context.notify(event, *args, to=self._observers)

    def _scopes(self, what: Any) -> contextlib.AbstractContextManager:
        return context.scopes(what, to=self._observers) if self._observers else contextlib.nullcontext()

    def _run_info(self) -> context.RunInfo:
        replay = self.replay
        store = None if replay is None else getattr(replay.store, "path", None)
        return context.RunInfo(type(self.module).__name__, None if replay is None else replay.run_id,
                               None if store is None else str(store), 0 if replay is None else len(replay.recorded),
                               self.parent is not None, asdict(self.budget))


_predictors: weakref.WeakKeyDictionary[Any, tuple[dspy.Predict | None, str | None]] = weakref.WeakKeyDictionary()


def predictor_of(target: Any) -> tuple[dspy.Predict | None, str | None]:
    """A role's one predictor and the name of its signature's `dspy.History` input, if it has them.

    Resolved once per role object: walking `predictors()` walks each one's growing call history."""
    try:
        return _predictors[target]
    except KeyError:
        pass
    except TypeError:
        return None, None  # not weak-referenceable, so not a dspy.Module
    found = [target] if isinstance(target, dspy.Predict) else (
        target.predictors() if isinstance(target, dspy.Module) else [])
    predictor = found[0] if len(found) == 1 else None
    history = None if predictor is None else next(
        (name for name, info in predictor.signature.input_fields.items() if info.annotation is dspy.History), None)
    _predictors[target] = predictor, history
    return predictor, history


_CONDENSED_CHARS = 160


def condense_turns(turns: Any) -> dict[str, str]:
    """Older turns folded into one, field by field, so it renders like any turn: for each field, how many
    turns are folded and the start of each one's value."""
    fields: dict[str, list[str]] = {}
    for turn in turns:
        for name, value in turn.items():
            fields.setdefault(name, []).append(" ".join(str(value).split())[:_CONDENSED_CHARS])
    return {name: f"[{len(values)} earlier turn(s), condensed] " + " | ".join(values)
            for name, values in fields.items()}


def _tokens(entries: Any) -> dict[str, int]:
    tokens = {"input": 0, "output": 0}
    for entry in entries:
        tokens["input"] += int(entry.get("prompt_tokens") or 0)
        tokens["output"] += int(entry.get("completion_tokens") or 0)
    return tokens


_NOT_USER_CODE = tuple(sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib"))


def _raised_at(error: BaseException) -> str:
    """Where in the caller's own code `error` was raised (the innermost frame outside loops, the standard library
    and installed packages), as ` (at FILE:LINE in FUNCTION: SOURCE)`; "" when no frame is theirs."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        module = frame.f_globals.get("__name__", "")
        if not (module == "loops" or module.startswith("loops.")) and not frame.f_code.co_filename.startswith(
                _NOT_USER_CODE):
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    code, line = found.tb_frame.f_code, found.tb_lineno
    source = linecache.getline(code.co_filename, line).strip()
    return f" (at {code.co_filename}:{line} in {code.co_name}{': ' + source if source else ''})"


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")

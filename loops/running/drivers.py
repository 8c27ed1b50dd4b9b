"""The operations a run's generator yields (call a role or phase, wait before a retry), the two drivers that
perform them (`drive` for `forward()`, `adrive` for `aforward()`), and what hooks into DSPy while a call runs:
the run's usage log, the request gate and the filter of truncation notices.

The gate and the filter report to the run in progress through `loops.vocabulary.context` (`context.current_run()`: the
`loops.vocabulary.context.RunGate` protocol), never to the runtime itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import logging
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import dspy
from dspy.utils.callback import ACTIVE_CALL_ID, BaseCallback
from dspy.utils.usage_tracker import UsageTracker

from loops.errors import DeadlinePassed, RequestRefused
from loops.vocabulary import context, profile

__all__ = ["Invoke", "RoleCalls", "Sleep", "UsageLog", "adrive", "drive", "gated_lm", "outside_the_gate"]


@dataclass(slots=True)
class Invoke:
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
                # A plain phase (a validator running tests, say) may block: keep the event loop free. Under
                # `dspy.streamify`, on an AnyIO worker thread: DSPy sends the chunks of the LM calls the phase
                # makes (a DSL atom's) from the thread making them, through AnyIO.
                call = functools.partial(self.target, *self.args, **self.kwargs)
                result = await (asyncio.to_thread(call) if dspy.settings.send_stream is None
                                else anyio.to_thread.run_sync(call, abandon_on_cancel=True))
            if inspect.isawaitable(result):
                result = await result
        return result


@dataclass(frozen=True, slots=True)
class Sleep:
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


class UsageLog(UsageTracker):
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
        request = _request.get()  # an LM call gated at its LM (`_GatedLM`) is known by its `_Request`
        self.answered.add(call_id if request is None else request)
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
    """DSPy's hook around every LM call of a role or phase call (`Invoke`), a JSON-adapter fallback's
    included: an LM whose engine does not ask the run itself (`loops.vocabulary.context.run_aware`) is asked for here,
    before the call, and a call DSPy answered from its cache is counted as cached rather than sent. It is
    first among the callbacks, so a refused call is one no other callback saw start; a role on a run-aware
    LM goes without it (DSPy's callbacks cost ~0.1 ms of CPU per decorated call)."""

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        run = context.current_run()
        if run is not None:
            run.lm_call_started(call_id, instance)

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        run = context.current_run()
        if run is not None:
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
    """One LM call of a role, gated at its LM (`_GatedLM`): its id at the run's gate, where DSPy's callback would
    give DSPy's call id."""

    __slots__ = ()


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
        if run is None:
            return super().__call__(*args, **kwargs)
        request, token = _gated_request(run, self)
        try:
            result = super().__call__(*args, **kwargs)
        except BaseException as exc:
            run.lm_call_ended(request, exc)
            raise
        finally:
            _request.reset(token)
        run.lm_call_ended(request, None)
        return result

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        run = context.current_run()
        if run is None:
            return await super().acall(*args, **kwargs)
        request, token = _gated_request(run, self)
        try:
            result = await super().acall(*args, **kwargs)
        except BaseException as exc:
            run.lm_call_ended(request, exc)
            raise
        finally:
            _request.reset(token)
        run.lm_call_ended(request, None)
        return result


def _gated_request(run: context.RunGate, lm: Any) -> tuple[_Request, contextvars.Token]:
    """A gated LM call is about to start: its request asked for and counted at the run's gate as DSPy's callback
    would (`lm_call_started`, the `_Request` standing for DSPy's call id), and made the call its answer's usage
    reports to (`UsageLog`) until the token is reset; `lm_call_ended` then counts a call no usage reached as
    answered from DSPy's cache."""
    request = _Request()
    run.lm_call_started(request, lm)
    return request, _request.set(request)


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
        if run is None or "truncated" not in record.getMessage():
            return True
        run.answer_cut()
        return False


logging.getLogger("dspy.clients.lm").addFilter(_TruncatedAnswers())

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

A person's time is not the run's: while a role answered by a person (`loops.running.person`) waits for them, no
deadline fires, and after it every deadline of this context (the run's, those of the runs it runs within,
a DSL program's clock) moves forward by the wait (`paused`).

What happens in a run reaches its observers (`Observer`: a live display, `--trace`, `loops.observers.tracing`'s
spans) through one protocol, from every path that does it: the runtime's role calls, retries, limits, pauses
and replays, the validators' commands, the batch's examples. An observer of this context is given with
`observing`; one of every context (`loops.observers.tracing.enable()`'s) with `observe_everywhere`.
"""

from __future__ import annotations

import contextlib
import contextvars
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from loops.errors import DeadlinePassed, RequestRefused
from loops.vocabulary.deadline import Deadline

__all__ = ["RUN_AWARE", "CallInfo", "CommandInfo", "DeadlinePassed", "ExampleInfo", "Observer", "RequestRefused",
           "RunGate", "RunInfo", "before_request", "current_run", "deadline", "given_up", "notify", "run_deadline",
           "observe_everywhere", "observers", "observing", "on_pause", "paused", "run_aware", "running", "scopes",
           "stop_observing", "time_left", "within_deadline"]

# The attribute (on an LM or its engine) saying that its engine asks `before_request` before every request it
# sends and ends every wait at the run's deadline by itself.
RUN_AWARE = "loops_run_aware"
_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class RunInfo:
    """A loop run, as its observers know it: `pattern` (the loop's class), its checkpoint's `run_id` and file
    (`checkpoint`) when it has one, how many calls that record already held when the run started
    (`recorded_calls`: a resumed run replays them), whether it runs within another run (`nested`: a DSL loop
    form's), and its limits (`budget`)."""

    pattern: str
    run_id: str | None = None
    checkpoint: str | None = None
    recorded_calls: int = 0
    nested: bool = False
    budget: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class CallInfo:
    """One role call of a run: the role, the iteration, what answers it (`kind`: an LLM role, a phase of the
    user's code, a person) and, for an LLM role, the model its LM names."""

    run: RunInfo
    role: str
    iteration: int
    kind: Literal["llm", "phase", "human"]
    model: str | None = None


@dataclass(frozen=True, eq=False)
class CommandInfo:
    """A command a validator runs (a test command, the DSL's shell tool), in the directory `cwd`."""

    command: str
    cwd: str
    timeout_s: float | None = None


@dataclass(frozen=True, eq=False)
class ExampleInfo:
    """One example of a batch (`loops.batch`): its id, the backend that runs it, and `origin`, what the batch's
    caller was inside when it started it (a propagation carrier, `loops.observers.tracing.carrier`; empty for none)."""

    key: str
    backend: str
    origin: Mapping[str, str] = field(default_factory=dict)


class Observer(Protocol):
    """Receives what happens in a run, e.g. to draw a live display or to emit trace spans. Every method is
    optional; each event comes from the one place every path goes through, so an observer sees them all.

    A run: `run_started(run)`, then its calls, then `run_finished(run, result, error)` (`result` the run's
    prediction, None when it raised `error` before it had one), whatever way it ended. A call:
    `role_started(role, iteration)` (the short form a display needs) and `call_started(call)`; an
    `attempt_failed(call, attempt, error, action)` for each attempt that failed (`action`: "reparse" and
    "retry" ask again, any other ends the call, see `loops.running.runtime.failure_action`); then `call_finished(call,
    step, error)`, whatever way it ended (`step` None when it recorded none: a limit refused it, it paused for
    a person). `step_finished(step)` tells of the call's trace step once the loop has moved on from it (at its
    next call, or the run's end), so that the note the loop added to it is on it. Each LM request the run lets
    through (`before_request`): `request_sent(run)`, in the thread or task that sends it; its answer, there
    too: `lm_answered(call_id, model, usage)` (`call_id` is DSPy's id of the LM call, `usage` its token
    counts). A call answered from the checkpoint's record instead: `call_replayed(run, step, nested)`, and
    `step_finished(step)` (`step.replayed` set) once the loop has moved on. A limit that stopped the run:
    `limit_reached(run, limit)`; a pause for a person: `paused(run, question)`; a resumed run taking the
    answer it paused for: `resumed(run, role)`. A validator's command: `command_started(command)`,
    `command_finished(command, result, error)`. A batch's example: `example_started(example)`,
    `example_finished(example, record, error)`.

    `scope(what)`, given a `RunInfo`, `CallInfo` or `ExampleInfo`, returns a context manager that the
    runtime holds open while that run, call or example does its work, in the thread or task doing it (e.g.
    to make its trace span the current one), or None."""

    def run_started(self, run: RunInfo) -> None: ...

    def run_finished(self, run: RunInfo, result: Any, error: BaseException | None) -> None: ...

    def role_started(self, role: str, iteration: int) -> None: ...

    def call_started(self, call: CallInfo) -> None: ...

    def attempt_failed(self, call: CallInfo, attempt: int, error: BaseException, action: str) -> None: ...

    def step_finished(self, step: Any) -> None: ...

    def call_finished(self, call: CallInfo, step: Any, error: BaseException | None) -> None: ...

    def request_sent(self, run: RunInfo) -> None: ...

    def lm_answered(self, call_id: str | None, model: str, usage: Mapping[str, Any]) -> None: ...

    def call_replayed(self, run: RunInfo, step: Any, nested: bool) -> None: ...

    def limit_reached(self, run: RunInfo, limit: BaseException) -> None: ...

    def paused(self, run: RunInfo, question: Any) -> None: ...

    def resumed(self, run: RunInfo, role: str) -> None: ...

    def command_started(self, command: CommandInfo) -> None: ...

    def command_finished(self, command: CommandInfo, result: Any, error: BaseException | None) -> None: ...

    def example_started(self, example: ExampleInfo) -> None: ...

    def example_finished(self, example: ExampleInfo, record: Any, error: BaseException | None) -> None: ...

    def scope(self, what: RunInfo | CallInfo | ExampleInfo) -> contextlib.AbstractContextManager | None: ...


class RunGate(Protocol):
    """What the run in progress (`current_run`) answers to the hooks that run inside its LM calls: the gate of
    every request (`before_request`), DSPy's callback around each LM call of an LM that does not ask the run
    itself (`lm_call_started`, `lm_call_ended`: a call DSPy's cache answered is counted as cached), and DSPy's
    notice of an answer cut at its request's max_tokens (`answer_cut`)."""

    def before_request(self) -> None: ...

    def lm_call_started(self, call_id: str, lm: Any) -> None: ...

    def lm_call_ended(self, call_id: str, exception: BaseException | None) -> None: ...

    def answer_cut(self) -> None: ...


_observers: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar("loops_observers", default=())
_everywhere: tuple[Observer, ...] = ()  # observers of every context (observe_everywhere)
_everywhere_lock = threading.Lock()
_current_run: contextvars.ContextVar[Any] = contextvars.ContextVar("loops_current_run", default=None)


_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("loops_deadline", default=None)
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


def observe_everywhere(observer: Observer) -> None:
    """Report the progress of every loop run, in every thread and task, to `observer` (until
    `stop_observing`): what `loops.observers.tracing.enable()` does."""
    global _everywhere
    with _everywhere_lock:
        if observer not in _everywhere:
            _everywhere = (*_everywhere, observer)


def stop_observing(observer: Observer) -> None:
    """Undo `observe_everywhere(observer)`."""
    global _everywhere
    with _everywhere_lock:
        _everywhere = tuple(known for known in _everywhere if known is not observer)


def observers() -> tuple[Observer, ...]:
    """The observers of this context: those of every context first, then this context's, innermost last."""
    scoped = _observers.get()
    return (*_everywhere, *scoped) if _everywhere else scoped


def notify(event: str, *args: Any, to: tuple[Observer, ...] | None = None) -> None:
    """Tell `event(*args)` to the observers of this context (or to those given) that have a method for it."""
    for observer in observers() if to is None else to:
        handler = getattr(observer, event, None)
        if handler is not None:
            handler(*args)


def scopes(what: Any, to: tuple[Observer, ...] | None = None) -> contextlib.AbstractContextManager:
    """The `scope(what)` of each observer (of this context, or those given) that has one, to hold open in this
    thread or task for the duration of a block."""
    entered = []
    for observer in observers() if to is None else to:
        opener = getattr(observer, "scope", None)
        scope = None if opener is None else opener(what)
        if scope is not None:
            entered.append(scope)
    if len(entered) < 2:
        return entered[0] if entered else contextlib.nullcontext()
    return _AllOf(entered)


class _AllOf(contextlib.ExitStack):
    """Several scopes held open together: entered in order, left in the reverse order."""

    def __init__(self, scopes: list[contextlib.AbstractContextManager]):
        super().__init__()
        self._scopes = scopes

    def __enter__(self) -> _AllOf:
        super().__enter__()
        try:
            for scope in self._scopes:
                self.enter_context(scope)
        except BaseException:
            self.close()
            raise
        return self


def current_run() -> Any:
    """The run (`loops.Run`, a `RunGate`) whose phase is executing now, if any: a phase may make role calls that
    belong to it."""
    return _current_run.get()


def deadline() -> float | None:
    """The `time.monotonic()` instant at which the current run's time is up, if it has a timeout.

    An LM backend that can stop mid-generation (the embedded model) checks it between tokens."""
    until = _deadline.get()
    return None if until is None else until.at


def run_deadline() -> Deadline | None:
    """The current run's `Deadline` itself: a clock that joins the run's (the DSL's) holds this one, which a
    person's wait moves once for every reader."""
    return _deadline.get()


def time_left() -> float | None:
    """Seconds until the current run's deadline (0 once it has passed); None without one."""
    until = _deadline.get()
    return None if until is None else until.left()


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
    if not outcome.done.acquire(timeout=max(0.0, until - time.monotonic())):
        raise given_up(what)
    if outcome.error is not None:
        raise outcome.error
    return outcome.value


class _Outcome:
    """What a worker hands back for one call of `within_deadline`: `done`, a lock held until the work has
    finished, then its `value` or its `error`. A lock the caller waits on, rather than a `Future` (a
    condition, its lock and its waiters): the hand-over is the price of every LM call a sync run makes on an
    LM that cannot stop itself (~25 rather than ~33 us of CPU)."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.value: Any = None
        self.error: BaseException | None = None


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

    def submit(self, work: Callable[..., Any], *args: Any) -> _Outcome:
        outcome = _Outcome()
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
                outcome.value = work(*args)
            except BaseException as exc:  # handed to the caller, who re-raises it
                outcome.error = exc
            me.name = "loops-deadline"
            with self._lock:
                idle = len(self._idle) < self._keep
                if idle:
                    self._idle.append(inbox)
            outcome.done.release()  # after this worker is idle again, so the caller's next call can take it
            if not idle:
                return


_WORKERS = _Workers()


@contextlib.contextmanager
def running(run: Any, deadline: Deadline) -> Iterator[None]:
    """Make `run` the current run of this context, with its deadline (the run's own `Deadline`, one object every
    context within the run shares, a worker thread's copy included), for the duration of the block; a person's
    wait in it (`paused`) moves that deadline, once."""
    run_token, deadline_token = _current_run.set(run), _deadline.set(deadline)
    try:
        with on_pause(deadline.shift):
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

"""The one loop runtime shared by every pattern (and by the DSL).

A pattern writes its control flow once, as a generator that delegates every role call to the run::

    def _loop(self, run, requirements, context) -> RoleCalls:
        draft = (yield from run.call("creator", requirements=requirements, context=context)).draft
        ...
        return run.finish("approved")

The generator yields low-level operations (call a role, wait before a retry). `drive` performs them synchronously, for
`forward()` (what DSPy optimizers call); `adrive` performs the very same operations asynchronously, for `aforward()`
(`loops.running.drivers`). `Run` holds one run's state and is what a pattern talks to; the pieces it is built from are
values and layers of their own rooms: what the run has spent (`loops.vocabulary.usage.Usage`), checked by its budget
(`loops.vocabulary.budget.Budget.check`), its one clock (`loops.vocabulary.deadline.Deadline`), the roles' histories
(`loops.running.histories`), one role call with its retries (`loops.running.calls`), wrapped by the replay layer
(`loops.running.replay`), and the lookup of a role's predictor and LM (`loops.running.roles`), written once for every
pattern and both drivers.

A role may be answered by a person (`loops.running.person`): their turn is a call like an LLM role's, traced,
kept in the role's history and recorded; when nobody can answer, the run pauses ("awaiting_input").

The runtime knows a model only by its profile (`loops.vocabulary.profile`: adapter, history window, price) and
renders its results through `loops.vocabulary.display`; it imports no model module and no notebook code. The run
in progress, with its deadline, is published in `loops.vocabulary.context` for engines, tools and the DSL.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import dspy

from loops.errors import AwaitingInput, LimitReached, RequestRefused, RunError
from loops.recording import checkpoint
from loops.running import calls, person, replay
from loops.running.drivers import RoleCalls, UsageLog, adrive, drive
from loops.running.failures import describe, failure_action, is_transient, setup_error
from loops.running.histories import Histories, condense_turns
from loops.running.roles import lookup, predictor_of
from loops.running.steps import Step
from loops.vocabulary import context, display, profile
from loops.vocabulary.budget import Budget, RetryPolicy
from loops.vocabulary.checks import Check, CheckReport
from loops.vocabulary.contracts import PhaseContract
from loops.vocabulary.deadline import Deadline
from loops.vocabulary.demos import curate_trace
from loops.vocabulary.usage import Usage

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
_NONE: frozenset[str] = frozenset()


class LoopResult(dspy.Prediction):
    """What every loop returns: a `dspy.Prediction` with `RESULT_FIELDS`, `tokens`, `cost_usd` and the
    pattern's aliases, which shows itself briefly. Its repr is a few lines (the trace and histories are
    counted, not dumped); in Jupyter it is a summary, the trace as a table and each role's history
    folded (`loops.vocabulary.display`). It equals a plain `dspy.Prediction` with the same fields."""

    final: Any
    """The result: the approved draft, the stopped loop's value, else the best candidate's."""
    success: bool
    """Whether the loop succeeded (approved, passed) rather than ran out of a limit or failed."""
    best_attempt: Any
    """The best attempt's record (its iteration, draft or result, and the verdict on it)."""
    iterations: int
    """Iterations the loop started."""
    stop_reason: StopReason
    """Why it stopped: one of `STOP_REASONS`."""
    warnings: list[str]
    """What the run warns of: limits reached, answers asked again, verdicts not taken at their word."""
    trace: list[Step]
    """Every role call, phase and check of the run, in order."""
    histories: dict[str, dspy.History]
    """Each role's turns."""
    lm_calls: int
    """LM requests this process sent (`replayed` and `cached` apart)."""
    error: BaseException | None
    """What ended a run that stopped with `error`."""
    replayed: int
    """LM requests a checkpoint's record answered instead."""
    cached: int
    """LM calls DSPy's cache answered."""
    tokens: int
    """Input plus output tokens, as the LMs report them."""
    cost_usd: float | None
    """What the requests cost; None when unknown."""
    question: Any
    """The question a run that stopped with `awaiting_input` waits on (`loops.running.person.Question`)."""

    def __repr__(self) -> str:
        return display.result_text(self)

    def _repr_html_(self) -> str:
        return display.result_html(self)


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
        self.deadline = Deadline(self.budget.timeout_s, self.clock)  # the one clock the run, context and DSL read
        self.iteration = 0
        self.counted = Usage()  # the requests sent, replayed and cached (the usage log counts tokens and cost)
        self.histories = Histories(self.history_summary)
        self.trace: list[Step] = []
        self.warnings: list[str] = []
        self.best: dict[str, Any] | None = None
        self.best_score: Any = None
        self.current: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.question: person.Question | None = None  # what the run paused on ("awaiting_input")
        self.result: LoopResult | None = None  # the run's prediction, once `program` has it
        self.observers = context.observers()
        self.info = _run_info(self) if self.observers else None  # the run as its observers know it
        self.usage = UsageLog(priced=self.budget.max_cost_usd is not None, observers=self.observers)
        self.depth = 0  # calls in flight: a call made while a phase runs is nested in it
        self.calling: list[str] = []  # the roles whose calls are in flight, the innermost last
        self.saved_warnings: set[int] = set()  # those a saved call's record holds (`loops.running.replay`)
        self._unpriced_warned: set[str] = set()  # the models of unknown price warned of
        self._once: set[str] = set()  # the warnings given once per run ("context") or per role ("cut:ROLE")
        self.predictions: list[Any] = []  # what this run's LLM role calls returned, for `demos.curate_trace`
        self.credited: list[Any] = []
        self._gated: set[str] = set()  # LM calls the run counted when they started (`lm_call_started`)
        self._unpublished: Step | None = None  # the last step, until the pattern moves on from it (`publish`)
        # The calls this run runs within: those in flight in the run it runs within, and that run's own depth.
        self.base_depth = (self.parent.base_depth + self.parent.depth) if isinstance(self.parent, Run) else 0
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
        found = lookup(target)  # its predictor, history field and LM, once for the call
        if found.history is not None and not self.histories.has_window(role):
            self.histories.set_window(role, _window(self.windows, role, found.lm))
        return (yield from replay.recorded(self, role, inputs, lambda _: calls.ask_llm(
            self, role, found, inputs, config, adapter, demos), remember=found.history is not None))

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
        inputs = dict(inputs)
        return (yield from replay.recorded(self, role, inputs, lambda _: calls.perform(
            self, role, target, args, dict(kwargs or {}), inputs, adapter, "phase")))

    def check(self, checks: Sequence[Check], value: Any, *, floor: str | None = None,
              role: str = "checks") -> CheckReport:
        """Run `checks` on `value` (`loops.vocabulary.checks.run_checks`; `floor` says why it is junk, if it is) and
        trace them as a step of `role` whose outputs are the report (`CheckReport.to_dict`): observers and `--trace` see
        which checks held. Free: no LM request, no budget, nothing recorded in a checkpoint (a replay runs them again).
        A check that raises ends the run gracefully (`RoleFailed`); one that returns what no check returns is a
        developer's mistake (`ContractError`), raised, as is an error of the library's own (a DSL check's, with its
        position)."""
        return calls.check(self, checks, value, floor, role)

    def credit(self, prediction: Any, **used: Any) -> None:
        """Mark a role call's prediction as the one the run's result rests on (e.g. the kept one of several
        samples): an optimizer's demo of that role is this call rather than the role's last
        (`loops.vocabulary.demos`). `used` are output fields as the loop used them (e.g. the code after cleaning),
        which the demo shows instead of the raw answer."""
        self.credited.append((prediction, used))

    def forget(self, role: str) -> None:
        """Start `role` over with an empty history (e.g. for a fresh attempt rather than a repair)."""
        self.histories.forget(role)

    def next_iteration(self) -> bool:
        """Start another iteration if the budget allows one; False at `max_iterations`."""
        if not self.budget.allows_iteration(self.iteration + 1):
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
        role = self.calling[-1] if self.calling else "a role"
        self._warn_once(f"cut:{role}", f"{role}: an answer was cut at the token limit of its request (max_tokens, "
                        "--max-tokens), so it may be incomplete")

    def publish(self) -> None:
        """Tell the observers of the last step recorded, if they have not heard of it. A step is published once
        the pattern has moved on from it (its next call, or the run's end), so that what the pattern makes of
        it (`note`) is on it when observers and `--trace` see it."""
        step, self._unpublished = self._unpublished, None
        if step is not None:
            self.notify("step_finished", step)

    def time_left(self) -> float | None:
        """Seconds until the run's timeout, None without one."""
        return self.budget.time_left(self.deadline.elapsed())

    def spent(self) -> Usage:
        """What the run has spent so far, as one value (`loops.vocabulary.usage.Usage`)."""
        counted, log = self.counted, self.usage
        return Usage(counted.requests, counted.replayed, counted.cached, log.tokens, log.cost_usd,
                     self.histories.chars, frozenset(log.unpriced) if log.unpriced else _NONE)

    def finish(self, stop_reason: StopReason, **result: Any) -> LoopResult:
        """The run's prediction: `result` over the fields set by `set_latest` over the best candidate."""
        self.publish()
        return _prediction(self, stop_reason, result)

    # What the module's forward/aforward hand to a driver ------------------------------------------

    @contextlib.contextmanager
    def active(self) -> Iterator[Run]:
        """The context a run's program is driven in: its usage log, its deadline, itself as current run, and what its
        observers hold open for it (`loops.vocabulary.context.Observer.scope`). Its checkpoint's claim on the run id is
        given up when it ends, and its observers hear that it finished, however it ends."""
        self.notify("run_started", self.info)
        error = None
        try:
            with (context.running(self, self.deadline), dspy.context(usage_tracker=self.usage),
                  self._scopes(self.info)):
                yield self
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self.replay is not None:
                self.replay.release()
            self.notify("run_finished", self.info, self.result, error)

    def before_request(self) -> None:
        """The one check every LM request of the run passes before it is sent
        (`loops.vocabulary.context.before_request`): the deadline and every limit; a request let through is counted in
        `lm_calls`."""
        try:
            self.check_limits()
        except LimitReached as limit:
            raise RequestRefused(limit) from None
        self.counted.requests += 1
        if self.observers:
            context.notify("request_sent", self.info, to=self.observers)

    def lm_call_started(self, call_id: str, lm: Any) -> None:
        """DSPy is about to call `lm` (the request gate): ask for its request, unless its engine asks itself."""
        if not context.run_aware(lm):
            self.before_request()
            self._gated.add(call_id)

    def lm_call_ended(self, call_id: str, exception: BaseException | None) -> None:
        """DSPy's LM call ended: one that reported no usage and did not fail was answered from DSPy's cache."""
        counted = call_id in self._gated
        self._gated.discard(call_id)
        if exception is None and call_id not in self.usage.answered:
            self.counted.cached += 1
            self.counted.requests -= 1 if counted else 0
        self.usage.answered.discard(call_id)

    def program(self, loop: Callable[..., RoleCalls], **inputs: Any) -> RoleCalls:
        """The pattern's loop wrapped so that a limit or a run failure ends it with the work kept.

        A developer's mistake (`ConfigurationError`) and a bug in the pattern itself propagate."""
        try:
            prediction = yield from loop(self, **inputs)
        except AwaitingInput as pause:
            prediction = _paused_on(self, pause)
        except LimitReached as limit:
            self.warn(str(limit))
            self.notify("limit_reached", self.info, limit)
            prediction = self.finish(limit.reason)
        except RunError as failure:
            self.error = failure
            self.warn(f"stopped by an error: {describe(failure)}")
            prediction = self.finish("error")
        finally:
            self.publish()  # a run that raised (a developer's mistake) still shows its last step
        return _settled(self, prediction)

    # What the call machinery (`loops.running.calls`, `loops.running.replay`) asks of the run ----------------------

    def check_limits(self, where: str = "") -> None:
        """Raise the `LimitReached` `Budget.check` finds, after the warnings it asks for (`where` says where the
        run stopped). LM calls count the whole run's, those replayed from a checkpoint included, as tokens and
        cost do."""
        checked = self.budget.check(self.spent(), self.deadline.elapsed(), where, warned=self._unpriced_warned)
        if checked.warnings:
            self._unpriced_warned.update(checked.unpriced)
            self.warnings.extend(checked.warnings)
        if checked.stop is not None:
            raise checked.stop

    def remember(self, role: str, turn: dict[str, Any]) -> None:
        """Add a turn to the role's history; warn, once, when the histories near `max_context_chars`."""
        warning = self.budget.context_warning(self.histories.add(role, turn))
        if warning is not None:
            self._warn_once("context", warning)

    def record(self, step: Step) -> None:
        """Add a finished call to the trace; observers hear of it once the pattern moves on (`publish`)."""
        self.publish()
        self.trace.append(step)
        self._unpublished = step

    def notify(self, event: str, *args: Any) -> None:
        if self.observers:
            context.notify(event, *args, to=self.observers)

    # Internals ----------------------------------------------------------------------------------

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._once:
            self._once.add(key)
            self.warn(message)

    def _ask(self, role: str, asked: person.Human, inputs: dict[str, Any]) -> RoleCalls:
        """A person's turn in `role`'s place, as a role call: replayed from the checkpoint's record, else the
        answer recorded there for the question the run paused on, else asked (`loops.running.person`); kept in the
        role's history and recorded. `AwaitingInput`, with the question kept in the checkpoint, when nobody
        can answer."""
        return (yield from replay.recorded(self, role, inputs, lambda inputs_hash: calls.ask_person(
            self, role, asked, inputs, inputs_hash), remember=True, settles=True))

    def _scopes(self, what: Any) -> contextlib.AbstractContextManager:
        return context.scopes(what, to=self.observers) if self.observers else contextlib.nullcontext()


def _window(windows: Any, role: str, lm: Any) -> int | None:
    """How many turns `role` is shown: the run's `windows` (one for all, or by role), else its model's profile's."""
    if isinstance(windows, Mapping):
        windows = windows.get(role, UNSET)
    if windows is UNSET:
        return profile.profile_of(lm).history_window  # what the model's context can hold
    return windows


def _paused_on(run: Run, pause: AwaitingInput) -> LoopResult:
    """The run's end when nobody can answer a person's question now: the question kept on the result (and in
    the checkpoint), and, unless it runs within another run, a warning saying how to answer and resume."""
    run.question = pause.question
    run.notify("paused", run.info, pause.question)
    if run.parent is None:
        store, run_id = (getattr(run.replay.store, "path", "FILE"), run.replay.run_id) if run.replay else (
            "FILE", "RUN_ID")
        run.warn(f"waiting for a person to answer as the {pause.question.role}: `loops runs show {store} "
                  f"{run_id}` shows the question, `loops runs answer {store} {run_id} "
                  f"{pause.question.usage()}` (or loops.answer) records the answer, and the same call with "
                  f"run_id={run_id!r} (the same command with --run-id {run_id}) goes on")
    return run.finish("awaiting_input")


def _run_info(run: Run) -> context.RunInfo:
    replay = run.replay
    store = None if replay is None else getattr(replay.store, "path", None)
    return context.RunInfo(type(run.module).__name__, None if replay is None else replay.run_id,
                           None if store is None else str(store), 0 if replay is None else len(replay.recorded),
                           run.parent is not None, asdict(run.budget))


def _prediction(run: Run, stop_reason: StopReason, result: dict[str, Any]) -> LoopResult:
    """`Run.finish`'s prediction: what the run measured over `result` over `set_latest`'s over the best's."""
    measured = {"iterations": run.iteration, "stop_reason": stop_reason, "warnings": list(run.warnings),
                "trace": list(run.trace), "histories": run.histories.as_dspy(), "lm_calls": run.counted.requests,
                "error": run.error}
    fields = {**dict.fromkeys(RESULT_FIELDS), "success": False, **(run.best or {}), **run.current, **result,
              **measured}
    fields.update({alias: fields[name] for alias, name in run.aliases.items()})
    return LoopResult(**fields, replayed=run.counted.replayed, cached=run.counted.cached, tokens=run.usage.tokens,
                      cost_usd=run.usage.cost_usd, question=run.question)


def _settled(run: Run, prediction: LoopResult) -> LoopResult:
    """A run's prediction, once its loop has ended: its end recorded in the checkpoint, a pause passed on to the
    run it runs within, the optimizers' demos curated, and under `strict` a limit or a failure raised."""
    if run.replay is not None:
        unrecorded = run.replay.finish(prediction.stop_reason)
        if unrecorded:
            prediction.warnings.append(unrecorded)
    if run.parent is not None and prediction.stop_reason == "awaiting_input":
        pause = AwaitingInput(run.question)  # the run this one runs within pauses too
        pause.prediction = prediction
        raise pause
    curate_trace(run.predictions, run.credited)
    run.result = prediction
    if run.strict and (prediction.stop_reason in LIMIT_REASONS or prediction.stop_reason == "error"):
        raised = run.error if isinstance(run.error, RunError) else LimitReached(
            prediction.stop_reason, prediction.warnings[-1])
        raised.prediction = prediction
        raise raised
    return prediction

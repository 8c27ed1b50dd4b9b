"""One call of a run, of any kind (an LLM role's, a phase of the user's code, a person's turn), with its
retries: the budget checked first, the observers told, the operation yielded to the driver, a failed attempt
read by `loops.running.failures.failure_action` and acted on, and the call recorded as a trace step with its share of
the run's usage (`after - before`, `loops.vocabulary.usage.Usage`).

Written once for every kind; the replay layer (`loops.running.replay`) wraps it, and `loops.running.runtime.Run` calls
it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import dspy

from loops.errors import AwaitingInput, LimitReached, LoopsError, RoleFailed
from loops.running import person
from loops.running.drivers import Invoke, RoleCalls, Sleep, gated_lm
from loops.running.failures import describe, failure_action, is_unparseable, raised_at, setup_error
from loops.running.roles import Role
from loops.running.steps import Step, tokens_of
from loops.vocabulary import context, profile
from loops.vocabulary.adapters import historyless_once
from loops.vocabulary.checks import Check, CheckReport, run_checks
from loops.vocabulary.demos import demos_without_history

if TYPE_CHECKING:
    from loops.running.runtime import Run

__all__ = ["CallShare", "Kind", "ask_llm", "ask_person", "check", "perform"]

Kind = Literal["llm", "phase", "human"]
_CHAT_ADAPTER = dspy.ChatAdapter()  # DSPy's default, where neither the call nor the context sets one


def ask_llm(run: Run, role: str, found: Role, inputs: dict[str, Any], config: dict[str, Any] | None,
            adapter: dspy.Adapter | None, demos: Sequence[dspy.Example] | None) -> RoleCalls:
    """An LLM role's call (`Run.call`): its inputs, with its history when its signature has one, under the
    adapter its model answers in shape with (`loops.vocabulary.profile.adapter_for`) unless the call or the context sets
    one; its prediction, kept for the optimizers' demos (`loops.vocabulary.demos`)."""
    kwargs = dict(inputs)
    if found.history is not None:
        kwargs[found.history] = dspy.History(messages=run.histories.shown(role))
    if config:
        kwargs["config"] = dict(config)
    if demos is not None:
        kwargs["demos"] = list(demos)
    gated = None if context.run_aware(found.lm) else gated_lm(found.lm, found.target, inputs)
    if gated is not None:  # its requests pass the run's gate at the LM, without DSPy's callback machinery
        kwargs["lm"] = gated
    if adapter is None and dspy.settings.adapter is None:
        adapter = profile.adapter_for(found.lm)
    if found.history is not None:
        adapter = adapter or dspy.settings.adapter or _CHAT_ADAPTER
        if found.predictor.demos or demos:
            adapter = demos_without_history(adapter)
        adapter = historyless_once(adapter)
    result = yield from perform(run, role, found.target, (), kwargs, inputs, adapter, "llm", found.lm)
    run.predictions.append(result)
    return result


def ask_person(run: Run, role: str, asked: person.Human, inputs: dict[str, Any], inputs_hash: str | None) -> RoleCalls:
    """A person's turn (`loops.running.person`): the answer recorded for the question the run paused on, else asked.
    `AwaitingInput`, with the question kept in the checkpoint, when nobody can answer."""
    answered = None if run.replay is None else run.replay.answer_for(role, inputs_hash)
    if answered is not None:
        run.notify("resumed", run.info, role)
    try:
        return (yield from perform(run, role, asked, (asked.question(role, inputs, run.iteration), answered), {},
                                   inputs, None, "human"))
    except AwaitingInput as pause:
        if run.replay is None:
            raise person.nobody_to_answer([role]) from None
        run.replay.ask(role, inputs_hash, pause.question)
        raise


def check(run: Run, checks: Sequence[Check], value: Any, floor: str | None, role: str) -> CheckReport:
    """`Run.check`: the checks run on `value` and traced as a step of `role` whose outputs are the report."""
    run.notify("role_started", role, run.iteration)
    started = run.clock()
    try:
        report = run_checks(checks, value, floor=floor)
    except LoopsError:  # a developer's mistake (a check returning no verdict), a DSL program's error: as itself
        raise
    except Exception as error:
        run.record(Step(role, run.iteration, {"value": value}, None, run.clock() - started, error=describe(error)))
        raise RoleFailed(role, f"a check raised {describe(error)}{raised_at(error)}") from error
    run.record(Step(role, run.iteration, {"value": value}, report.to_dict(), run.clock() - started))
    return report


class CallShare:
    """What one call has used so far: its attempts, and the run's usage when it started (its share is the
    run's usage now less that)."""

    def __init__(self, run: Run, role: str, inputs: dict[str, Any], call: context.CallInfo | None = None):
        self.run, self.role, self.inputs, self.call = run, role, inputs, call
        self.started, self.started_at = run.clock(), time.time()
        self.entries_at, self.before = len(run.usage.entries), run.spent()
        self.attempts = self.parse_failures = 0
        self.failed: Step | None = None  # the call's step, when it failed for good

    def requests(self) -> int:
        """LM requests sent by this call so far (those of the calls nested in it included)."""
        return self.run.counted.requests - self.before.requests

    def step(self, outputs: dict[str, Any] | None, error: str | None = None) -> Step:
        """The call as a trace step, with what it used."""
        run = self.run
        share = run.spent() - self.before
        entries = run.usage.entries[self.entries_at:]
        return Step(self.role, run.iteration, self.inputs, outputs, run.clock() - self.started, self.attempts,
                    share.requests, tokens_of(entries) if entries else None, error, cached=share.cached,
                    cost_usd=share.cost_usd, depth=run.base_depth + run.depth, started_at=self.started_at)

    def fail(self, error: str) -> None:
        """Record the call as a failed step."""
        self.failed = self.step(None, error)
        self.run.record(self.failed)


def perform(run: Run, role: str, target: Any, args: tuple, kwargs: dict[str, Any], inputs: dict[str, Any],
            adapter: dspy.Adapter | None, kind: Kind, lm: Any = None) -> RoleCalls:
    """Call `target(*args, **kwargs)` as `role`'s call of `kind`, with retries; records a step with its outputs
    (before observers hear of it). `lm` is an LLM role's LM: one whose engine asks the run itself
    (`loops.vocabulary.context.run_aware`) goes without DSPy's gate. A person's turn has no deadline while they answer,
    and the run's clocks move past the wait.

    Every LM request is counted where it passes the run's gate (`before_request`): first tries, retries,
    re-asks, JSON fallbacks and engines' re-sends alike, failed and abandoned ones included."""
    run.publish()
    run.check_limits()
    call = None
    if run.observers:
        call = context.CallInfo(run.info, role, run.iteration, kind, getattr(lm, "model", None))
        run.notify("role_started", role, run.iteration)
        run.notify("call_started", call)
    observed = None if call is None else (call, run.observers)
    llm, human = kind == "llm", kind == "human"
    run_aware = llm and context.run_aware(lm)
    share = CallShare(run, role, inputs, call)
    try:
        while True:
            share.attempts += 1
            run.depth += 1
            run.calling.append(role)
            asked_at = time.monotonic()
            try:
                result = yield Invoke(target, args, kwargs, adapter, None if human else run.deadline.at, llm,
                                      run_aware, observed)
                break
            except Exception as exc:
                run.depth -= 1
                run.calling.pop()
                kwargs = yield from _after_failure(run, share, exc, kwargs, llm)
    except BaseException as exc:
        run.notify("call_finished", call, share.failed, exc)
        raise
    run.depth -= 1
    run.calling.pop()
    if human:
        context.paused(time.monotonic() - asked_at)
    if run_aware and not share.requests():
        run.counted.cached += 1  # its engine was never reached: DSPy's cache answered
    # A module phase's prediction holds its signature, which may be built at run time (a string signature's):
    # its step keeps a copy of its fields, which a checkpoint can record.
    shown = dspy.Prediction(**result) if isinstance(result, dspy.Prediction) else result
    step = share.step(dict(result.items()) if llm or human else {"result": shown})
    step.human = human
    run.record(step)
    run.notify("call_finished", call, step, None)
    return result


def _after_failure(run: Run, share: CallShare, error: Exception, kwargs: dict[str, Any], llm: bool) -> RoleCalls:
    """What follows a failed attempt (`failure_action`): the keyword arguments of the next attempt, after a
    wait when it is a retry; or the step recorded as failed and the error that ends the call."""
    role = share.role
    action = failure_action(error, llm=llm, attempts=share.attempts, parse_failures=share.parse_failures,
                            retry=run.retry, out_of_time=run.budget.out_of_time(run.deadline.elapsed()))
    run.notify("attempt_failed", share.call, share.attempts, error, action)
    if action == "propagate":
        if llm and isinstance(error, LimitReached) and share.requests():
            share.fail(str(error))  # the run's limits refused this call's next request: keep what it sent
        raise error
    if action in ("reparse", "retry"):
        try:
            run.check_limits(f" in {role} before a retry")  # the budget, all of it, before every retry
        except LimitReached as limit:
            share.fail(describe(error))
            raise limit from error
    if action == "reparse":
        share.parse_failures += 1
        run.warn(f"{role}: answer could not be parsed; asked again")
        # A new rollout at some temperature: the same request would get the same answer.
        return {**kwargs, "config": {**kwargs.get("config", {}), "temperature": run.retry.parse_retry_temperature,
                                     "rollout_id": share.parse_failures}}
    if action == "retry":
        pause = run.retry.delay_s(share.attempts, getattr(error, "retry_after", None))
        late = run.budget.wait_allowed(pause, run.deadline.elapsed(),
                                       f"stopped in {role}: no time left to retry after {describe(error)}")
        if late is None:
            yield Sleep(pause)
            return kwargs
        share.fail(describe(error))
        raise late from error
    if action == "setup":
        share.fail(describe(error))
        mistake = setup_error(error)
        if mistake is error:
            raise error
        raise mistake from error
    if action == "timeout":
        share.fail("abandoned at the deadline")
        raise run.budget.timed_out(run.deadline.elapsed(), f" in {role}") from error
    share.fail(describe(error))
    what = "its answer could not be parsed" if is_unparseable(error) else describe(error)
    if not llm:  # a phase is the caller's code: point at the line that raised
        what += raised_at(error)
    raise RoleFailed(role, f"{role} failed after {share.attempts} attempt(s): {what}") from error

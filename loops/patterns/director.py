"""Director–Executor–Evaluator–Controller: plan, execute, evaluate, decide.

Phase contracts (ADR `director-evaluator-loop`, `loops.vocabulary.contracts.DIRECTOR`)::

    director(current_input, iteration)                        -> plan
    executor(plan, iteration)                                 -> execution result
    evaluator(execution_result, plan, iteration)              -> feedback (with a status)
    controller(feedback, plan, execution_result, iteration)   -> a decision

Iterations are numbered from 1. Each phase may be the built-in LLM role, any `dspy.Module` or a
plain callable (sync or async), which gets the contract's arguments positionally; a custom phase's
value reaches the next phase unchanged.

How the built-in executor writes follows the model (`loops.patterns.prose`): on the embedded model it answers
in plain text, capped in length, and is shown worked examples.

A user's checks (`checks=`, `loops.vocabulary.checks`) run first on every result, for free, and what a result comes
to is the one verdict rule (`loops.vocabulary.contracts.judge`): no PASS while a check fails, whatever the evaluator
says, and the failed checks' messages are the feedback; `evaluator="checks"` lets the checks alone pass a
result (no evaluator call), the default on a small model (the embedded one) when checks are given.

Under the built-in evaluator lies a programmatic floor (`loops.vocabulary.junk.is_junk`): junk (an empty result,
the goal read back, a placeholder, no letters at all, such as `][`) never passes, whatever the LLM
says; an empty result is not even shown to it.
"""

from __future__ import annotations

import functools
from typing import Any

import dspy

from loops.choices import JUDGES
from loops.errors import ConfigurationError, ContractError, RoleFailed
from loops.patterns.prose import prose_call, prose_settings
from loops.running.module import LoopModule
from loops.running.runtime import RoleCalls, Run
from loops.signatures.director import (
    DirectorSignature,
    EvaluatorSignature,
    LoopControllerSignature,
    PlanExecutorSignature,
)
from loops.signatures.results import ControllerDecision
from loops.vocabulary.checks import Check, as_checks, stated_rules
from loops.vocabulary.contracts import (
    DIRECTOR,
    DIRECTOR_INPUTS,
    MISSING,
    UNJUDGED,
    attempt_rank,
    checked_threshold,
    decision,
    field_of,
    judge,
    outcome_passed,
    verdict_score,
)
from loops.vocabulary.junk import is_junk

__all__ = ["EVALUATOR_CHOICES", "DirectorExecutorEvaluatorController"]

EVALUATOR_CHOICES = JUDGES
"""What `evaluator=` may name instead of a phase: the checks alone pass a result, or the built-in evaluator after
them."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


class DirectorExecutorEvaluatorController(LoopModule):
    """Plan with a director, carry the plan out, evaluate the result, and let a controller decide.

    The built-in roles are LLMs; the built-in controller is one too. An evaluator's PASS ends the loop:
    the built-in controller is not asked; a custom controller is (its `("stop", value)` makes `value`
    the final one), but a `continue` after a PASS is not followed. After a FAIL the controller decides;
    if the built-in one fails, the loop continues with the evaluator's feedback. The built-in evaluator
    never passes junk (`loops.vocabulary.junk.is_junk`): that is noted on its step and in the warnings; an empty
    result fails without asking the LLM. `plain_text=True` has the built-in executor answer with the
    result itself (no JSON), at most `loops.patterns.prose` defaults' `max_tokens`; `examples=True` shows it
    worked examples (`loops.patterns.prose.WORKED_DRAFTS`; an optimized executor's own demos instead). Left
    unset, both follow the executor's model (`loops.patterns.prose.prose_defaults`): on for a small model (the
    embedded one, or any whose profile is small, `loops.vocabulary.profile`).

    `checks=[...]` (callables of the result, or short forms such as `"max-words=40"`; a call may add its own) run on
    every execution result before the evaluator, each traced as a `checks` step; their rules are stated in the goal the
    built-in roles read. A check that fails means FAIL, whatever the evaluator says: the evaluation the controller gets
    is then `{"status": "FAIL", "feedback": ..., "checks": ..., "evaluation": <the evaluator's own value>}`; with every
    check holding, the evaluator's value goes on unchanged. `evaluator="checks"` passes a result when every check holds,
    with no evaluator call; `evaluator="llm"` asks the built-in evaluator once they hold; left unset, the checks alone
    on the embedded model, the evaluator on any other. An evaluator may score instead (a number, a (score, feedback)
    pair, a `score` field): with `threshold=` it passes a result at or above it, and the best attempt is the
    highest-scored (`loops.vocabulary.contracts.judge`); without it, its value is read as an evaluation (an int is an
    exit code, 0 passing).

    `final` is the controller's stop value, or the last execution result; `success` whether the last
    evaluation passed; `best_attempt` the iteration, plan, result and feedback of the best one
    (`loops.vocabulary.contracts.attempt_rank`: checks held, then the verdict; of equal ones the earlier).
    """

    contracts = DIRECTOR
    input_contract = DIRECTOR_INPUTS

    def __init__(self, max_iterations: int | None = None, director: Any = None, executor: Any = None,
                 evaluator: Any = None, controller: Any = None, *, checks: Any = None, plain_text: bool | None = None,
                 examples: bool | None = None, threshold: float | None = None, **options: Any):
        super().__init__(max_iterations=max_iterations, **options)
        self.threshold = checked_threshold(threshold)
        for name, choice in (("plain_text", plain_text), ("examples", examples)):
            if choice not in (None, True, False):
                raise ConfigurationError(f"{name} must be True, False or None (by model), got {choice!r}")
        if isinstance(evaluator, str) and evaluator not in EVALUATOR_CHOICES:
            raise ContractError(f"the evaluator phase must be callable as {DIRECTOR['evaluator'].signature}, or be "
                                f"'checks' (the checks alone pass a result) or 'llm' (the built-in evaluator, after "
                                f"the checks); got {evaluator!r}")
        self.checks = as_checks(checks)
        self.plain_text = plain_text
        self.examples = examples
        for role, phase, builtin in (
            ("director", director, lambda: dspy.Predict(DirectorSignature)),
            ("executor", executor, lambda: dspy.Predict(PlanExecutorSignature)),
            ("evaluator", None if evaluator == "llm" else evaluator, lambda: dspy.Predict(EvaluatorSignature)),
            ("controller", controller, lambda: dspy.Predict(LoopControllerSignature)),
        ):
            if role != "evaluator" or evaluator != "checks":  # the checks alone: no evaluator at all
                self._set_phase(role, phase, builtin)
        # Who passes a result: "checks", "llm", "phase" (a custom evaluator), or None (by the executor's model).
        # `self.evaluator` is the role.
        self._evaluator = evaluator if isinstance(evaluator, str) else (
            None if self._phases["evaluator"].builtin else "phase")

    def forward(self, initial_input: Any = MISSING, checks: Any = None, **limits: Any) -> dspy.Prediction:
        return self._forward(limits, **self._checked_inputs(limits, {"initial_input": initial_input, "checks": checks}))

    async def aforward(self, initial_input: Any = MISSING, checks: Any = None, **limits: Any) -> dspy.Prediction:
        inputs = {"initial_input": initial_input, "checks": checks}
        return await self._aforward(limits, **self._checked_inputs(limits, inputs))

    def _checks_alone(self) -> str | None:
        return "evaluator='checks' passes a result" if self._evaluator == "checks" else None

    def settings(self, checks: bool | None = None) -> dict[str, Any]:
        """How the built-in executor writes in a run started now, and who passes a result (`evaluator`: "checks", "llm",
        or "phase" for a custom one): the explicit choices, else `loops.patterns.prose.prose_defaults` of the executor's
        model (its own LM, else the context's). `checks` says whether the run has checks (default: whether the module
        has)."""
        has_checks = bool(self.checks) if checks is None else checks
        settings = prose_settings(getattr(self, "executor", None), self.plain_text, self.examples, None,
                                  self._evaluator, has_checks)
        return {"plain_text": settings["plain_text"], "examples": settings["examples"],
                "max_tokens": settings["max_tokens"], "evaluator": settings["critic"]}

    def _loop(self, run: Run, initial_input: Any, checks: tuple[Check, ...]) -> RoleCalls:
        goal = _text(initial_input)
        stated = stated_rules(checks, goal) if checks else goal  # what the built-in roles read
        current = initial_input
        settings = self.settings(bool(checks))
        writing = functools.partial(prose_call, "executor", self.executor, settings)  # the built-in's options
        while run.next_iteration():
            iteration = run.iteration
            plan, _ = yield from self._phases["director"].ask(
                run, "plan", {"goal": stated, "current_input": _text(current)}, current_input=current,
                iteration=iteration)
            result, _ = yield from self._phases["executor"].ask(
                run, "result", {"plan": stated_rules(checks, _text(plan))}, writing, plan=plan, iteration=iteration)
            attempt = {"iteration": iteration, "plan": plan, "result": result, "feedback": None}
            # Offered before it is judged: an evaluator that fails must not lose the result.
            run.offer_candidate(UNJUDGED, best_attempt=attempt)
            run.set_latest(final=result, success=False)
            feedback, verdict = yield from self._evaluate(run, stated, plan, result, iteration, checks,
                                                          settings["evaluator"])
            success = verdict.approved
            run.offer_candidate(attempt_rank(verdict, iteration), best_attempt={**attempt, "feedback": feedback})
            run.set_latest(final=result, success=success)
            decided = yield from self._decide(run, stated, feedback, plan, result, iteration, success)
            if decided.should_stop:
                return run.finish("stopped", final=decided.value)
            if success:  # a PASS ends the loop, whatever a custom controller would do next
                run.note("the evaluator passed: the loop stops here, not at the controller's continue")
                return run.finish("stopped", final=result)
            current = decided.value
        return run.finish("max_iterations")

    def _evaluate(self, run: Run, goal: str, plan: Any, result: Any, iteration: int, checks: tuple[Check, ...],
                  mode: str) -> RoleCalls:
        """The evaluation the controller gets, and the verdict on it (`loops.vocabulary.contracts.judge`): the checks
        first, then the evaluator unless the checks alone pass the result."""
        floor = is_junk(goal, result) if mode != "phase" else None
        report = run.check(checks, result, floor=floor) if checks else None
        if mode == "checks":
            verdict = judge(report)
            if floor:
                _floored(run, None, floor)
            return {"status": "PASS" if verdict.approved else "FAIL", "feedback": verdict.feedback,
                    "checks": report}, verdict
        if mode == "phase":
            outcome = yield from run.call_phase("evaluator", execution_result=result, plan=plan, iteration=iteration)
        elif floor == "empty":  # nothing to judge: the floor answers alone
            yield from run.call_phase("evaluator", _failing, execution_result=result, plan=plan, iteration=iteration)
            outcome = _floored(run, None, floor)
        else:
            answer = yield from run.call("evaluator", goal=goal, plan=_text(plan), result=_text(result))
            outcome = {"status": answer.status, "feedback": answer.feedback}
            outcome = _floored(run, outcome, floor) if floor else outcome
        # A numeric evaluation is a score only for a loop given threshold=; without one an evaluator's value is read
        # as it always was (an int is an exit code, 0 passing).
        scored = mode == "phase" and self.threshold is not None and verdict_score(outcome) is not None
        verdict = judge(report, outcome if scored else (outcome_passed(outcome), _text(field_of(outcome, "feedback")
                                                                                        or "")),
                        threshold=self.threshold)
        if report is None or report.passed:
            return outcome, verdict
        return {"status": "FAIL", "feedback": verdict.feedback, "checks": report, "evaluation": outcome}, verdict

    def _decide(self, run: Run, goal: str, feedback: Any, plan: Any, result: Any, iteration: int,
                success: bool) -> RoleCalls:
        """The controller's decision: the built-in one's (`_controlled`), or what the user's returns."""
        raw = yield from self._phases["controller"].call(
            run, lambda: self._controlled(run, goal, feedback, plan, result, iteration, success),
            feedback=feedback, plan=plan, execution_result=result, iteration=iteration)
        return decision(raw)

    def _controlled(self, run: Run, goal: str, feedback: Any, plan: Any, result: Any, iteration: int,
                    success: bool) -> RoleCalls:
        """The built-in controller's decision: a PASS stops without asking it; after a FAIL it decides, and if it
        fails the loop continues with the evaluator's feedback."""
        if success:
            return ControllerDecision.stop(result)
        details = feedback.get("feedback", feedback) if isinstance(feedback, dict) else feedback
        try:
            answer = yield from run.call("controller", goal=goal, plan=_text(plan), result=_text(result),
                                         status="FAIL", feedback=_text(details))
        except RoleFailed as failure:
            run.warn(f"iteration {iteration}: {failure}; continuing with the evaluator's feedback")
            return ControllerDecision.proceed(f"{goal}\n\nThe last attempt fell short: {_text(details)}")
        if answer.action == "stop":
            return ControllerDecision.stop(result)
        next_input = (answer.next_input or "").strip() or _text(details)
        return ControllerDecision.proceed(f"{goal}\n\nNext: {next_input}")


def _failing(execution_result: Any, plan: Any, iteration: int) -> dict[str, str]:
    """The floor as an evaluator phase: FAIL."""
    return {"status": "FAIL", "feedback": ""}


def _floored(run: Run, outcome: dict[str, Any] | None, junk: str) -> dict[str, Any]:
    """An evaluation of a junk result: FAIL whatever the LLM said, the reason first in its feedback."""
    said = "the evaluator was not asked" if outcome is None else \
        f"the evaluator said {outcome['status']}"
    run.note(f"junk ({junk}): FAIL")
    run.warn(f"iteration {run.iteration}: the result is junk ({junk}): not passed ({said})")
    said_too = "" if outcome is None else str(outcome.get("feedback") or "").strip()
    return {"status": "FAIL",
            "feedback": f"The result is not what the goal asks for ({junk}): produce it. {said_too}".strip()}

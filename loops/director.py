"""Director–Executor–Evaluator–Controller: plan, execute, evaluate, decide.

Phase contracts (ADR `director-evaluator-loop`, `loops.contracts.DIRECTOR`)::

    director(current_input, iteration)                        -> plan
    executor(plan, iteration)                                 -> execution result
    evaluator(execution_result, plan, iteration)              -> feedback (with a status)
    controller(feedback, plan, execution_result, iteration)   -> a decision

Iterations are numbered from 1. Each phase may be the built-in LLM role, any `dspy.Module` or a
plain callable (sync or async), which gets the contract's arguments positionally; a custom phase's
value reaches the next phase unchanged.

How the built-in executor writes follows the model (`loops.prose`): on the embedded model it answers
in plain text, capped in length, and is shown worked examples.

Under the built-in evaluator lies a programmatic floor (`loops.junk.is_junk`): junk (an empty result,
the goal read back, a placeholder, no letters at all, such as `][`) never passes, whatever the LLM
says; an empty result is not even shown to it.
"""

from __future__ import annotations

from typing import Any

import dspy

from loops.contracts import DIRECTOR, DIRECTOR_INPUTS, MISSING, decision, outcome_passed
from loops.errors import ConfigurationError, RoleFailed
from loops.junk import is_junk
from loops.module import LoopModule
from loops.prose import prose_call, prose_settings
from loops.runtime import RoleCalls, Run
from loops.signatures.director import (
    DirectorSignature,
    EvaluatorSignature,
    LoopControllerSignature,
    PlanExecutorSignature,
)
from loops.signatures.results import ControllerDecision

__all__ = ["DirectorExecutorEvaluatorController"]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


class DirectorExecutorEvaluatorController(LoopModule):
    """Plan with a director, carry the plan out, evaluate the result, and let a controller decide.

    The built-in roles are LLMs; the built-in controller is one too. An evaluator's PASS ends the loop:
    the built-in controller is not asked; a custom controller is (its `("stop", value)` makes `value`
    the final one), but a `continue` after a PASS is not followed. After a FAIL the controller decides;
    if the built-in one fails, the loop continues with the evaluator's feedback. The built-in evaluator
    never passes junk (`loops.junk.is_junk`): that is noted on its step and in the warnings; an empty
    result fails without asking the LLM. `plain_text=True` has the built-in executor answer with the
    result itself (no JSON), at most `loops.prose` defaults' `max_tokens`; `examples=True` shows it
    worked examples (`loops.prose.WORKED_DRAFTS`; an optimized executor's own demos instead). Left
    unset, both follow the executor's model (`loops.prose.prose_defaults`): on for a small model (the
    embedded one, or any whose profile is small, `loops.profile`).

    `final` is the controller's stop value, or the last execution result; `success` whether the last
    evaluation passed; `best_attempt` the iteration, plan, result and feedback of the best one.
    """

    contracts = DIRECTOR
    input_contract = DIRECTOR_INPUTS

    def __init__(self, max_iterations: int | None = None, director: Any = None, executor: Any = None,
                 evaluator: Any = None, controller: Any = None, *, plain_text: bool | None = None,
                 examples: bool | None = None, **options: Any):
        super().__init__(max_iterations=max_iterations, **options)
        for name, choice in (("plain_text", plain_text), ("examples", examples)):
            if choice not in (None, True, False):
                raise ConfigurationError(f"{name} must be True, False or None (by model), got {choice!r}")
        self.plain_text = plain_text
        self.examples = examples
        self._builtin = frozenset(role for role, phase, builtin in (
            ("director", director, lambda: dspy.Predict(DirectorSignature)),
            ("executor", executor, lambda: dspy.Predict(PlanExecutorSignature)),
            ("evaluator", evaluator, lambda: dspy.Predict(EvaluatorSignature)),
            ("controller", controller, lambda: dspy.Predict(LoopControllerSignature)),
        ) if self._set_phase(role, phase, builtin))

    def forward(self, initial_input: Any = MISSING, **limits: Any) -> dspy.Prediction:
        return self._forward(limits, **self._checked_inputs(limits, {"initial_input": initial_input}))

    async def aforward(self, initial_input: Any = MISSING, **limits: Any) -> dspy.Prediction:
        return await self._aforward(limits, **self._checked_inputs(limits, {"initial_input": initial_input}))

    def _builtin_phases(self) -> frozenset[str]:
        return self._builtin

    def settings(self) -> dict[str, Any]:
        """How the built-in executor writes in a run started now: the explicit choices, else
        `loops.prose.prose_defaults` of the executor's model (its own LM, else the context's)."""
        return prose_settings(getattr(self, "executor", None), self.plain_text, self.examples)

    def _loop(self, run: Run, initial_input: Any) -> RoleCalls:
        goal = _text(initial_input)
        current = initial_input
        writing = prose_call("executor", self.executor, self.settings()) if "executor" in self._builtin else {}
        while run.next_iteration():
            iteration = run.iteration
            plan = yield from self._phase(run, "director", "plan", {"goal": goal, "current_input": _text(current)},
                                          current_input=current, iteration=iteration)
            result = yield from self._phase(run, "executor", "result", {"plan": _text(plan)},
                                            plan=plan, iteration=iteration, call=writing)
            attempt = {"iteration": iteration, "plan": plan, "result": result, "feedback": None}
            # Offered before it is judged: an evaluator that fails must not lose the result.
            run.offer_candidate((-1,), best_attempt=attempt)
            run.set_latest(final=result, success=False)
            feedback = yield from self._evaluate(run, goal, plan, result, iteration)
            success = outcome_passed(feedback)
            run.offer_candidate((int(success),), best_attempt={**attempt, "feedback": feedback})
            run.set_latest(final=result, success=success)
            verdict = yield from self._decide(run, goal, feedback, plan, result, iteration)
            if verdict.should_stop:
                return run.finish("stopped", final=verdict.value)
            if success:  # a PASS ends the loop, whatever a custom controller would do next
                run.note("the evaluator passed: the loop stops here, not at the controller's continue")
                return run.finish("stopped", final=result)
            current = verdict.value
        return run.finish("max_iterations")

    def _phase(self, run: Run, role: str, output: str, llm_inputs: dict[str, Any], call: dict[str, Any] | None = None,
               **arguments: Any) -> RoleCalls:
        if role in self._builtin:
            prediction = yield from run.call(role, **(call or {}), **llm_inputs)
            return prediction[output]
        return (yield from run.call_phase(role, **arguments))

    def _evaluate(self, run: Run, goal: str, plan: Any, result: Any, iteration: int) -> RoleCalls:
        if "evaluator" in self._builtin:
            junk = is_junk(goal, result)
            if junk == "empty":  # nothing to judge: the floor answers alone
                yield from run.call_phase("evaluator", _failing, execution_result=result, plan=plan,
                                          iteration=iteration)
                return _floored(run, None, junk)
            verdict = yield from run.call("evaluator", goal=goal, plan=_text(plan), result=_text(result))
            outcome = {"status": verdict.status, "feedback": verdict.feedback}
            return _floored(run, outcome, junk) if junk else outcome
        return (yield from run.call_phase("evaluator", execution_result=result, plan=plan, iteration=iteration))

    def _decide(self, run: Run, goal: str, feedback: Any, plan: Any, result: Any, iteration: int) -> RoleCalls:
        if "controller" not in self._builtin:
            raw = yield from run.call_phase("controller", feedback=feedback, plan=plan, execution_result=result,
                                            iteration=iteration)
            return decision(raw)
        if outcome_passed(feedback):
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

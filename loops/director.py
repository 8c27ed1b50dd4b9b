"""Director–Executor–Evaluator–Controller: plan, execute, evaluate, decide.

Phase contracts (ADR `director-evaluator-loop`), pinned here and nowhere else::

    director(current_input, iteration)                        -> plan
    executor(plan, iteration)                                 -> execution result
    evaluator(execution_result, plan, iteration)              -> feedback (with a status)
    controller(feedback, plan, execution_result, iteration)   -> ControllerDecision

Iterations are numbered from 1. Each phase may be the built-in LLM role, any `dspy.Module` or a
plain callable (sync or async), which gets the contract's arguments positionally.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy

from loops.errors import RoleFailed
from loops.module import LoopModule
from loops.runtime import Program, Run
from signatures.director import DirectorSignature, EvaluatorSignature, LoopControllerSignature, PlanExecutorSignature
from signatures.results import ControllerDecision

Phase = Callable[..., Any] | dspy.Module | None


def feedback_passed(feedback: Any) -> bool:
    """Whether an evaluator's feedback says the result is good (a PASS status, or a truthy `success`)."""
    if isinstance(feedback, dict):
        status = feedback.get("status", feedback.get("success"))
    else:
        status = getattr(feedback, "status", getattr(feedback, "success", feedback))
    if isinstance(status, str):
        return status.strip().upper() in ("PASS", "PASSED", "SUCCESS", "COMPLETE", "OK")
    return bool(status)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


class DirectorExecutorEvaluatorController(LoopModule):
    """Plan with a director, carry the plan out, evaluate the result, and let a controller decide.

    The built-in roles are LLMs; the built-in controller is one too, but an evaluator's PASS stops
    the loop without asking it, and if it fails the loop continues with the evaluator's feedback.

    Returns `final` (the controller's stop value, or the last execution result), `success` (the last
    evaluation passed), `best_attempt`, `iterations`, `stop_reason` (`stopped` when the controller
    stopped), `warnings`, `trace`.
    """

    result_defaults = {"final": None, "success": False, "best_attempt": None}

    def __init__(
        self,
        max_iterations: int = 3,
        director: Phase = None,
        executor: Phase = None,
        evaluator: Phase = None,
        controller: Phase = None,
        **options: Any,
    ):
        super().__init__(max_iterations=max_iterations, **options)
        self.director = director if director is not None else dspy.Predict(DirectorSignature)
        self.executor = executor if executor is not None else dspy.Predict(PlanExecutorSignature)
        self.evaluator = evaluator if evaluator is not None else dspy.Predict(EvaluatorSignature)
        self.controller = controller if controller is not None else dspy.Predict(LoopControllerSignature)
        self._builtin = frozenset(name for name, phase in [("director", director), ("executor", executor),
                                                           ("evaluator", evaluator), ("controller", controller)]
                                  if phase is None)

    def forward(self, initial_input: Any, **limits: Any) -> dspy.Prediction:
        return self._forward(limits, initial_input=initial_input)

    async def aforward(self, initial_input: Any, **limits: Any) -> dspy.Prediction:
        return await self._aforward(limits, initial_input=initial_input)

    def _loop(self, run: Run, initial_input: Any) -> Program:
        goal = _text(initial_input)
        current = initial_input
        while run.next_iteration():
            iteration = run.iteration
            plan = yield from self._phase(run, "director", "plan", iteration, current_input=current,
                                          llm_inputs={"goal": goal, "current_input": _text(current)})
            result = yield from self._phase(run, "executor", "result", iteration, plan=plan,
                                            llm_inputs={"plan": _text(plan)})
            feedback = yield from self._evaluate(run, goal, plan, result, iteration)
            passed = feedback_passed(feedback)
            run.keep(int(passed), best_attempt={"iteration": iteration, "plan": plan, "result": result,
                                                "feedback": feedback})
            run.update(final=result, success=passed)
            decision = yield from self._decide(run, goal, feedback, plan, result, iteration)
            if decision.should_stop:
                return run.finish("stopped", final=decision.value)
            current = decision.value
        return run.finish("max_iterations")

    def _phase(self, run: Run, role: str, output: str, iteration: int, llm_inputs: dict[str, Any],
               **contract_args: Any) -> Program:
        if role in self._builtin:
            prediction = yield from run.call(role, **llm_inputs)
            return prediction[output]
        return (yield from run.call_phase(role, **contract_args, iteration=iteration))

    def _evaluate(self, run: Run, goal: str, plan: Any, result: Any, iteration: int) -> Program:
        if "evaluator" in self._builtin:
            verdict = yield from run.call("evaluator", goal=goal, plan=_text(plan), result=_text(result))
            return {"status": verdict.status, "feedback": verdict.feedback}
        return (yield from run.call_phase("evaluator", execution_result=result, plan=plan, iteration=iteration))

    def _decide(self, run: Run, goal: str, feedback: Any, plan: Any, result: Any, iteration: int) -> Program:
        if "controller" not in self._builtin:
            raw = yield from run.call_phase("controller", feedback=feedback, plan=plan, execution_result=result,
                                            iteration=iteration)
            return ControllerDecision.coerce(raw)
        if feedback_passed(feedback):
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

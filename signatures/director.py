"""Signatures of the Director–Executor–Evaluator–Controller roles."""

from typing import Literal

import dspy

__all__ = ["DirectorSignature", "EvaluatorSignature", "LoopControllerSignature", "PlanExecutorSignature"]


class DirectorSignature(dspy.Signature):
    """You are the DIRECTOR. Turn the goal and the current input into a concrete plan for this
    iteration: the steps the executor should take and what a good result looks like."""

    goal: str = dspy.InputField(desc="The overall goal")
    current_input: str = dspy.InputField(desc="This iteration's input: the goal, or the controller's feedback")
    history: dspy.History = dspy.InputField(desc="Your earlier plans in this run")

    plan: str = dspy.OutputField(desc="A short, concrete plan for the executor")


class PlanExecutorSignature(dspy.Signature):
    """You are the EXECUTOR. Carry out the director's plan and return the result itself."""

    plan: str = dspy.InputField(desc="The plan to carry out")
    history: dspy.History = dspy.InputField(desc="Your earlier results in this run")

    result: str = dspy.OutputField(desc="The result of carrying out the plan")


class EvaluatorSignature(dspy.Signature):
    """You are the EVALUATOR. Judge whether the executor's result carries out the plan and meets the
    goal; say precisely what is missing or wrong."""

    goal: str = dspy.InputField(desc="The overall goal")
    plan: str = dspy.InputField(desc="The plan the executor was given")
    result: str = dspy.InputField(desc="The executor's result")
    history: dspy.History = dspy.InputField(desc="Your earlier evaluations in this run")

    status: Literal["PASS", "FAIL"] = dspy.OutputField(desc="PASS if the result meets the goal, else FAIL")
    feedback: str = dspy.OutputField(desc="What is missing or wrong (empty on PASS)")


class LoopControllerSignature(dspy.Signature):
    """You are the CONTROLLER. From the evaluator's feedback decide whether to stop (the result is
    good enough) or to continue, and if continuing, write the input for the director's next plan."""

    goal: str = dspy.InputField(desc="The overall goal")
    plan: str = dspy.InputField(desc="This iteration's plan")
    result: str = dspy.InputField(desc="This iteration's result")
    status: str = dspy.InputField(desc="The evaluator's status: PASS or FAIL")
    feedback: str = dspy.InputField(desc="The evaluator's feedback")
    history: dspy.History = dspy.InputField(desc="Your earlier decisions in this run")

    action: Literal["continue", "stop"] = dspy.OutputField(desc="stop when the result meets the goal")
    next_input: str = dspy.OutputField(desc="On continue: what the director should plan for next")

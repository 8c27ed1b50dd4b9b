"""Signatures of the Execute–Validate–Controller roles: an executor that writes code, and an analyst
that reads the validator's output and decides what the executor should do next."""

import dspy

__all__ = ["ExecutorSignature", "IterationAnalystSignature"]


class ExecutorSignature(dspy.Signature):
    """You are the EXECUTOR. Write the complete contents of the target file so that the task is done
    and its tests pass.

    Output only code in `code`: no markdown fences, no explanations, no example usage. Name every
    function exactly as the task and its tests call it.
    """

    task: str = dspy.InputField(desc="What to do in this attempt, with what went wrong before, if anything")
    target_file: str = dspy.InputField(desc="The file your code is written to")
    file_context: str = dspy.InputField(desc="Current contents of relevant files (may be empty)")
    history: dspy.History = dspy.InputField(desc="Your earlier attempts in this run")

    code: str = dspy.OutputField(desc="The full contents of the target file: code only")
    notes: str = dspy.OutputField(desc="One sentence on what this attempt does")


class IterationAnalystSignature(dspy.Signature):
    """You are the ANALYST of one iteration. Read the executor's code and the test run, decide whether
    the goal is met, and if not write the next instruction for the executor: short, specific and
    actionable (which test failed, why, and what to change)."""

    goal: str = dspy.InputField(desc="The overall goal of the loop")
    code: str = dspy.InputField(desc="What the executor produced in this iteration")
    test_command: str = dspy.InputField(desc="The command that validated it")
    exit_code: int = dspy.InputField(desc="The test command's exit code (0 means the tests passed)")
    test_output: str = dspy.InputField(desc="The end of the test command's output")
    digest: str = dspy.InputField(desc="The failures, already summarised by the loop")
    history: dspy.History = dspy.InputField(desc="Your earlier analyses in this run")

    success: bool = dspy.OutputField(desc="True only if the goal is met and the tests passed")
    analysis: str = dspy.OutputField(desc="What happened in this iteration, in one or two sentences")
    next_input: str = dspy.OutputField(desc="The instruction for the executor's next attempt (empty on success)")

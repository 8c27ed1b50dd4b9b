"""The values the loops' phases exchange (pydantic models).

Every model is frozen: a phase hands its result to the next phase and the loop's history keeps it,
so nobody may change it afterwards. Like every signature, these import nothing of the runtime:
reading a phase's value into them (a controller's tuple, an executor's dict) happens where the loop
takes its decisions (`loops.vocabulary.contracts`, `loops.patterns.code`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CodeRequest",
    "ControllerDecision",
    "StructuredAnalysisResult",
    "TaskResult",
    "ValidationResult",
]

class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class TaskResult(_Frozen):
    """What the executor produced in one iteration: a status, its content and the files it wrote.

    `files` maps a path relative to the workspace to the full text of that file.
    """

    status: Literal["COMPLETE", "FAILED"]
    content: Any = None
    notes: dict[str, Any] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)

    @field_validator("status", mode="before")
    @classmethod
    def _normalise_status(cls, value: Any) -> Any:
        # LMs write "complete" or " Complete" as often as "COMPLETE".
        return value.strip().upper() if isinstance(value, str) else value


class CodeRequest(_Frozen):
    """What the built-in executor of the Execute–Validate–Controller loop is asked in one iteration.

    The loop's public input is a str (the prompt) or a dict with a `prompt` str and, optionally, the
    other fields (`loops.patterns.code.code_request` reads either form): `files` (workspace files shown to the
    executor), `target_file` (the file it writes;
    default the module's), `expected_names` (names the code must define), `feedback` (what failed
    before), `interface` (what the tests call, read from the workspace before the first attempt) and
    `workspace_files` ({path: text} written into the run's workspace before anything else, e.g. the
    tests of one dataset example: each example then brings its own workspace).
    The loop builds the next iteration's request from it with `retry`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    feedback: str = ""
    expected_names: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    target_file: str | None = None
    interface: str = ""
    workspace_files: dict[str, str] = Field(default_factory=dict)

    def task(self) -> str:
        """The executor's `task` text: the prompt, the interface the tests expect, what failed before."""
        text = self.prompt
        if self.interface:
            text += f"\n\n{self.interface}"
        if self.feedback:
            text += f"\n\nYour previous attempt failed:\n{self.feedback}"
        return text

    def retry(self, feedback: str, expected_names: list[str] | tuple[str, ...] = ()) -> CodeRequest:
        """The next iteration's request: the same task, this feedback, the expected names so far plus these."""
        names = tuple(dict.fromkeys([*self.expected_names, *expected_names]))
        return self.model_copy(update={"feedback": feedback, "expected_names": names})


class ValidationResult(_Frozen):
    """The outcome of running a validator (usually a test command) on the executor's work.

    `error` is set when the run itself went wrong (timeout, crash of the harness), as opposed to the
    command merely failing, which only shows in `exit_code`. `passed`/`failed` are test counts when
    the validator knows them. `escaped` lists the processes the command started that had left its
    process group (`setsid`, a daemon) and were killed when it ended ("pid N: command line").
    """

    stdout: str = ""
    stderr: str = ""
    exit_code: int
    error: str | None = None
    passed: int | None = None
    failed: int | None = None
    timed_out: bool = False
    seconds: float | None = None
    escaped: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the command exited with 0 and nothing went wrong around it."""
        return self.exit_code == 0 and self.error is None


class StructuredAnalysisResult(_Frozen):
    """The analyzer's verdict on one iteration and, on failure, the input for the next one."""

    success: bool
    analysis: str
    next_input: str | None = None
    new_files: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _next_input_required_on_failure(self) -> StructuredAnalysisResult:
        if not self.success and not (self.next_input and self.next_input.strip()):
            raise ValueError(
                "next_input is required (a non-empty string) when success is false: "
                "it is the input the executor gets in the next iteration"
            )
        return self


class ControllerDecision(_Frozen):
    """The controller's verdict: `continue` with a value for the next iteration, or `stop` with the
    final value. `loops.vocabulary.contracts.decision` also accepts the ADR's tuple and dict forms."""

    action: Literal["continue", "stop"]
    value: Any = None

    @field_validator("action", mode="before")
    @classmethod
    def _normalise_action(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @classmethod
    def proceed(cls, value: Any = None) -> ControllerDecision:
        """Continue the loop with `value` (named `proceed` because `continue` is a keyword)."""
        return cls(action="continue", value=value)

    @classmethod
    def stop(cls, value: Any = None) -> ControllerDecision:
        """Stop the loop with `value` as the result."""
        return cls(action="stop", value=value)

    @property
    def should_stop(self) -> bool:
        return self.action == "stop"

"""Running a loop in the terminal: a live table of its role calls, a person's turn asked below it, the trace
file, and the final report with its exit code."""

from __future__ import annotations

import datetime
import json
import shlex
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from loops.cli.options import EXIT_INTERRUPTED, ModelChoice, console, exit_code, new_run_id
from loops.errors import ConfigurationError
from loops.vocabulary.context import observing

if TYPE_CHECKING:
    import dspy

    from loops.running.person import Question
    from loops.running.runtime import Step

__all__ = ["LiveProgress", "TraceFile", "finish_report", "open_trace", "report", "run_with_progress",
           "say_interrupted", "show_question"]


class TraceFile:
    """The `--trace` file: one JSON line per finished role call (`"record": "step"`, the step's fields,
    `Step.to_dict`), then one that sums the run up (`"record": "summary"`: its stop reason, success, iterations,
    LM calls, tokens, cost, warnings and wall time, and the error that ended it if one did), each with the run's
    id and the time it was written (UTC, ISO 8601), and what else names the run (`about`: a batch's example id,
    `"example"`). Runs are appended, so one file can hold many; their `run_id` tells them apart."""

    def __init__(self, file: IO[str], run_id: str, **about: Any):
        self.file = file
        self.run_id = run_id
        self.about = about

    def step(self, step: Step) -> None:
        self._write("step", step.to_dict())

    def summary(self, result: Any, seconds: float, error: str | None = None) -> None:
        """The run's last record: `result` its prediction, or a batch's record of its example (`loops.batch`),
        None when the run ended without one (`error` says how: interrupted, or what it raised)."""
        result = {} if result is None else result
        error = error or result.get("error")
        self._write("summary", {
            "stop_reason": result.get("stop_reason"), "success": bool(result.get("success")),
            "iterations": result.get("iterations"), "lm_calls": result.get("lm_calls"),
            "replayed": result.get("replayed"), "cached": result.get("cached"), "tokens": result.get("tokens"),
            "cost_usd": result.get("cost_usd"), "warnings": list(result.get("warnings") or []),
            **({"error": error} if error else {}), "seconds": round(seconds, 3)})

    def _write(self, record: str, fields: dict[str, Any]) -> None:
        written = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        self.file.write(json.dumps({"record": record, "run_id": self.run_id, "time": written, **self.about,
                                    **fields}, default=str) + "\n")
        self.file.flush()


class LiveProgress:
    """An observer that draws finished role calls as a table and the running one with a spinner."""

    def __init__(self, trace_file: TraceFile | None = None):
        self.table = self._new_table("role calls")
        self.running: tuple[str, int, float] | None = None
        self.trace_file = trace_file
        # Tokens of the calls shown so far that ran within a call not shown yet, by their depth (`Step.depth`).
        self._within: dict[int, tuple[int, int]] = {}
        self.live = Live(self, console=console, refresh_per_second=8, transient=False)

    def __rich__(self) -> Group:
        if self.running is None:  # nothing at all before the first role call: an error then stands alone
            return Group(self.table) if self.table.row_count else Group()
        role, iteration, started = self.running
        status = Spinner("dots", text=f"{role} (iteration {iteration}) {time.monotonic() - started:.1f}s")
        return Group(self.table, status)

    @staticmethod
    def _new_table(title: str) -> Table:
        table = Table(title=title, expand=False)
        for column in ("role", "iteration", "seconds", "tokens in/out", "attempts", "outcome"):
            table.add_column(column, justify="right" if column != "role" else "left")
        return table

    def ask(self, question: Question) -> dict[str, Any]:
        """A person's turn at the terminal (`loops.running.person.ask_at_terminal`): the live table stops where it is,
        the question and the prompts follow it, and the calls after the answer go on in a table below."""
        from loops.running.person import ask_at_terminal

        self.running = None
        self.live.stop()
        try:
            return ask_at_terminal(question, read=lambda prompt: console.input(prompt, markup=False),
                                   write=lambda text: console.print(Text(text)))
        finally:
            self.table = self._new_table("role calls (continued)")
            self.live.start()

    def role_started(self, role: str, iteration: int) -> None:
        self.running = (role, iteration, time.monotonic())

    def step_finished(self, step: Step) -> None:
        self.running = None
        self.table.add_row(_role(step), str(step.iteration), f"{step.seconds:.1f}", self._own_tokens(step),
                           str(step.attempts), _outcome(step))
        if self.trace_file is not None:
            self.trace_file.step(step)

    def _own_tokens(self, step: Step) -> str:
        """The tokens of the requests the step sent itself: a call made within it (a DSL atom in a loop's phase,
        a loop form within its program) has its own row above it, indented, and each request shows once."""
        inclusive = (step.tokens["input"], step.tokens["output"]) if step.tokens else (0, 0)
        nested = self._within.pop(step.depth + 1, (0, 0))
        if step.depth:
            above = self._within.get(step.depth, (0, 0))
            self._within[step.depth] = (above[0] + inclusive[0], above[1] + inclusive[1])
        own = (max(0, inclusive[0] - nested[0]), max(0, inclusive[1] - nested[1]))
        return f"{own[0]}/{own[1]}" if any(own) else "-"


def _role(step: Step) -> str:
    from loops.vocabulary.display import step_role

    return "  " * step.depth + escape(step_role(step))


def _outcome(step: Step) -> str:
    """What the step came to, by the one rule every display follows (`loops.vocabulary.display.step_outcome`)."""
    from loops.vocabulary.display import step_outcome  # with the run, not before: --help loads no DSPy

    outcome = escape(step_outcome(step))
    return f"[red]{outcome}[/red]" if step.error else outcome


def run_with_progress(module: dspy.Module, model: dspy.BaseLM | ModelChoice, trace: Path | None,
                      **inputs: Any) -> tuple[dspy.Prediction, float]:
    """Run `module` on `inputs` with the live display; returns its prediction and the wall time. The
    command's LM (`model`) is closed at the end. `trace` gets the run's steps and its summary (`TraceFile`),
    under the run id of `inputs` (a checkpointed run's), else a new one.

    A wrong `--model` (or option of it) or an unwritable `--trace` raises `ConfigurationError` before
    any LM call.
    """
    import dspy

    from loops.running.person import answering, person_at_hand

    # `fix` and `run` resolve their --model before the run (its defaults, the atoms' model) and pass the LM
    lm = model.resolve() if isinstance(model, ModelChoice) else model
    with ExitStack() as stack:
        stack.callback(lm.close)  # a command's LM: its connections end with its run
        trace_file = TraceFile(stack.enter_context(open_trace(trace)), inputs.get("run_id") or new_run_id()) \
            if trace else None
        progress = LiveProgress(trace_file)
        stack.enter_context(dspy.context(lm=lm))  # the LM brings the adapter it needs (its profile)
        stack.enter_context(observing(progress))
        if person_at_hand():  # a person's turn is asked at this terminal; without one, the run pauses for it
            stack.enter_context(answering(progress.ask))
        started = time.monotonic()
        try:
            with progress.live:
                try:
                    result = module(**inputs)
                finally:  # a run that raised (an error in a DSL program) leaves no spinner behind
                    progress.running = None
        except KeyboardInterrupt:
            interrupted = True
        else:
            interrupted = False
        finally:
            if progress.table.row_count:
                console.print()
        seconds = time.monotonic() - started
        if trace_file is not None:
            trace_file.summary(None if interrupted else result, seconds,
                               "interrupted (Ctrl-C)" if interrupted else None)
    if interrupted:  # said once the trace is closed and the LM's connections are gone
        say_interrupted(trace, inputs.get("checkpoint"), inputs.get("run_id"))
    return result, seconds


def say_interrupted(trace: Path | None, checkpoint: str | None, run_id: str | None) -> NoReturn:
    """Ctrl-C during a run: what is kept, and the command that resumes it; exit code 130, as for `loops batch`."""
    if checkpoint is not None:
        resume = shlex.join(["loops", *sys.argv[1:], *([] if _gives_run_id(sys.argv[1:]) else ["--run-id", run_id])])
        kept = (f"the role calls that finished are kept in {checkpoint}, run {run_id!r}; `{resume}` resumes it "
                "without repeating them")
    else:
        kept = "nothing is kept to resume from (no --checkpoint FILE, which an interrupted run resumes from)"
    held = f"; {trace} holds the role calls that finished" if trace is not None else ""
    typer.echo(f"interrupted: {kept}{held}", err=True)
    raise typer.Exit(EXIT_INTERRUPTED)


def _gives_run_id(arguments: list[str]) -> bool:
    return any(argument == "--run-id" or argument.startswith("--run-id=") for argument in arguments)


def open_trace(trace: Path) -> IO[str]:
    """The `--trace` file, opened to append (`TraceFile` writes it); one that cannot be written is a usage error."""
    try:
        return trace.open("a", encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"--trace {str(trace)!r} cannot be written ({exc.strerror or exc}); give a path in a writable directory"
        ) from exc


def report(result: dspy.Prediction, seconds: float, title: str, passed: str = "") -> None:
    """Print the outcome, and the question of a run that waits for a person, and exit with its code (0
    success, 1 no success, 3 the run failed, 4 it waits for a person's answer). `passed` says why a loop
    that stopped with success stopped ("the tests pass"): the stop reason `stopped` alone does not."""
    from loops.vocabulary.display import lm_calls_text

    final = result.final
    shown = str(getattr(final, "content", final) or "")
    if shown.strip():
        console.print(Panel(shown, title=title, expand=False))
    else:  # an empty box under the cause of a failed run says nothing; this line says there is nothing
        console.print(f"{title}: none", highlight=False)
    cost = "" if result.cost_usd is None else f"   cost: ${result.cost_usd:.4f}"
    reason = result.stop_reason
    if reason == "stopped":
        reason += f" ({passed if result.success and passed else 'the controller stopped'})"
    console.print(f"stop reason: [bold]{reason}[/bold]   iterations: {result.iterations}   "
                  f"LM calls: {lm_calls_text(result)}   tokens: {result.tokens}{cost}   wall time: {seconds:.1f}s")
    finish_report(result)


def finish_report(result: dspy.Prediction) -> NoReturn:
    """The end every run's report shares, a loop's (`report`) and a DSL program's (`loops run`): its warnings,
    the question of a run that waits for a person, and its exit code."""
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    show_question(result)
    raise typer.Exit(exit_code(result.stop_reason, result.success))


def show_question(result: dspy.Prediction) -> None:
    """The question a paused run waits on, when it waits on one."""
    question = result.get("question")
    if result.stop_reason == "awaiting_input" and question is not None:
        console.print(Panel(Text(question.text()), title="waiting for a person", expand=False))

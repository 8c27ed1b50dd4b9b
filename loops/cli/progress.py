"""Running a loop in the terminal: a live table of its role calls, the trace file, and the final report with
its exit code."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table

from loops.cli.options import EXIT_NO_SUCCESS, EXIT_RUN_FAILED, EXIT_SUCCESS, ModelChoice, console
from loops.context import observing
from loops.errors import ConfigurationError

if TYPE_CHECKING:
    import dspy

    from loops.runtime import Step

__all__ = ["LiveProgress", "open_trace", "report", "run_with_progress"]


class LiveProgress:
    """An observer that draws finished role calls as a table and the running one with a spinner."""

    def __init__(self, trace_file: IO[str] | None = None):
        self.table = Table(title="role calls", expand=False)
        for column in ("role", "iteration", "seconds", "tokens in/out", "attempts", "outcome"):
            self.table.add_column(column, justify="right" if column != "role" else "left")
        self.running: tuple[str, int, float] | None = None
        self.trace_file = trace_file
        self.live = Live(self, console=console, refresh_per_second=8, transient=False)

    def __rich__(self) -> Group:
        if self.running is None:  # nothing at all before the first role call: an error then stands alone
            return Group(self.table) if self.table.row_count else Group()
        role, iteration, started = self.running
        status = Spinner("dots", text=f"{role} (iteration {iteration}) {time.monotonic() - started:.1f}s")
        return Group(self.table, status)

    def role_started(self, role: str, iteration: int) -> None:
        self.running = (role, iteration, time.monotonic())

    def step_finished(self, step: Step) -> None:
        self.running = None
        tokens = f"{step.tokens['input']}/{step.tokens['output']}" if step.tokens else "-"
        self.table.add_row(step.role, str(step.iteration), f"{step.seconds:.1f}", tokens, str(step.attempts),
                           _outcome(step))
        if self.trace_file is not None:
            self.trace_file.write(json.dumps(step.to_dict()) + "\n")
            self.trace_file.flush()


def _outcome(step: Step) -> str:
    """What the step came to, by the one rule every display follows (`loops.display.step_outcome`)."""
    from loops.display import step_outcome  # with the run, not before: --help loads no DSPy

    outcome = escape(step_outcome(step))
    return f"[red]{outcome}[/red]" if step.error else outcome


def run_with_progress(module: dspy.Module, model: str | dspy.BaseLM | ModelChoice, trace: Path | None,
                      **inputs: Any) -> tuple[dspy.Prediction, float]:
    """Run `module` on `inputs` with the live display; returns its prediction and the wall time. The
    command's LM (`model`) is closed at the end.

    A wrong `--model` (or option of it) or an unwritable `--trace` raises `ConfigurationError` before
    any LM call.
    """
    import dspy

    from loops.lm import resolve

    lm = model.resolve() if isinstance(model, ModelChoice) else model if isinstance(model, dspy.BaseLM) else (
        resolve(model))
    with ExitStack() as stack:
        stack.callback(lm.close)  # a command's LM: its connections end with its run
        trace_file = stack.enter_context(open_trace(trace)) if trace else None
        progress = LiveProgress(trace_file)
        stack.enter_context(dspy.context(lm=lm))  # the LM brings the adapter it needs (its profile)
        stack.enter_context(observing(progress))
        started = time.monotonic()
        try:
            with progress.live:
                try:
                    result = module(**inputs)
                finally:  # a run that raised (an error in a DSL program) leaves no spinner behind
                    progress.running = None
        finally:
            if progress.table.row_count:
                console.print()
    return result, time.monotonic() - started


def open_trace(trace: Path) -> IO[str]:
    try:
        return trace.open("w", encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"--trace {str(trace)!r} cannot be written ({exc.strerror or exc}); give a path in a writable directory"
        ) from exc


def report(result: dspy.Prediction, seconds: float, title: str) -> None:
    """Print the outcome and exit with its code (0 success, 1 no success, 3 the run failed)."""
    from loops.display import lm_calls_text

    final = result.final
    console.print(Panel(str(getattr(final, "content", final) or ""), title=title, expand=False))
    cost = "" if result.cost_usd is None else f"   cost: ${result.cost_usd:.4f}"
    console.print(f"stop reason: [bold]{result.stop_reason}[/bold]   iterations: {result.iterations}   "
                  f"LM calls: {lm_calls_text(result)}   tokens: {result.tokens}{cost}   wall time: {seconds:.1f}s")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if result.stop_reason == "error":
        raise typer.Exit(EXIT_RUN_FAILED)
    raise typer.Exit(EXIT_SUCCESS if result.success else EXIT_NO_SUCCESS)

"""The `loops` command: run a loop pattern from the shell with a live view of every role call."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Annotated, Any

import dspy
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table

from loops.creator_critic import CreatorCriticIterator
from loops.runtime import Step, observing

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()

ModelOption = Annotated[
    str, typer.Option("--model", "-m", help="'local' (embedded SmolLM2-135M, offline) or a LiteLLM model string")
]
TraceOption = Annotated[
    Path | None, typer.Option("--trace", help="Write every role call to this JSONL file as it finishes")
]


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
        if self.running is None:
            return Group(self.table)
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
    if step.error:
        return f"[red]{step.error[:60]}[/red]"
    outputs = step.outputs or {}
    if "completed" in outputs:
        return "[green]approved[/green]" if outputs["completed"] else "needs revision"
    return "ok"


def _run_with_progress(module: dspy.Module, model: str, trace: Path | None, **inputs: Any) -> dspy.Prediction:
    from loops.lm import resolve

    lm = resolve(model)
    # The embedded model only parses reliably with grammar-constrained JSON, which JSONAdapter asks for.
    adapter = dspy.JSONAdapter() if model == "local" else None
    with ExitStack() as stack:
        trace_file = stack.enter_context(trace.open("w", encoding="utf-8")) if trace else None
        progress = LiveProgress(trace_file)
        stack.enter_context(dspy.context(lm=lm, adapter=adapter))
        stack.enter_context(observing(progress))
        stack.enter_context(progress.live)
        return module(**inputs)


def _report(result: dspy.Prediction, seconds: float, final_field: str, title: str) -> None:
    console.print(Panel(str(getattr(result, final_field) or ""), title=title, expand=False))
    console.print(f"stop reason: [bold]{result.stop_reason}[/bold]   iterations: {result.iterations}   "
                  f"LM calls: {result.lm_calls}   wall time: {seconds:.1f}s")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


@app.command()
def refine(
    requirements: Annotated[str, typer.Argument(help="What to create")],
    context: Annotated[str, typer.Option(help="Background context for the creator")] = "",
    model: ModelOption = "local",
    max_iterations: Annotated[int, typer.Option(min=0, max=1000, help="Revisions at most")] = 3,
    timeout: Annotated[float, typer.Option(help="Wall-clock limit of the whole loop, in seconds")] = 300.0,
    trace: TraceOption = None,
) -> None:
    """Creator–Critic–Iterator: draft, then revise until the critic approves."""
    module = CreatorCriticIterator(max_iterations=max_iterations)
    started = time.monotonic()
    result = _run_with_progress(module, model, trace, requirements=requirements, context=context, timeout_s=timeout)
    approval = "approved" if result.approved else "not approved"
    _report(result, time.monotonic() - started, "final_draft", f"final draft ({approval})")


def main() -> None:
    app()

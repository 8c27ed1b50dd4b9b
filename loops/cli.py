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

from loops.adapters import CompactJSONAdapter
from loops.creator_critic import CreatorCriticIterator
from loops.director import DirectorExecutorEvaluatorController
from loops.execute_validate import ExecuteValidateController
from loops.runtime import Step, observing

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()

ModelOption = Annotated[
    str, typer.Option("--model", "-m", help="'local' (embedded SmolLM2-135M, offline) or a LiteLLM model string")
]
TraceOption = Annotated[
    Path | None, typer.Option("--trace", help="Write every role call to this JSONL file as it finishes")
]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Wall-clock limit of the whole loop, in seconds")]


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


def _run_with_progress(
    module: dspy.Module, model: str, trace: Path | None, **inputs: Any
) -> tuple[dspy.Prediction, float]:
    """Run `module` on `inputs` with the live display; returns its prediction and the wall time."""
    from loops.lm import resolve

    lm = resolve(model)
    # The embedded model only answers in shape with grammar-constrained JSON, which JSONAdapter asks for.
    adapter = CompactJSONAdapter() if model == "local" else None
    with ExitStack() as stack:
        trace_file = stack.enter_context(trace.open("w", encoding="utf-8")) if trace else None
        progress = LiveProgress(trace_file)
        stack.enter_context(dspy.context(lm=lm, adapter=adapter))
        stack.enter_context(observing(progress))
        started = time.monotonic()
        with progress.live:
            result = module(**inputs)
    console.print()
    return result, time.monotonic() - started


def _report(result: dspy.Prediction, seconds: float, final_field: str, title: str) -> None:
    final = getattr(result, final_field)
    console.print(Panel(str(getattr(final, "content", final) or ""), title=title, expand=False))
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
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
) -> None:
    """Creator–Critic–Iterator: draft, then revise until the critic approves."""
    module = CreatorCriticIterator(max_iterations=max_iterations)
    result, seconds = _run_with_progress(module, model, trace, requirements=requirements, context=context,
                                         timeout_s=timeout)
    _report(result, seconds, "final_draft", f"final draft ({'approved' if result.approved else 'not approved'})")


@app.command()
def fix(
    task: Annotated[str, typer.Argument(help="What the code should do")],
    test_command: Annotated[str, typer.Option("--test-command", "-t", help="Command whose exit code 0 means done")],
    workspace: Annotated[Path | None, typer.Option(help="Directory to work in (default: a temporary one)")] = None,
    files: Annotated[
        list[str] | None, typer.Option("--files", "-f", help="Workspace files to show the executor")
    ] = None,
    target_file: Annotated[str, typer.Option(help="The file the executor writes")] = "solution.py",
    policy: Annotated[
        str, typer.Option(help="'repair' (show earlier attempts), 'fresh' (new samples) or 'auto' (both)")
    ] = "repair",
    model: ModelOption = "local",
    max_iterations: Annotated[int, typer.Option(min=0, max=1000, help="Execute-validate cycles at most")] = 4,
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
) -> None:
    """Execute–Validate–Controller: write code, run the tests, repeat until they pass."""
    module = ExecuteValidateController(max_iterations=max_iterations, workspace=workspace, policy=policy,
                                       target_file=target_file)
    initial_input = {"prompt": task, "files": list(files or []), "target_file": target_file}
    result, seconds = _run_with_progress(module, model, trace, initial_input=initial_input,
                                         test_command=test_command, timeout_s=timeout)
    _report(result, seconds, "final", "tests pass" if result.success else "tests still fail")
    if workspace is not None:
        console.print(f"files written to {workspace}")
    raise typer.Exit(0 if result.success else 1)


@app.command()
def direct(
    goal: Annotated[str, typer.Argument(help="What to achieve")],
    model: ModelOption = "local",
    max_iterations: Annotated[int, typer.Option(min=0, max=1000, help="Plan-execute-evaluate cycles at most")] = 3,
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
) -> None:
    """Director–Executor–Evaluator–Controller: plan, execute, evaluate, until the evaluator passes it."""
    module = DirectorExecutorEvaluatorController(max_iterations=max_iterations)
    result, seconds = _run_with_progress(module, model, trace, initial_input=goal, timeout_s=timeout)
    _report(result, seconds, "final", "passed" if result.success else "not passed")


def main() -> None:
    app()

"""`loops runs`: the runs a checkpoint file holds, and the calls of one of them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from loops.cli.options import console

if TYPE_CHECKING:
    from loops.checkpoint import SQLiteStore

__all__ = ["app"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

CheckpointArgument = Annotated[Path, typer.Argument(help="The checkpoint file (SQLite) given as --checkpoint")]


def _store(path: Path) -> SQLiteStore:
    from loops.checkpoint import SQLiteStore

    if not path.is_file():
        raise typer.BadParameter(f"{str(path)!r} does not exist", param_hint="CHECKPOINT")
    return SQLiteStore(path)


@app.command("list")
def list_runs(checkpoint: CheckpointArgument) -> None:
    """One line per run: its id, program, when it started, calls recorded and how it ended."""
    table = Table(title=str(checkpoint))
    for column in ("run id", "program", "started", "calls", "stop reason"):
        table.add_column(column, justify="right" if column == "calls" else "left")
    for run in _store(checkpoint).runs():
        started = datetime.datetime.fromtimestamp(run.created).isoformat(sep=" ", timespec="seconds")
        table.add_row(run.run_id, run.program.split(":")[0].rsplit(".", 1)[-1], started, str(run.calls),
                      run.stop_reason or "[yellow]unfinished[/yellow]")
    console.print(table)


@app.command()
def show(checkpoint: CheckpointArgument,
         run_id: Annotated[str, typer.Argument(help="The run to show")]) -> None:
    """Every recorded call of one run: role, iteration, seconds, LM calls, tokens and outputs."""
    from loops.checkpoint import unpack

    store = _store(checkpoint)
    if run_id not in {run.run_id for run in store.runs()}:
        raise typer.BadParameter(f"no run {run_id!r} in {str(checkpoint)!r}; `loops runs list` shows them",
                                 param_hint="RUN_ID")
    table = Table(title=f"run {run_id}")
    for column in ("#", "role", "iteration", "seconds", "LM calls", "tokens in/out", "outputs"):
        table.add_column(column, overflow="fold")
    for call in store.calls(run_id):
        _, step, _, _ = unpack(call)
        tokens = f"{step.tokens['input']}/{step.tokens['output']}" if step.tokens else "-"
        role = f"  {step.role} (in a phase)" if call.nested else step.role
        table.add_row(str(call.seq + 1), role, str(step.iteration), f"{step.seconds:.2f}", str(step.lm_calls), tokens,
                      str(step.outputs)[:200])
    console.print(table)

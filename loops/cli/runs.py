"""`loops runs`: the runs a checkpoint file holds, the calls of one of them, and the answer to the question a
paused run waits on."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from loops.cli.options import console, name_value_pairs

if TYPE_CHECKING:
    from loops.checkpoint import SQLiteStore

__all__ = ["app"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

CheckpointArgument = Annotated[Path, typer.Argument(help="The checkpoint file (SQLite) given as --checkpoint")]
RunArgument = Annotated[str, typer.Argument(help="The run's id (--run-id; `loops runs list` shows them)")]


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
def show(checkpoint: CheckpointArgument, run_id: RunArgument, page: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", help="Also write the run's timeline to this HTML page (who ran when, tokens and "
        "cost, pauses and limits; needs loops[notebooks])")] = None) -> None:
    """Every recorded call of one run (role, iteration, seconds, LM calls, tokens, outputs; a person's answers
    marked), and the question it waits on when it paused for a person."""
    from loops.checkpoint import unpack
    from loops.display import step_role
    from loops.person import pending_question

    store = _store(checkpoint)
    if run_id not in {run.run_id for run in store.runs()}:
        raise typer.BadParameter(f"no run {run_id!r} in {str(checkpoint)!r}; `loops runs list` shows them",
                                 param_hint="RUN_ID")
    table = Table(title=f"run {run_id}")
    for column in ("#", "role", "iteration", "seconds", "LM calls", "tokens in/out", "outputs"):
        table.add_column(column, overflow="fold")
    steps = []
    for call in store.calls(run_id):
        _, step, _, _ = unpack(call)
        steps.append(step)
        tokens = f"{step.tokens['input']}/{step.tokens['output']}" if step.tokens else "-"
        role = step_role(step)
        table.add_row(str(call.seq + 1), f"  {role} (in a phase)" if call.nested else role, str(step.iteration),
                      f"{step.seconds:.2f}", str(step.lm_calls), tokens, str(step.outputs)[:200])
    console.print(table)
    question = pending_question(store, run_id)
    if question is not None:
        console.print(Panel(Text(question.text()), title=f"run {run_id} waits for a person", expand=False))
        console.print(Text(f"answer: loops runs answer {checkpoint} {run_id} {question.usage()}"))
    if page is not None:
        _write_timeline(page, store, run_id, steps, question)


def _write_timeline(page: Path, store: SQLiteStore, run_id: str, steps: list, question: object) -> None:
    import dspy

    from loops.errors import ConfigurationError
    from loops.notebook import timeline_html

    ended = next(run.stop_reason for run in store.runs() if run.run_id == run_id) or "unfinished"
    text = timeline_html(dspy.Prediction(trace=steps, stop_reason=ended, question=question),
                         title=f"run {run_id}: {ended}")
    try:
        page.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--html {str(page)!r} cannot be written ({exc.strerror or exc}); give a path in a "
                                 "writable directory") from None
    console.print(Text(f"the run's timeline: {page}"))


@app.command()
def answer(
    checkpoint: CheckpointArgument,
    run_id: RunArgument,
    assignments: Annotated[list[str], typer.Option(
        "--set", metavar="FIELD=VALUE", help="A field of the answer (repeatable): --set approved=true --set "
        "feedback=\"Name the bottle\"; `loops runs show` lists the fields and their types")],
) -> None:
    """Record a person's answer to the question a paused run waits on (stop reason awaiting_input), checked
    against the role's fields; then run the same command again with --run-id (or call the loop with the same
    checkpoint and run_id) to go on, with nothing before the question asked again."""
    from loops.person import answer as record_answer
    from loops.person import pending_question

    store = _store(checkpoint)
    values = dict(name_value_pairs(assignments, "--set", "approved=true"))
    recorded = record_answer(store, run_id, **values)
    role = pending_question(store, run_id).role
    shown = ", ".join(f"{name}={value!r}" for name, value in recorded.items())
    console.print(Text(f"recorded the {role}'s answer for run {run_id}: {shown}\nresume the run: the same command "
                       f"with --run-id {run_id} (or the loop called with checkpoint={str(checkpoint)!r}, "
                       f"run_id={run_id!r})"))

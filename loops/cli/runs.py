"""`loops runs`: the runs a checkpoint file holds, the calls of one of them, the answer to the question a paused
run waits on, and deleting runs (by id, or pruned by age, stop reason and number) to keep the file small.

A file this process cannot write (a read-only file, directory or file system) is read as it is: its runs are
listed, shown and replayed, and what would write to it (an answer, a deletion) is refused with the reason."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from loops.cli.options import console, name_value_pairs
from loops.errors import ConfigurationError

if TYPE_CHECKING:
    from loops.recording.checkpoint import Removal, SQLiteStore

__all__ = ["app"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

CheckpointArgument = Annotated[Path, typer.Argument(metavar="FILE",
                                                    help="The checkpoint file (SQLite) given as --checkpoint")]
RunArgument = Annotated[str, typer.Argument(metavar="RUN_ID", help="The run's id (--run-id; `loops runs list` shows "
                                                                   "them)")]


@contextmanager
def _store(path: Path) -> Iterator[SQLiteStore]:
    """The checkpoint file at `path`, closed after the command (so that it is whole on its own)."""
    from loops.recording.checkpoint import SQLiteStore

    if not path.is_file():
        raise typer.BadParameter(f"{str(path)!r} does not exist", param_hint="CHECKPOINT")
    with SQLiteStore(path) as store:
        yield store


@app.command("list")
def list_runs(checkpoint: CheckpointArgument) -> None:
    """One line per run: its id, program, when it started, calls recorded and how it ended."""
    from loops.recording.checkpoint import program_name

    table = Table(title=str(checkpoint))
    for column in ("run id", "program", "started", "calls", "stop reason"):
        table.add_column(column, justify="right" if column == "calls" else "left")
    with _store(checkpoint) as store:
        runs = store.runs()
    for run in runs:
        table.add_row(run.run_id, program_name(run.program), _when(run.created), str(run.calls),
                      run.stop_reason or "[yellow]unfinished[/yellow]")
    console.print(table)


@app.command()
def show(checkpoint: CheckpointArgument, run_id: RunArgument, page: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", help="Also write the run's timeline to this HTML page (who ran when, tokens and "
        "cost, pauses and limits; needs loops[notebooks])")] = None) -> None:
    """Every recorded call of one run (role, iteration, seconds, LM calls, tokens, outputs; a person's answers
    marked), and the question it waits on when it paused for a person."""
    from loops.recording.checkpoint import unknown_run, unpack
    from loops.running.person import pending_question
    from loops.vocabulary.display import step_role

    with _store(checkpoint) as store:
        runs = {run.run_id: run for run in store.runs()}
        if run_id not in runs:
            raise unknown_run(run_id, list(runs), checkpoint)
        calls = store.calls(run_id)
        question = pending_question(store, run_id)
    table = Table(title=f"run {run_id}")
    for column in ("#", "role", "iteration", "seconds", "LM calls", "tokens in/out", "outputs"):
        table.add_column(column, overflow="fold")
    steps = []
    for call in calls:
        _, step, _, _ = unpack(call)
        steps.append(step)
        tokens = f"{step.tokens['input']}/{step.tokens['output']}" if step.tokens else "-"
        role = step_role(step)
        table.add_row(str(call.seq + 1), f"  {role} (in a phase)" if call.nested else role, str(step.iteration),
                      f"{step.seconds:.2f}", str(step.lm_calls), tokens, str(step.outputs)[:200])
    console.print(table)
    if question is not None:
        console.print(Panel(Text(question.text()), title=f"run {run_id} waits for a person", expand=False))
        console.print(Text(f"answer: loops runs answer {checkpoint} {run_id} {question.usage()}"))
    if page is not None:
        _write_timeline(page, run_id, runs[run_id].stop_reason or "unfinished", steps, question)


def _write_timeline(page: Path, run_id: str, ended: str, steps: list, question: object) -> None:
    import dspy

    from loops.errors import ConfigurationError
    from loops.notebook import timeline_html

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
        "--set", metavar="FIELD=VALUE", help="A field of the answer, each field once: --set approved=true --set "
        "feedback=\"Name the bottle\"; `loops runs show` lists the fields and their types")],
    replace: Annotated[bool, typer.Option(
        "--replace", help="Record this answer in place of one already recorded for the question (without it, a "
        "question answered already is an error)")] = False,
) -> None:
    """Record a person's answer to the question a paused run waits on (stop reason awaiting_input), checked
    against the role's fields; then run the same command again with --run-id (or call the loop with the same
    checkpoint and run_id) to go on, with nothing before the question asked again."""
    from loops.running.person import answer as record_answer
    from loops.running.person import pending_question

    values = dict(name_value_pairs(assignments, "--set", "approved=true"))
    with _store(checkpoint) as store:
        recorded = record_answer(store, run_id, replace=replace, **values)
        role = pending_question(store, run_id).role
    shown = ", ".join(f"{name}={value!r}" for name, value in recorded.items())
    console.print(Text(f"recorded the {role}'s answer for run {run_id}: {shown}\nresume the run: the same command "
                       f"with --run-id {run_id} (or the loop called with checkpoint={str(checkpoint)!r}, "
                       f"run_id={run_id!r})"))


@app.command()
def delete(
    checkpoint: CheckpointArgument,
    run_ids: Annotated[list[str], typer.Argument(help="The runs to delete (`loops runs list` shows them)",
                                                 metavar="RUN_ID")],
) -> None:
    """Delete runs (their calls, their question and the runs nested in them), then compact the file (VACUUM)
    and say its size before and after. Nothing is deleted when one of them is not in the file or is in
    progress."""
    from loops.recording.checkpoint import delete_runs

    with _store(checkpoint) as store:
        removal = delete_runs(store, run_ids)
    _report(checkpoint, removal, dry_run=False)


@app.command()
def prune(
    checkpoint: CheckpointArgument,
    older_than: Annotated[str | None, typer.Option(
        "--older-than", metavar="AGE", help="Delete the runs started this long ago or longer: 30d, 12h, 45m, 90s, "
        "2w")] = None,
    status: Annotated[list[str] | None, typer.Option(
        "--status", metavar="STOP_REASON", help="Delete the runs that ended with this stop reason (repeatable; "
        "`unfinished` for runs that have not ended)")] = None,
    keep_last: Annotated[int | None, typer.Option(
        "--keep-last", min=0, metavar="N", help="Of the runs the other options match (alone: of all), keep the "
        "newest N")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be deleted, and delete nothing")] = False,
) -> None:
    """Delete the runs that match every option given (by age, by stop reason, all but the newest N), leaving the
    runs in progress, then compact the file (VACUUM) and say its size before and after."""
    from loops.recording.checkpoint import prune_runs
    from loops.running.runtime import STOP_REASONS

    if older_than is None and not status and keep_last is None:
        raise ConfigurationError("say which runs to prune: --older-than AGE, --status STOP_REASON or --keep-last N")
    known = [*STOP_REASONS, "unfinished"]
    for reason in status or ():
        if reason not in known:
            raise ConfigurationError(f"--status takes a stop reason ({', '.join(known)}), got {reason!r}")
    age = None if older_than is None else _duration(older_than)
    with _store(checkpoint) as store:
        removal = prune_runs(store, older_than=age, status=status or None, keep_last=keep_last, dry_run=dry_run)
    _report(checkpoint, removal, dry_run=dry_run)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(rf"(\d+(?:\.\d+)?)\s*([{''.join(_UNITS)}])")


def _duration(text: str) -> float:
    """Seconds of an age such as 30d, 12h, 45m, 90s or 2w."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise ConfigurationError(f"--older-than takes an age such as 30d, 12h, 45m, 90s or 2w, got {text!r}")
    return float(found[1]) * _UNITS[found[2]]


def _report(checkpoint: Path, removal: Removal, *, dry_run: bool) -> None:
    lines = []
    if removal.deleted:
        runs = _some(removal.deleted)
        lines.append(f"would delete {runs}" if dry_run else f"deleted {runs}")
    else:
        lines.append("no run matches: nothing deleted")
    if removal.in_progress:
        lines.append(f"left {_some(removal.in_progress)}, in progress")
    if removal.deleted and not dry_run:
        lines.append(f"{checkpoint}: {removal.bytes_before:,} bytes before, {removal.bytes_after:,} after (VACUUM)")
    else:
        lines.append(f"{checkpoint}: {removal.bytes_after:,} bytes")
    console.print(Text("\n".join(lines)))


def _some(run_ids: tuple[str, ...], shown: int = 10) -> str:
    """'3 runs: a, b, c', the first `shown` of many named."""
    names = ", ".join(run_ids[:shown]) + (f" and {len(run_ids) - shown} more" if len(run_ids) > shown else "")
    return f"{len(run_ids)} run{'s' if len(run_ids) != 1 else ''}: {names}"


def _when(created: float) -> str:
    return datetime.datetime.fromtimestamp(created).isoformat(sep=" ", timespec="seconds")

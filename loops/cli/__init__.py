"""The `loops` command: run a loop pattern from the shell with a live view of every role call.

\b
Exit codes:
0  success: the critic approved, the tests pass, the evaluator passed it, the program ran to its end
1  the loop ended without success (a program: a budget or a limit stopped it)
2  a usage or configuration error, in one line on stderr (before any LM call where it can be known);
   for `loops run`, an error in the program, with its position and a caret
3  the run failed (stop reason "error")
4  the run waits for a person's answer (stop reason "awaiting_input", a --human role or a (human) phase
   with nobody at the terminal): `loops runs answer FILE RUN_ID --set ...`, then the same command resumes
130  interrupted by Ctrl-C: a line says what is kept (with --checkpoint, the role calls that finished) and
   the command that resumes the run

`loops batch` says the same of a whole batch: 0 every example succeeded, 1 some did not (or their loop
raised), 2 a usage or configuration error (every line of --data the loop would refuse is listed before any
runs; a rejected key at the latest at the first example it fails, with nothing of it recorded), 3 the batch
itself failed (its output could not be written, its Ray cluster went away),
130 interrupted by Ctrl-C (a line says how many examples are done; the same command resumes).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import typer
from typer.core import TyperGroup

from loops.cli import datasets, patterns, programs, runs
from loops.cli.options import EXIT_INTERRUPTED, EXIT_NO_SUCCESS, EXIT_SUCCESS, EXIT_USAGE
from loops.errors import ConfigurationError

__all__ = ["app", "main"]


class _OneLineErrors(TyperGroup):
    """Reports a usage or configuration error as one line on stderr with exit code 2: the message
    says what to fix, and a usage box or a traceback would only bury it."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        _usage_names(self)
        if not sys.stdout.isatty():
            _plain_help(self)
            kwargs.setdefault("terminal_width", _help_width())
            kwargs.setdefault("max_content_width", _help_width())
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except (typer.TyperException, ConfigurationError) as exc:  # the former: a bad option, a missing argument
            code = _usage_error(exc.format_message() if isinstance(exc, typer.TyperException) else str(exc))
        except typer.Abort as abort:
            if isinstance(abort.__cause__, KeyboardInterrupt):  # Ctrl-C before a run started: nothing to keep
                typer.echo("interrupted", err=True)
                code = EXIT_INTERRUPTED
            else:
                typer.echo("aborted", err=True)
                code = EXIT_NO_SUCCESS
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else EXIT_SUCCESS)


def _plain_help(command: click.Command) -> None:
    """Help as plain text, for a pipe or a file: rich's boxed columns, squeezed to a width no terminal
    sets, wrap every option's help into a narrow column."""
    command.rich_markup_mode = None
    for subcommand in getattr(command, "commands", {}).values():
        _plain_help(subcommand)


def _usage_names(command: click.Command) -> None:
    """Arguments in a usage line as the convention writes them (`loops refine [OPTIONS] REQUIREMENTS`), not in
    typer's braces (`{requirements}`), which read as a placeholder to fill in literally."""
    if hasattr(command, "commands"):  # a group: its usage names its commands
        for subcommand in command.commands.values():
            _usage_names(subcommand)
        return

    def usage_pieces(ctx: click.Context) -> list[str]:
        pieces = [command.options_metavar] if command.options_metavar else []
        for param in command.get_params(ctx):
            if param.param_type_name != "argument":
                pieces.extend(param.get_usage_pieces(ctx))
                continue
            name = (param.metavar or param.name or "").upper() + ("..." if param.nargs != 1 else "")
            pieces.append(name if param.required else f"[{name}]")
        return pieces

    command.collect_usage_pieces = usage_pieces  # type: ignore[method-assign]


def _help_width() -> int:
    """The width of help text with no terminal to measure: TERMINAL_WIDTH or COLUMNS, else 100."""
    for variable in ("TERMINAL_WIDTH", "COLUMNS"):
        value = os.environ.get(variable, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 100


def _usage_error(message: str) -> int:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return EXIT_USAGE


app = typer.Typer(add_completion=False, help=__doc__, cls=_OneLineErrors)


@app.callback(invoke_without_command=True)
def _help_without_a_command(ctx: typer.Context) -> None:
    # Instead of no_args_is_help, whose help text would arrive here as an error message.
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


app.command()(patterns.refine)
app.command()(patterns.fix)
app.command()(patterns.direct)
app.command("run")(programs.run_program)
app.command()(programs.repl)
app.add_typer(runs.app, name="runs", help="The runs a --checkpoint file holds: `loops runs list FILE`, "
              "`loops runs show FILE RUN_ID`, `loops runs answer FILE RUN_ID --set FIELD=VALUE`, `loops runs delete "
              "FILE RUN_ID...`, `loops runs prune FILE --older-than 30d`")
app.command("optimize")(datasets.optimize_command)
app.command("eval")(datasets.eval_command)
app.command("batch")(datasets.batch_command)


def main() -> None:
    app()

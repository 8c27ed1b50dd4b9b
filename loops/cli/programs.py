"""`loops run` and `loops repl`: S-expression programs from the shell."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.panel import Panel

from loops.cli.options import (
    EXIT_NO_SUCCESS,
    ModelChoice,
    RunOptions,
    ShellGrant,
    console,
    dsl_errors_exit_usage,
    load_program,
    name_value_pairs,
    with_options,
)
from loops.cli.progress import finish_report, run_with_progress
from loops.errors import ConfigurationError
from loops.vocabulary.budget import Budget

__all__ = ["dsl_value", "repl", "run_program"]


def dsl_value(text: str) -> Any:
    """A --set value: a DSL number, #t/#f or "quoted string" as that value; anything else as text."""
    from loops.sexp import DslError, read

    try:
        nodes = read(text)
    except DslError:
        return text
    if len(nodes) == 1 and not nodes[0].is_list and nodes[0].symbol is None:
        return nodes[0].value
    return text


def _bindings(assignments: list[str]) -> dict[str, Any]:
    return {name: dsl_value(value) for name, value in name_value_pairs(assignments, "--set", "target=100")}


@with_options
def run_program(
    program: Annotated[Path, typer.Argument(help="The DSL program, a .sexp file")],
    choice: ModelChoice,
    run: RunOptions,
    grant: ShellGrant,
    assignments: Annotated[list[str] | None, typer.Option(
        "--set", help="Bind a variable before the program runs: name=value (a number, #t/#f, or text)")] = None,
    workspace: Annotated[Path | None, typer.Option(
        help="Directory the shell tool and get_context work in (default: the current one)")] = None,
    saved: Annotated[Path | None, typer.Option(
        "--program", help="Run a saved program compiled from this file (loops optimize FILE.sexp --out): its "
        "atoms' demos and instructions")] = None,
    override_atom_models: Annotated[bool, typer.Option(
        "--override-atom-models", help="Run every atom on --model, over its own (model ...) clause: a program "
        "written for a hosted model runs offline unchanged")] = False,
) -> None:
    """Run an S-expression program (see docs/dsl.md); its atoms use --model unless they name their own.

    Exit codes as for the loops: 1 when a limit stopped the program (its LM budget, or its steps, wall
    clock, recursion depth, size caps or memory, shown with the form's position), 2 for an error in the
    program (shown with its line and a caret; a program that names the shell tool without
    --allow-shell is one), 4 when a (human) phase waits for a person's answer (`loops runs answer`)."""
    from loops.sexp import LimitExceeded, Limits, compile

    bindings = _program_bindings(assignments or [], run)
    options = {"workspace": workspace, "limits": Limits(timeout_s=run.timeout),
               "tools": grant.tools(),
               "budget": Budget(max_iterations=1, timeout_s=run.timeout, max_tokens=run.token_budget,
                                max_cost_usd=run.max_cost)}
    lm = choice.resolve()
    if override_atom_models:
        options["atom_model"] = lm
    with dsl_errors_exit_usage():  # an error in the program, found as it compiles or as it runs
        compiled = compile(program, **options) if saved is None else load_program(str(program), saved, **options)
        log = logging.getLogger("loops.sexp")
        handler = _ConsoleLog()
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        try:
            result, seconds = run_with_progress(compiled, lm, run.trace, **bindings)
        except ConfigurationError as error:  # e.g. an atom's own hosted model, without its key
            if override_atom_models or not compiled.atom_models:
                raise
            named = ", ".join(f"{atom} ({model})" for atom, model in compiled.atom_models.items())
            raise ConfigurationError(f"{error} [atoms with their own model: {named}; --override-atom-models runs "
                                     "every atom on --model]") from error
        except LimitExceeded as error:  # a DslError, but a limit (steps, wall clock, recursion depth): exit 1
            typer.echo(str(error), err=True)
            raise typer.Exit(EXIT_NO_SUCCESS) from None
        finally:
            log.removeHandler(handler)
    _show_result(program, result, seconds)
    finish_report(result)


def _program_bindings(assignments: list[str], run: RunOptions) -> dict[str, Any]:
    """The program's variables from --set, and the run's recording options (--checkpoint, --run-id); a --set of
    a call's own option is a `ConfigurationError`."""
    bindings = _bindings(assignments)
    reserved = sorted(set(bindings) & {"budget", "checkpoint", "run_id"})
    if reserved:
        raise ConfigurationError(f"--set {reserved[0]}=... names a program call's own option; use --checkpoint/"
                                 "--run-id (or --token-budget, --max-cost, --timeout), or another variable name")
    return {**bindings, **run.recording()}


def _show_result(program: Path, result: Any, seconds: float) -> None:
    from loops.sexp import to_source
    from loops.vocabulary.display import lm_calls_text

    outcome = "success" if result.success else "no success"  # the last loop form's, or the program's own verdict
    console.print(Panel(to_source(result.result), title=f"{program.name}: {result.stop_reason}, {outcome}",
                        expand=False))
    console.print(f"LM calls: {lm_calls_text(result)}   tokens: {result.tokens}   wall time: {seconds:.1f}s")


class _ConsoleLog(logging.Handler):
    """The program's `log-message` lines, as they happen (its warnings are printed at the end)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.INFO:
            console.print(f"[dim]log:[/dim] {record.getMessage()}", highlight=False)


@with_options
def repl(choice: ModelChoice) -> None:
    """An S-expression read-eval-print loop: definitions persist; multi-line input; (exit) or Ctrl-D."""
    from loops.sexp.repl import main as repl_main

    repl_main(model=choice.resolve())

"""The `loops` command: run a loop pattern from the shell with a live view of every role call.

Exit codes:
0  success: the critic approved, the tests pass, the evaluator passed it, the program ran to its end
1  the loop ended without success (a program: a budget or a limit stopped it)
2  a usage or configuration error, in one line on stderr (before any LM call where it can be known);
   for `loops run`, an error in the program, with its position and a caret
3  the run failed (stop reason "error")
"""

from __future__ import annotations

import enum
import json
import logging
import math
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

import dspy
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from typer.core import TyperGroup

from loops.errors import ConfigurationError
from loops.runs_cli import app as runs_app
from loops.runtime import Step, observing
from loops.validators import ShellValidator

EXIT_SUCCESS, EXIT_NO_SUCCESS, EXIT_USAGE, EXIT_RUN_FAILED = 0, 1, 2, 3


class _OneLineErrors(TyperGroup):
    """Reports a usage or configuration error as one line on stderr with exit code 2: the message
    says what to fix, and a usage box or a traceback would only bury it."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except (typer.TyperException, ConfigurationError) as exc:  # the former: a bad option, a missing argument
            code = _usage_error(exc.format_message() if isinstance(exc, typer.TyperException) else str(exc))
        except typer.Abort:
            typer.echo("aborted", err=True)
            code = EXIT_NO_SUCCESS
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else EXIT_SUCCESS)


def _usage_error(message: str) -> int:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return EXIT_USAGE


app = typer.Typer(add_completion=False, help=__doc__, cls=_OneLineErrors)
console = Console()


@app.callback(invoke_without_command=True)
def _help_without_a_command(ctx: typer.Context) -> None:
    # Instead of no_args_is_help, whose help text would arrive here as an error message.
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def _check_timeout(value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"--timeout must be a positive number of seconds, got {value:g}")
    return value


class Policy(enum.StrEnum):
    repair = "repair"
    fresh = "fresh"
    auto = "auto"


class AdapterName(enum.StrEnum):
    chat = "chat"
    json = "json"
    compact = "compact"


ModelOption = Annotated[
    str, typer.Option("--model", "-m", help="'local' (embedded SmolLM2-135M, offline) or a LiteLLM model string")
]
ApiBaseOption = Annotated[str | None, typer.Option(
    "--api-base", help="Address of an OpenAI-compatible server serving --model (llama.cpp, vLLM, ...), e.g. "
    "http://127.0.0.1:8080/v1 with --model openai/<name>")]
ApiKeyEnvOption = Annotated[str | None, typer.Option(
    "--api-key-env", metavar="NAME", help="Environment variable holding the API key [default: with --api-base, "
    "no key is sent; else the provider's own variable]")]
MaxTokensOption = Annotated[int | None, typer.Option(
    "--max-tokens", help="Output tokens per LM answer at most [default: 512 for 'local', 1024 for other models]")]
TemperatureOption = Annotated[float | None, typer.Option(
    "--temperature", help="Sampling temperature, 0 to 2 [default: 0 for 'local', else the model's own]")]
AdapterOption = Annotated[AdapterName | None, typer.Option(
    "--adapter", help="How roles ask for structured answers: 'chat' (DSPy's field markers), 'json' (a JSON "
    "object; the output schema goes to the server), 'compact' (JSON without a template of placeholders) "
    "[default: compact for 'local', else chat]")]
TraceOption = Annotated[
    Path | None, typer.Option("--trace", help="Write every role call to this JSONL file as it finishes")
]
CheckpointOption = Annotated[Path | None, typer.Option(
    "--checkpoint", help="Record every role call in this SQLite file; with --run-id, resume that run from it")]
RunIdOption = Annotated[str | None, typer.Option(
    "--run-id", help="Name of this run in --checkpoint: running again with it resumes without repeating calls")]
TokenBudgetOption = Annotated[int | None, typer.Option(
    "--token-budget", min=1, help="Stop once the LMs have reported this many tokens (input plus output)")]
MaxCostOption = Annotated[float | None, typer.Option(
    "--max-cost", min=0.0, help="Stop once the LM requests have cost this many US dollars")]
ProgramOption = Annotated[Path | None, typer.Option(
    "--program", help="Run a saved program (loops optimize --out, or module.save): its demos, instructions and "
    "configuration; options given here override its own")]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", callback=_check_timeout, help="Wall-clock limit of the whole loop, in seconds")
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
    if "approved" in outputs:
        return "[green]approved[/green]" if outputs["approved"] else "needs revision"
    return "ok"


@dataclass(frozen=True)
class ModelChoice:
    """--model and the options that shape its requests, resolved once by `loops.lm.resolve`; only the
    options given are passed, so that the model's own defaults apply to the rest."""

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    adapter: AdapterName | None = None

    def resolve(self) -> dspy.BaseLM:
        from loops.lm import resolve

        options = {name: getattr(self, name) for name in ("api_base", "api_key_env", "max_tokens", "temperature")
                   if getattr(self, name) is not None}
        if self.adapter is not None:
            options["adapter"] = self.adapter.value
        return resolve(self.model, **options)


def _run_with_progress(
    module: dspy.Module, model: str | dspy.BaseLM | ModelChoice, trace: Path | None, **inputs: Any
) -> tuple[dspy.Prediction, float]:
    """Run `module` on `inputs` with the live display; returns its prediction and the wall time.

    A wrong `--model` (or option of it) or an unwritable `--trace` raises `ConfigurationError` before
    any LM call.
    """
    from loops.lm import resolve

    lm = model.resolve() if isinstance(model, ModelChoice) else resolve(model)
    with ExitStack() as stack:
        trace_file = stack.enter_context(_open_trace(trace)) if trace else None
        progress = LiveProgress(trace_file)
        stack.enter_context(dspy.context(lm=lm))  # the LM brings the adapter it needs (loops.lm.adapter_for)
        stack.enter_context(observing(progress))
        started = time.monotonic()
        try:
            with progress.live:
                try:
                    result = module(**inputs)
                finally:  # a run that raised (an error in a DSL program) leaves no spinner behind
                    progress.running = None
        finally:
            console.print()
    return result, time.monotonic() - started


def _open_trace(trace: Path) -> IO[str]:
    try:
        return trace.open("w", encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"--trace {str(trace)!r} cannot be written ({exc.strerror or exc}); give a path in a writable directory"
        ) from exc


def _run_options(timeout: float, checkpoint: Path | None, run_id: str | None, token_budget: int | None,
                 max_cost: float | None) -> dict[str, Any]:
    """The per-call options shared by the loop commands: limits, and where the run is recorded."""
    if run_id is not None and checkpoint is None:
        raise ConfigurationError("--run-id needs --checkpoint FILE, the file the run is recorded in")
    options: dict[str, Any] = {"timeout_s": timeout, "max_tokens": token_budget, "max_cost_usd": max_cost}
    if checkpoint is not None:
        options.update(checkpoint=str(checkpoint), run_id=run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}")
    return options


def _report(result: dspy.Prediction, seconds: float, title: str) -> None:
    """Print the outcome and exit with its code (0 success, 1 no success, 3 the run failed)."""
    final = result.final
    console.print(Panel(str(getattr(final, "content", final) or ""), title=title, expand=False))
    cost = "" if result.cost_usd is None else f"   cost: ${result.cost_usd:.4f}"
    console.print(f"stop reason: [bold]{result.stop_reason}[/bold]   iterations: {result.iterations}   "
                  f"LM calls: {result.lm_calls}   tokens: {result.tokens}{cost}   wall time: {seconds:.1f}s")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if result.stop_reason == "error":
        raise typer.Exit(EXIT_RUN_FAILED)
    raise typer.Exit(EXIT_SUCCESS if result.success else EXIT_NO_SUCCESS)


@app.command()
def refine(
    requirements: Annotated[str, typer.Argument(help="What to create")],
    context: Annotated[str, typer.Option(help="Background context for the creator")] = "",
    model: ModelOption = "local",
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    adapter: AdapterOption = None,
    max_iterations: Annotated[int | None, typer.Option(min=0, max=1000, help="Revisions at most [default: 3]")] = None,
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
    checkpoint: CheckpointOption = None,
    run_id: RunIdOption = None,
    token_budget: TokenBudgetOption = None,
    max_cost: MaxCostOption = None,
    program: ProgramOption = None,
) -> None:
    """Creator–Critic–Iterator: draft, then revise until the critic approves."""
    module = load_program("refine", program, max_iterations=max_iterations)
    choice = ModelChoice(model, api_base, api_key_env, max_tokens, temperature, adapter)
    result, seconds = _run_with_progress(module, choice, trace, requirements=requirements, context=context,
                                         **_run_options(timeout, checkpoint, run_id, token_budget, max_cost))
    _report(result, seconds, f"final draft ({'approved' if result.success else 'not approved'})")


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
        Policy | None, typer.Option(help="'repair' (show earlier attempts), 'fresh' (new samples) or 'auto' (repair "
                                    "until it repeats itself, then fresh) [default: auto on the embedded model, "
                                    "else repair]")
    ] = None,
    samples: Annotated[int | None, typer.Option(min=1, max=100, help=(
        "Candidates per iteration, each run through the tests; the best is kept [default: several on the "
        "embedded model, else 1]"))] = None,
    examples: Annotated[bool | None, typer.Option("--examples/--no-examples", help=(
        "Show worked examples of small tasks solved to some greedy candidates (all the examples; one "
        "each) and to every second sample [default: on the embedded model, else no]"))] = None,
    unpenalized: Annotated[bool | None, typer.Option("--unpenalized/--no-unpenalized", help=(
        "Draw greedy candidates without the embedded engine's repeat penalty (none; a light frequency "
        "penalty) and with a lower token cap [default: on the embedded model, else no]"))] = None,
    analyst: Annotated[bool | None, typer.Option("--analyst/--no-analyst", help=(
        "Ask the analyst LLM for the next instruction after failing tests [default: not on the embedded "
        "model, else yes]"))] = None,
    model: ModelOption = "local",
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    adapter: AdapterOption = None,
    max_iterations: Annotated[int | None, typer.Option(min=0, max=1000, help=(
        "Execute-validate cycles at most [default: by model, loops.lm.code_loop_defaults]"))] = None,
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
    checkpoint: CheckpointOption = None,
    run_id: RunIdOption = None,
    token_budget: TokenBudgetOption = None,
    max_cost: MaxCostOption = None,
    program: ProgramOption = None,
) -> None:
    """Execute–Validate–Controller: write code, run the tests, repeat until they pass.

    Unset options follow the model (loops.lm.code_loop_defaults)."""
    from loops.lm import code_loop_defaults

    ShellValidator(workspace=workspace).check(test_command)
    lm = ModelChoice(model, api_base, api_key_env, max_tokens, temperature, adapter).resolve()
    if max_iterations is None and program is None:
        max_iterations = code_loop_defaults(lm).max_iterations
    module = load_program("fix", program, max_iterations=max_iterations, workspace=workspace,
                          policy=policy.value if policy else None, samples=samples, examples=examples,
                          unpenalized=unpenalized, analyst=analyst, target_file=target_file)
    initial_input = {"prompt": task, "files": list(files or []), "target_file": target_file}
    result, seconds = _run_with_progress(module, lm, trace, initial_input=initial_input,
                                         test_command=test_command,
                                         **_run_options(timeout, checkpoint, run_id, token_budget, max_cost))
    if workspace is not None:
        console.print(f"files written to {workspace}")
    _report(result, seconds, "tests pass" if result.success else "tests still fail")


@app.command()
def direct(
    goal: Annotated[str, typer.Argument(help="What to achieve")],
    model: ModelOption = "local",
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    adapter: AdapterOption = None,
    max_iterations: Annotated[int | None, typer.Option(
        min=0, max=1000, help="Plan-execute-evaluate cycles at most [default: 3]")] = None,
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
    checkpoint: CheckpointOption = None,
    run_id: RunIdOption = None,
    token_budget: TokenBudgetOption = None,
    max_cost: MaxCostOption = None,
    program: ProgramOption = None,
) -> None:
    """Director–Executor–Evaluator–Controller: plan, execute, evaluate, until the evaluator passes it."""
    module = load_program("direct", program, max_iterations=max_iterations)
    choice = ModelChoice(model, api_base, api_key_env, max_tokens, temperature, adapter)
    result, seconds = _run_with_progress(module, choice, trace, initial_input=goal,
                                         **_run_options(timeout, checkpoint, run_id, token_budget, max_cost))
    _report(result, seconds, "passed" if result.success else "not passed")


def _dsl_value(text: str) -> Any:
    """A --set value: a DSL number, #t/#f or "quoted string" as that value; anything else as text."""
    from loops.sexp import DslError, read

    try:
        nodes = read(text)
    except DslError:
        return text
    if len(nodes) == 1 and not nodes[0].is_list and nodes[0].symbol is None:
        return nodes[0].value
    return text


def name_value_pairs(items: list[str], option: str, example: str) -> list[tuple[str, str]]:
    """`name=value` items of a repeatable option, split; one without a name or an `=` is a usage error."""
    pairs = []
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise ConfigurationError(f"{option} takes name=value (e.g. {option} {example}), got {item!r}")
        pairs.append((name.strip(), value))
    return pairs


def _bindings(assignments: list[str]) -> dict[str, Any]:
    return {name: _dsl_value(value) for name, value in name_value_pairs(assignments, "--set", "target=100")}


@app.command("run")
def run_program(
    program: Annotated[Path, typer.Argument(help="The DSL program, a .sexp file")],
    assignments: Annotated[list[str] | None, typer.Option(
        "--set", help="Bind a variable before the program runs: name=value (a number, #t/#f, or text)")] = None,
    model: ModelOption = "local",
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    adapter: AdapterOption = None,
    workspace: Annotated[Path | None, typer.Option(
        help="Directory the shell tool and get_context work in (default: the current one)")] = None,
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
    checkpoint: CheckpointOption = None,
    run_id: RunIdOption = None,
    token_budget: TokenBudgetOption = None,
    max_cost: MaxCostOption = None,
    saved: Annotated[Path | None, typer.Option(
        "--program", help="Run a saved program compiled from this file (loops optimize FILE.sexp --out): its "
        "atoms' demos and instructions")] = None,
) -> None:
    """Run an S-expression program (see docs/dsl.md); its atoms use --model.

    Exit codes as for the loops: 1 when a limit stopped the program (its LM budget, or its steps, wall
    clock or recursion depth, shown with the form's position), 2 for an error in the program (shown
    with its line and a caret)."""
    from loops.budget import Budget
    from loops.sexp import DslError, LimitExceeded, Limits, compile, to_source

    bindings = _bindings(assignments or [])
    reserved = sorted(set(bindings) & {"budget", "checkpoint", "run_id"})
    if reserved:
        raise ConfigurationError(f"--set {reserved[0]}=... names a program call's own option; use --checkpoint/"
                                 "--run-id (or --token-budget, --max-cost, --timeout), or another variable name")
    recording = _run_options(timeout, checkpoint, run_id, None, None)
    bindings.update({name: recording[name] for name in ("checkpoint", "run_id") if name in recording})
    options = {"workspace": workspace, "limits": Limits(timeout_s=timeout),
               "budget": Budget(max_iterations=1, timeout_s=timeout, max_tokens=token_budget, max_cost_usd=max_cost)}
    try:
        compiled = compile(program, **options) if saved is None else load_program(str(program), saved, **options)
    except DslError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    log = logging.getLogger("loops.sexp")
    handler = _ConsoleLog()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        result, seconds = _run_with_progress(
            compiled, ModelChoice(model, api_base, api_key_env, max_tokens, temperature, adapter), trace, **bindings)
    except LimitExceeded as error:  # its step budget, wall clock or recursion depth: a limit, as --timeout is
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_NO_SUCCESS) from None
    except DslError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    finally:
        log.removeHandler(handler)
    console.print(Panel(to_source(result.result), title=f"{program.name}: {result.stop_reason}", expand=False))
    console.print(f"LM calls: {result.lm_calls}   tokens: {result.tokens}   wall time: {seconds:.1f}s")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if result.stop_reason == "error":
        raise typer.Exit(EXIT_RUN_FAILED)
    raise typer.Exit(EXIT_SUCCESS if result.success else EXIT_NO_SUCCESS)


class _ConsoleLog(logging.Handler):
    """The program's `log-message` lines, as they happen (its warnings are printed at the end)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.INFO:
            console.print(f"[dim]log:[/dim] {record.getMessage()}", highlight=False)


@app.command()
def repl(
    model: ModelOption = "local",
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    adapter: AdapterOption = None,
) -> None:
    """An S-expression read-eval-print loop: definitions persist; multi-line input; (exit) or Ctrl-D."""
    from loops.sexp.repl import main as repl_main

    repl_main(model=ModelChoice(model, api_base, api_key_env, max_tokens, temperature, adapter).resolve())


app.add_typer(runs_app, name="runs", help="The runs a --checkpoint file holds: `loops runs list FILE`, "
              "`loops runs show FILE RUN_ID`")


# After every shared option above is defined: the optimize commands are built from them.
from loops.optimize_cli import batch_command, eval_command, load_program, optimize_command  # noqa: E402

app.command("optimize")(optimize_command)
app.command("eval")(eval_command)
app.command("batch")(batch_command)


def main() -> None:
    app()

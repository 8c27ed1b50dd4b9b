"""What every `loops` command shares, declared once: the model options (`ModelChoice`), the run options
(`RunOptions`), the exit codes, the console, and loading the program a command runs.

A command takes a group of options by naming a parameter of its type (`choice: ModelChoice`); `with_options`
adds the group's options to the command's own and hands it one instance of the group. Every such command also
takes `--otel` (`Telemetry`), which `with_options` acts on before the command runs. The choices a user names
(policies, adapters) are enums generated from the tuples that define them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import inspect
import math
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer
from rich.console import Console

from loops.choices import ADAPTER_NAMES, JUDGES, POLICIES, PROFILE_NAMES
from loops.errors import ConfigurationError, a_or_an

if TYPE_CHECKING:
    import dspy

__all__ = ["EXIT_AWAITING_INPUT", "EXIT_INTERRUPTED", "EXIT_NO_SUCCESS", "EXIT_RUN_FAILED", "EXIT_SUCCESS",
           "EXIT_USAGE", "KINDS", "AdapterName", "CheckOption", "CheckpointOption", "HumanOption", "Judge",
           "ModelChoice", "Policy", "ProfileName", "RunOptions", "ShellGrant", "Telemetry", "TimeoutOption",
           "TraceOption", "console", "dsl_errors_exit_usage", "exit_code", "kind_class", "load_program",
           "name_value_pairs", "new_run_id", "people", "with_options"]

EXIT_SUCCESS, EXIT_NO_SUCCESS, EXIT_USAGE, EXIT_RUN_FAILED = 0, 1, 2, 3
EXIT_AWAITING_INPUT = 4  # the run paused for a person's answer (stop reason "awaiting_input")
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended
console = Console()

Policy = enum.StrEnum("Policy", {name: name for name in POLICIES})
Judge = enum.StrEnum("Judge", {name: name for name in JUDGES})
AdapterName = enum.StrEnum("AdapterName", {name: name for name in ADAPTER_NAMES})
ProfileName = enum.StrEnum("ProfileName", {name: name for name in PROFILE_NAMES})

# The programs a command runs by name, as module:class (imported when a command runs, not for --help); any
# other is a DSL program, FILE.sexp.
KINDS = {"refine": "loops.patterns.creator_critic:CreatorCriticIterator",
         "fix": "loops.patterns.execute_validate:ExecuteValidateController",
         "direct": "loops.patterns.director:DirectorExecutorEvaluatorController"}


def exit_code(stop_reason: str, success: bool) -> int:
    """The exit code of a run that ended with `stop_reason`: 0 success, 1 no success, 3 the run failed, 4 it
    waits for a person's answer."""
    if stop_reason == "error":
        return EXIT_RUN_FAILED
    if stop_reason == "awaiting_input":
        return EXIT_AWAITING_INPUT
    return EXIT_SUCCESS if success else EXIT_NO_SUCCESS


def new_run_id() -> str:
    """The name of a run the command was not given one for (`--run-id`): the time it started, and a few random
    characters so that two runs started in the same second differ."""
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


@contextmanager
def dsl_errors_exit_usage() -> Iterator[None]:
    """An error in a DSL program (`loops.sexp.DslError`) raised inside, printed as it is (its line and a caret,
    over several lines: not the one-line `error: ...` of other usage errors) with exit code 2. Every command
    that compiles or runs a DSL program shows its errors so."""
    from loops.sexp import DslError  # with the program, not before: --help loads no DSL

    try:
        yield
    except DslError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_USAGE) from None


CheckOption = Annotated[list[str] | None, typer.Option(
    "--check", metavar="SPEC", help="A rule every draft is checked against, for free, before any critic (repeatable): "
    "max-words=N, min-words=N, words=N or N..M (and sentences, lines, chars alike), include=TEXT, exclude=TEXT, "
    "starts-with=TEXT, ends-with=TEXT, regex=PATTERN, bullets=N, numbered=N, mentions=N, capitalized-lines, json, "
    "json-schema=FILE (docs/checks.md). A draft failing one is never approved; its message is the feedback")]


HumanOption = Annotated[list[str] | None, typer.Option(
    "--human", metavar="ROLE", help="A person answers this role (repeatable), at the terminal; without one "
    "(stdin not a terminal) the run pauses with exit code 4 until `loops runs answer` (needs --checkpoint)")]


def people(kind: str, roles: list[str] | None) -> dict[str, Any]:
    """The roles of program `kind` that `--human` gives a person (`loops.human()`), by name; an unknown role is a
    usage error naming the roles there are."""
    if not roles:
        return {}
    from loops.running.person import human

    known = list(kind_class(kind).contracts)
    unknown = [role for role in roles if role not in known]
    if unknown:
        raise ConfigurationError(f"--human {unknown[0]}: the roles of {kind} are {', '.join(known)}")
    return {role: human() for role in roles}


def kind_class(kind: str) -> type | None:
    """The loop class a program kind names (`refine`, `fix`, `direct`); None for any other (a DSL program)."""
    if kind not in KINDS:
        return None
    module, _, name = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def _check_timeout(value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"--timeout must be a positive number of seconds, got {value:g}")
    return value


@dataclass(frozen=True)
class ModelChoice:
    """--model and the options that shape its requests, resolved once by `loops.lm.resolve`; only the
    options given are passed, so that the model's own defaults apply to the rest."""

    model: Annotated[str, typer.Option(
        "--model", "-m", help="'local' (embedded SmolLM2-135M, offline) or a LiteLLM model string")] = "local"
    api_base: Annotated[str | None, typer.Option(
        "--api-base", help="Address of an OpenAI-compatible server serving --model (llama.cpp, vLLM, ...), e.g. "
        "http://127.0.0.1:8080/v1 with --model openai/<name>")] = None
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", metavar="NAME", help="Environment variable holding the API key [default: with "
        "--api-base, no key is sent; else the provider's own variable]")] = None
    max_tokens: Annotated[int | None, typer.Option(
        "--max-tokens", help="Output tokens per LM answer at most [default: 512 for 'local', 1024 for other "
        "models]")] = None
    temperature: Annotated[float | None, typer.Option(
        "--temperature", help="Sampling temperature, 0 to 2 [default: 0 for 'local', else the model's own]")] = None
    profile: Annotated[ProfileName | None, typer.Option(
        "--profile", help="What the model is, over what its name says: 'small' (its writing roles answer in plain "
        "text with worked examples, fix draws several candidates, roles see their last few turns) or 'capable' "
        "[default: small for 'local', a SmolLM or a model of at most 1B parameters by its name; else capable]")] = None
    adapter: Annotated[AdapterName | None, typer.Option(
        "--adapter", help="How roles ask for structured answers: 'chat' (DSPy's field markers), 'json' (a JSON "
        "object; the output schema goes to the server), 'compact' (JSON without a template of placeholders) "
        "[default: compact for 'local' and with --api-base, else chat]")] = None

    def resolve(self) -> dspy.BaseLM:
        from loops.lm import resolve

        options = {name: getattr(self, name) for name in ("api_base", "api_key_env", "max_tokens", "temperature")
                   if getattr(self, name) is not None}
        for name in ("adapter", "profile"):
            if getattr(self, name) is not None:
                options[name] = getattr(self, name).value
        return resolve(self.model, **options)


# The options a batch shares with a single run, declared once (`loops batch` takes them for each example's run).
TimeoutOption = Annotated[float, typer.Option(
    "--timeout", callback=_check_timeout, help="Wall-clock limit of the whole loop (a batch: of each example's), in "
    "seconds")]
TraceOption = Annotated[Path | None, typer.Option(
    "--trace", help="Append every role call to this JSONL file as it finishes, then the run's summary, each line "
    "with the run's id and time (a batch: a run per example, each line with its example's id)")]
CheckpointOption = Annotated[Path | None, typer.Option(
    "--checkpoint", help="Record every role call in this SQLite file, so that an interrupted run resumes from it "
    "without repeating calls: with --run-id (a batch: each example's run is recorded under its id)")]


@dataclass(frozen=True)
class RunOptions:
    """The limits of one run and where it is recorded: the options of every command that runs a loop."""

    timeout: TimeoutOption = 300.0
    trace: TraceOption = None
    checkpoint: CheckpointOption = None
    run_id: Annotated[str | None, typer.Option(
        "--run-id", help="Name of this run in --checkpoint: running again with it resumes without repeating "
        "calls")] = None
    token_budget: Annotated[int | None, typer.Option(
        "--token-budget", min=1, help="Stop once the LMs have reported this many tokens (input plus output)")] = None
    max_cost: Annotated[float | None, typer.Option(
        "--max-cost", min=0.0, help="Stop once the LM requests have cost this many US dollars")] = None

    def recording(self) -> dict[str, Any]:
        """The call options that record the run: `checkpoint` and `run_id` (a new one unless given)."""
        if self.run_id is not None and self.checkpoint is None:
            raise ConfigurationError("--run-id needs --checkpoint FILE, the file the run is recorded in")
        if self.checkpoint is None:
            return {}
        return {"checkpoint": str(self.checkpoint), "run_id": self.run_id or new_run_id()}

    def call_options(self) -> dict[str, Any]:
        """The per-call options of a loop module: its limits, and where the run is recorded."""
        return {"timeout_s": self.timeout, "max_tokens": self.token_budget, "max_cost_usd": self.max_cost,
                **self.recording()}


@dataclass(frozen=True)
class ShellGrant:
    """Whether a DSL program may use the shell tool: the options of every command that runs one."""

    allow_shell: Annotated[bool, typer.Option(
        "--allow-shell", help="Grant a DSL program the shell tool (system:execute_shell_command): it may then run "
        "any command as you, in the workspace, with a minimal environment (no API keys)")] = False
    allow_executable: Annotated[list[str] | None, typer.Option(
        "--allow-executable", metavar="NAME", help="Grant a DSL program the shell tool for this executable only "
        "(repeatable): a command whose first word is not one of them is refused")] = None

    def tools(self, kind: str = ".sexp") -> dict[str, Any] | None:
        """The tools granted to a program of `kind` (the shell tool, or None when not granted)."""
        if self.allow_shell and self.allow_executable:
            raise ConfigurationError("give --allow-shell (any executable) or --allow-executable NAME (only those), "
                                     "not both")
        if not self.allow_shell and not self.allow_executable:
            return None
        if not kind.endswith(".sexp"):
            raise ConfigurationError(f"--allow-shell and --allow-executable grant a DSL program the shell tool; "
                                     f"{kind!r} is not one")
        from loops.sexp import shell_command_tool

        return {"system:execute_shell_command": shell_command_tool(executables=self.allow_executable or None)}


@dataclass(frozen=True)
class Telemetry:
    """Whether the command's loop runs are traced (`loops.observers.tracing`): an option of every command that runs
    one."""

    otel: Annotated[bool, typer.Option(
        "--otel", help="Send every loop run as OpenTelemetry spans (GenAI conventions) over OTLP/HTTP to "
        "OTEL_EXPORTER_OTLP_ENDPOINT [default endpoint: http://localhost:4318], as service OTEL_SERVICE_NAME "
        "[default: loops]; needs loops[tracing]")] = False

    def start(self) -> None:
        if self.otel:
            from loops.observers.tracing import enable

            enable(otlp=True)


_GROUPS = (ModelChoice, RunOptions, ShellGrant)


@functools.cache
def _group_parameters(group: type) -> tuple[inspect.Parameter, ...]:
    hints = get_type_hints(group, include_extras=True)
    return tuple(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                                   annotation=hints[field.name]) for field in dataclasses.fields(group))


def with_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with the options of each group it names by type (`choice: ModelChoice`, `run: RunOptions`)
    added after its own, and called with one instance of each group built from them; and with `--otel`
    (`Telemetry`), which turns tracing on before the command runs."""
    signature = inspect.signature(command, eval_str=True)
    groups = {name: parameter.annotation for name, parameter in signature.parameters.items()
              if parameter.annotation in _GROUPS}
    own = [parameter for name, parameter in signature.parameters.items() if name not in groups]

    @functools.wraps(command)
    def with_groups(**values: Any) -> Any:
        for name, group in groups.items():
            values[name] = group(**{parameter.name: values.pop(parameter.name)
                                    for parameter in _group_parameters(group)})
        Telemetry(**{parameter.name: values.pop(parameter.name) for parameter in _group_parameters(Telemetry)}).start()
        return command(**values)

    added = [parameter for group in (*groups.values(), Telemetry) for parameter in _group_parameters(group)]
    with_groups.__signature__ = signature.replace(parameters=[*own, *added])  # what typer reads
    return with_groups


def name_value_pairs(items: list[str], option: str, example: str) -> list[tuple[str, str]]:
    """`name=value` items of a repeatable option, split; one without a name or an `=`, and a name given twice
    (which of the two was meant?), are usage errors."""
    pairs: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        name = name.strip()
        if not equals or not name:
            raise ConfigurationError(f"{option} takes name=value (e.g. {option} {example}), got {item!r}")
        if name in pairs:
            raise ConfigurationError(f"{option} {name}= is given twice ({pairs[name]!r}, then {value!r}): give each "
                                     "name once")
        pairs[name] = value
    return list(pairs.items())


def load_program(kind: str, program: Path | None, **arguments: Any) -> dspy.Module:
    """The program a command runs: the saved one at `program` (checked to be of `kind`; `arguments` given
    override its own), or a new one of `kind` built with `arguments`. None means "not given"."""
    from loops.running.saving import load, objects_to_give, saved_class

    arguments = {name: value for name, value in arguments.items() if value is not None}
    if kind not in KINDS and not kind.endswith(".sexp"):
        raise ConfigurationError(f"unknown program {kind!r}: use refine, fix, direct or a FILE.sexp")
    if "samples" in arguments and kind not in ("fix", "refine"):
        raise ConfigurationError(f"--samples is an option of fix and refine, not of {kind}")
    expected = kind_class(kind)
    if program is not None:
        from loops.sexp.program import SexpProgram, read_program

        saved = saved_class(program)  # checked before it is built: another kind takes other options
        if not issubclass(saved, expected or SexpProgram):
            raise ConfigurationError(f"--program {str(program)!r} is {a_or_an(saved.__name__)}, not "
                                     f"{a_or_an((expected or SexpProgram).__name__)}: give it to `loops "
                                     f"{_command_of(saved)}` instead")
        missing = {name: given for name, given in objects_to_give(program).items() if name not in arguments}
        if missing:
            name, given = next(iter(missing.items()))
            person = f", or give the role to a person (--human {name})" if name in (
                expected or SexpProgram).contracts else ""
            raise ConfigurationError(f"--program {str(program)!r} was saved with {name}={given}, a Python object that "
                                     f"neither the file nor the command line can hold: run it from Python "
                                     f"(loops.load(path, {name}=...)){person}")
        loaded = load(program, **arguments)
        if expected is None and read_program(Path(kind)) != loaded.source:
            raise ConfigurationError(f"--program {str(program)!r} was compiled from another text than {kind!r}: "
                                     "give the .sexp file it was optimized from")
        return loaded
    if expected is None:
        from loops.sexp import compile as compile_program

        return compile_program(Path(kind), **arguments)
    return expected(**arguments)


def _command_of(program: type) -> str:
    for name in KINDS:
        if issubclass(program, kind_class(name)):
            return name
    return "run"

"""`loops optimize`, `loops eval` and `loops batch`: a loop over a dataset from the shell.

    loops optimize fix --data mbpp.jsonl --optimizer bootstrap --out fix.optimized.json
    loops eval fix --data mbpp.jsonl --program fix.optimized.json
    loops fix "..." -t "pytest" --program fix.optimized.json
    loops batch fix --data mbpp.jsonl --out results.jsonl --concurrency 64 --model openai/... --api-base ...

The program is a pattern (`refine`, `fix`, `direct`), a DSL program (`FILE.sexp`), or a saved
program (`--program FILE`, which must be of that kind). The data is MBPP JSON lines (its train split
optimizes, its validation split scores), any JSON-lines file of the program's inputs (a `split` field
of `train`/`validation` is honoured, else the first `--train` records train and the next `--val`
score), or a built-in set (`builtin:writing`, `builtin:goals`, `builtin:code`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from loops.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_NO_SUCCESS,
    EXIT_RUN_FAILED,
    EXIT_SUCCESS,
    EXIT_USAGE,
    CheckpointOption,
    ModelChoice,
    ShellGrant,
    TimeoutOption,
    TraceOption,
    console,
    dsl_errors_exit_usage,
    load_program,
    name_value_pairs,
    new_run_id,
    with_options,
)
from loops.cli.progress import TraceFile, open_trace
from loops.errors import ConfigurationError
from loops.vocabulary.context import observing

if TYPE_CHECKING:
    import dspy

__all__ = ["batch_command", "eval_command", "load_sets", "optimize_command", "unnamed_model_note"]

KindArgument = Annotated[str, typer.Argument(help="refine | fix | direct | FILE.sexp")]
DataOption = Annotated[str, typer.Option(
    "--data", help="MBPP JSON lines, a JSON-lines file of the program's inputs, or builtin:writing|goals|code")]
ProgramOption = Annotated[Path | None, typer.Option(
    "--program", help="Start from a saved program (loops optimize --out, or module.save) of this kind")]
MaxIterationsOption = Annotated[int | None, typer.Option(
    min=1, max=1000, help="The loop's iterations at most [default: the pattern's]")]
SamplesOption = Annotated[int | None, typer.Option(
    min=1, max=100, help="fix and refine: candidates per iteration [default: by model]")]
ThreadsOption = Annotated[int, typer.Option(min=1, max=64, help="Examples run at once")]
VerboseOption = Annotated[bool, typer.Option("--verbose", help="Show DSPy's own log lines (its optimizers' INFO "
                                             "messages) above the progress display")]


def _data_form(kind: str, data: str) -> str:
    """What `--data` is: `builtin`, `mbpp` (for `fix` only) or `jsonl`; a mistake raises, naming the fix."""
    from loops.optimize import datasets

    if data.startswith("builtin:"):
        return "builtin"
    if not Path(data).is_file():
        raise ConfigurationError(f"--data {data!r} is not a file: give a JSON-lines file, or builtin:writing, "
                                 "builtin:goals or builtin:code")
    if datasets.is_mbpp(data):
        if kind != "fix":
            raise ConfigurationError(f"--data {data!r} holds MBPP code tasks: they are for `fix`, not {kind!r}")
        return "mbpp"
    return "jsonl"


def load_sets(kind: str, data: str, train: int | None, val: int | None) -> tuple[list[dspy.Example],
                                                                                  list[dspy.Example]]:
    """The training and validation examples `--data` holds for a program of `kind`."""
    from loops.optimize import datasets

    form = _data_form(kind, data)
    if form == "mbpp":
        return datasets.mbpp(data, "train", train), datasets.mbpp(data, "validation", val)
    if form == "jsonl" and datasets.has_splits(data):
        return datasets.jsonl(data, split="train", limit=train), datasets.jsonl(data, split="validation", limit=val)
    examples = datasets.builtin(data.removeprefix("builtin:")) if form == "builtin" else datasets.jsonl(data)
    cut = train if train is not None else max(1, len(examples) // 2)
    return examples[:cut], examples[cut:cut + val] if val else examples[cut:]


def _options(pairs: list[str]) -> dict[str, Any]:
    import json

    options = {}
    for name, text in name_value_pairs(pairs, "--option", "max_bootstrapped_demos=2"):
        try:
            options[name.replace("-", "_")] = json.loads(text)
        except json.JSONDecodeError:
            options[name.replace("-", "_")] = text
    return options


@with_options
def optimize_command(
    kind: KindArgument,
    data: DataOption,
    choice: ModelChoice,
    grant: ShellGrant,
    optimizer: Annotated[str, typer.Option(
        help="bootstrap | random-search | mipro | gepa | simba | draws (fix only: its candidates chosen on train)")
    ] = "bootstrap",
    out: Annotated[Path, typer.Option(help="Where the optimized program is saved (.json), with its report")] = Path(
        "optimized.json"),
    train: Annotated[int | None, typer.Option(min=1, help="Training examples at most")] = None,
    val: Annotated[int | None, typer.Option(min=1, help="Validation examples at most")] = None,
    program: ProgramOption = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", help="An optimizer option, name=value (JSON values), e.g. max_bootstrapped_demos=2")] = None,
    max_iterations: MaxIterationsOption = None,
    samples: SamplesOption = None,
    threads: ThreadsOption = 1,
    keep_optimized: Annotated[bool, typer.Option(
        "--keep-optimized", help="Keep the optimizer's program even if it scores no higher than the loop as it "
        "was [default: keep the better, the loop as it was on a tie]")] = False,
    verbose: VerboseOption = False,
) -> None:
    """Score a loop on the validation examples, optimize it on the training ones, score it again, and save
    the better of the two (never a regression, unless --keep-optimized)."""
    import dspy

    import loops.optimize

    if out.suffix != ".json":
        raise ConfigurationError(f"--out {str(out)!r}: the optimized program is saved as a .json file")
    module = _program(kind, program, grant, max_iterations=max_iterations, samples=samples)
    trainset, valset = load_sets(kind, data, train, val)
    lm = choice.resolve()
    started = time.monotonic()
    with dspy.context(lm=lm):
        _, report = loops.optimize.run(module, trainset, valset, optimizer=optimizer, out=out, num_threads=threads,
                                       keep="optimized" if keep_optimized else "better", verbose=verbose,
                                       **_options(option or []))
    console.print(report.summary(verdict=False, lm_note=False), highlight=False, soft_wrap=True)  # the display said it
    console.print(f"saved to {out} ({time.monotonic() - started:.0f} s in all)", highlight=False, soft_wrap=True)
    note = unnamed_model_note(report.unnamed_roles(), lm, choice.model, f"loops {kind} ... --program {out}")
    if note is not None:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)


def unnamed_model_note(roles: list[str], lm: Any, model: str, command: str) -> str | None:
    """What a program saved by a command does not say of its model, said the way a command's user gives one: the
    roles that ran on `--model` (`lm`), unless it is the embedded model, the --model of every command that runs a
    saved program unless told."""
    from loops.running.saving import lm_reference

    if not roles or lm_reference(lm) == "local":
        return None
    return (f"the saved program names no LM for {', '.join(roles)}: they ran on --model {model}, which a saved "
            f"program does not record; give the same --model to the command that runs it ({command} --model {model})")


@with_options
def eval_command(
    kind: KindArgument,
    data: DataOption,
    choice: ModelChoice,
    grant: ShellGrant,
    program: ProgramOption = None,
    val: Annotated[int | None, typer.Option(min=1, help="Examples at most")] = None,
    max_iterations: MaxIterationsOption = None,
    samples: SamplesOption = None,
    threads: ThreadsOption = 1,
    verbose: VerboseOption = False,
) -> None:
    """Score a loop (or a saved one, --program) on the validation examples of --data."""
    import dspy

    import loops.optimize

    module = _program(kind, program, grant, max_iterations=max_iterations, samples=samples)
    _, valset = load_sets(kind, data, None, val)
    if not valset:
        raise ConfigurationError(f"--data {data!r} holds no validation examples for {kind}")
    lm = choice.resolve()
    with dspy.context(lm=lm):
        score, stage = loops.optimize.evaluate(module, valset, num_threads=threads, verbose=verbose)
    console.print(f"{kind}: score {score.score:.3f}; solved {score.solved} of {score.examples}; "
                  f"{stage.lm_calls} LM calls, {stage.tokens} tokens, {stage.seconds:.1f} s",
                  highlight=False, soft_wrap=True)


@with_options
def batch_command(
    kind: KindArgument,
    data: DataOption,
    choice: ModelChoice,
    grant: ShellGrant,
    out: Annotated[Path, typer.Option(help="JSON-lines file results are appended to; a rerun skips what it holds")],
    concurrency: Annotated[int, typer.Option(min=1, max=10_000, help="Loops running at once (all actors')")] = 16,
    backend: Annotated[str, typer.Option(help="asyncio (in this process) | ray (on Ray actors, many loops each)")] = (
        "asyncio"),
    address: Annotated[str | None, typer.Option(
        help="A running Ray cluster's address (--backend ray); without it, a local instance on 127.0.0.1")] = None,
    split: Annotated[str | None, typer.Option(help="Only the examples of this split (train, validation, ...)")] = None,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Run again the examples --out records as failed (their loop raised)")] = False,
    program: ProgramOption = None,
    max_iterations: MaxIterationsOption = None,
    samples: SamplesOption = None,
    timeout: TimeoutOption = 300.0,
    trace: TraceOption = None,
    checkpoint: CheckpointOption = None,
) -> None:
    """Run a loop on every example of --data, many at once, streaming one result per line to --out.

    Each line of --data holds one example's inputs (and its id); the limits are the command's, the same for every
    example. Every line is checked before any runs: those the loop would refuse are all listed, and none runs.

    Exit codes: 0 every example succeeded; 1 some did not (or their loop raised); 2 a usage or configuration
    error (before any LM call where it can be known, else at the first example it fails); 3 the batch
    itself failed; 130 interrupted (Ctrl-C). Rerunning the same command resumes.
    """
    from loops.optimize.runner import default_metric

    if trace is not None and backend == "ray":
        raise ConfigurationError("--trace writes the role calls run in this process; with --backend ray they run in "
                                 "Ray's actors: leave --trace out, or use --backend asyncio")
    module = _program(kind, program, grant, max_iterations=max_iterations, samples=samples)
    examples = _checked_examples(module, kind, data, split)
    options = {"timeout_s": timeout, **({"checkpoint": str(checkpoint)} if checkpoint is not None else {})}
    lm = choice.resolve()
    try:
        summary = _traced_batch(module, examples, lm, trace, checkpoint, out=out, backend=backend,
                                concurrency=concurrency, address=address, metric=default_metric(module),
                                retry_failed=retry_failed, options=options)
    except KeyboardInterrupt as stop:
        resumes = f" (an example cut short resumes from its record in {checkpoint})" if checkpoint else ""
        typer.echo(f"{stop or 'interrupted'}{resumes}", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except ConfigurationError:
        raise
    except Exception as exc:  # the batch itself, not an example: its cluster went away, out could not be written
        typer.echo(f"error: the batch failed: {type(exc).__name__}: {' '.join(str(exc).split())}; what {out} holds "
                   "stays done, and the same command resumes", err=True)
        raise typer.Exit(EXIT_RUN_FAILED) from None
    console.print(_summary_line(summary, out, backend), highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_SUCCESS if summary.all_succeeded else EXIT_NO_SUCCESS)


def _traced_batch(module: Any, examples: Any, lm: Any, trace: Path | None, checkpoint: Path | None,
                  **batch: Any) -> Any:
    """`loops.batch.run` on `lm`, each example's role calls written to the file `trace` when it is given."""
    import dspy

    import loops.batch

    with dspy.context(lm=lm), ExitStack() as stack:
        if trace is not None:
            trace_file = stack.enter_context(open_trace(trace))
            stack.enter_context(observing(_ExampleTrace(trace_file, loops.batch.current_example,
                                                        checkpointed=checkpoint is not None)))
        return loops.batch.run(module, examples, **batch)


def _summary_line(summary: Any, out: Path, backend: str) -> str:
    """What a batch did, in a line: the examples run now (succeeded, did not, of which raised), those --out held
    already (and how to run again those recorded as failed), and the time."""
    ran = summary.finished + summary.failed
    line = f"{ran} ran: {summary.succeeded} succeeded, {ran - summary.succeeded} did not"
    if summary.failed:
        line += f" ({summary.failed} raised an error: see its 'error' in {out})"
    line += f"; {summary.skipped} already in {out}"
    if summary.skipped_unsuccessful:
        line += f" ({summary.skipped_unsuccessful} of them unsuccessful"
        if summary.skipped_failed:
            line += f", {summary.skipped_failed} raised an error: --retry-failed runs those again"
        line += ")"
    startup = f" (+ {summary.startup_seconds:.1f} s start-up, {summary.workers} Ray actors)" if backend == "ray" else ""
    return f"{line}; {summary.seconds:.1f} s{startup}, {summary.per_second:.2f} loops/s"


class _ExampleTrace:
    """A batch's --trace: every example run here is a run of the trace file (`TraceFile`), its records named by
    the example's id: each role call as it finishes, then its summary. Its run id is the example's id when the
    batch is checkpointed (the run's id in the checkpoint file), else a new one."""

    def __init__(self, trace_file: IO[str], example: Callable[[], str | None], checkpointed: bool):
        self.trace_file, self.example, self.checkpointed = trace_file, example, checkpointed
        self.runs: dict[str, tuple[TraceFile, float]] = {}  # the examples running, with when they started

    def example_started(self, example: Any) -> None:
        run_id = example.key if self.checkpointed else new_run_id()
        self.runs[example.key] = (TraceFile(self.trace_file, run_id, example=example.key), time.monotonic())

    def step_finished(self, step: Any) -> None:
        key = self.example()
        if key in self.runs:
            self.runs[key][0].step(step)

    def example_finished(self, example: Any, record: dict[str, Any] | None, error: BaseException | None) -> None:
        trace, started = self.runs.pop(example.key)
        seconds = record["seconds"] if record is not None else time.monotonic() - started
        trace.summary(record, seconds, None if error is None else f"{type(error).__name__}: {error}")


def _checked_examples(module: Any, kind: str, data: str, split: str | None) -> list[dspy.Example]:
    """The examples of --data, once every one is found fit for `module`: else every line that is not (no JSON
    object, or inputs the program refuses) is listed, with its line number and id, and the command exits 2 before
    any LM call."""
    import loops.batch
    from loops.optimize import datasets

    form = _data_form(kind, data)
    lines: list[int] | None = None
    bad_lines: list[tuple[int, str]] = []
    if form == "builtin":
        examples = datasets.builtin(data.removeprefix("builtin:"))
    elif form == "mbpp":
        examples = datasets.mbpp(data, split or "all")
    else:
        rows = datasets.jsonl_rows(data, split=split)
        examples, lines, bad_lines = rows.examples, rows.lines, rows.bad_lines
    found = [(number, f"line {number}: {problem}") for number, problem in bad_lines]
    for bad in loops.batch.bad_examples(module, examples):
        where = f"line {lines[bad.position - 1]}" if lines is not None else f"example {bad.position}"
        named = f" (id {bad.id!r})" if bad.id is not None else ""
        found.append((lines[bad.position - 1] if lines is not None else bad.position,
                      f"{where}{named}: {'; '.join(bad.problems)}"))
    if not found:
        return examples
    if len(found) == 1:
        raise ConfigurationError(f"{data!r}, {found[0][1]} (nothing ran)")
    typer.echo(f"error: {len(found)} {'lines' if lines is not None else 'examples'} of {data!r} cannot run, so none "
               "ran (a line holds one example's inputs; the limits are the command's options):", err=True)
    for _, problem in sorted(found):
        typer.echo(f"  {problem}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _program(kind: str, program: Path | None, grant: ShellGrant, **arguments: Any) -> Any:
    """The program a dataset command runs (`load_program`), with the tools granted to it; an error in a DSL
    program is shown with its position and caret, exit 2, as `loops run` shows it (`dsl_errors_exit_usage`)."""
    with dsl_errors_exit_usage():
        return load_program(kind, program, tools=grant.tools(kind), **arguments)

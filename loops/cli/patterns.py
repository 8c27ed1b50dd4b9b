"""`loops refine`, `loops fix` and `loops direct`: one pattern each, with a live view of every role call."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from loops.cli.options import (
    CheckOption,
    HumanOption,
    Judge,
    ModelChoice,
    Policy,
    RunOptions,
    console,
    load_program,
    people,
    with_options,
)
from loops.cli.progress import report, run_with_progress

__all__ = ["direct", "fix", "refine"]

PlainTextOption = Annotated[bool | None, typer.Option("--plain-text/--no-plain-text", help=(
    "The writing roles answer with the text itself, at most 160 tokens (a small model's way), or inside a JSON "
    "object beside their reasoning [default: plain text on a small model (--profile), else not]"))]
ExamplesOption = Annotated[bool | None, typer.Option("--examples/--no-examples", help=(
    "Show the writing role worked examples of short texts that meet their requests "
    "(loops.patterns.prose.WORKED_DRAFTS) [default: on a small model (--profile), else no]"))]
ProgramOption = Annotated[Path | None, typer.Option(
    "--program", help="Run a saved program (loops optimize --out, or module.save): its demos, instructions and "
    "configuration; options given here override its own")]


@with_options
def refine(
    requirements: Annotated[str, typer.Argument(help="What to create")],
    choice: ModelChoice,
    run: RunOptions,
    context: Annotated[str, typer.Option(help="Background context for the creator")] = "",
    check: CheckOption = None,
    critic: Annotated[Judge | None, typer.Option(help=(
        "Who approves a draft once every --check holds: 'checks' (they alone: no critic call) or 'llm' (the "
        "critic) [default: checks on a small model (--profile) when --check is given, else llm]"))] = None,
    samples: Annotated[int | None, typer.Option(min=1, max=100, help=(
        "Candidate drafts per iteration, each checked for free; the first that holds every --check is taken "
        "[default: several on a small model (--profile) when --check is given, else 1]"))] = None,
    max_iterations: Annotated[int | None, typer.Option(min=0, max=1000, help="Revisions at most [default: 3]")] = None,
    plain_text: PlainTextOption = None,
    examples: ExamplesOption = None,
    program: ProgramOption = None,
    human: HumanOption = None,
) -> None:
    """Creator–Critic–Iterator: draft, then revise until the draft is approved: every --check holds, and the
    critic approves (or, with --critic checks, the checks alone).

    Unset, --plain-text and --examples follow the model (loops.patterns.prose.prose_defaults)."""
    from loops.vocabulary.checks import as_checks

    checks = as_checks(check) or None  # a bad spec: one line, exit 2, before any LM call
    judges = {"critic": critic.value if critic else None, **people("refine", human)}  # --human critic: a person
    module = load_program("refine", program, max_iterations=max_iterations, checks=checks, samples=samples,
                          plain_text=plain_text, examples=examples, **judges)
    result, seconds = run_with_progress(module, choice, run.trace, requirements=requirements, context=context,
                                        **run.call_options())
    report(result, seconds, f"final draft ({'approved' if result.success else 'not approved'})")


@with_options
def fix(
    task: Annotated[str, typer.Argument(help="What the code should do")],
    test_command: Annotated[str, typer.Option("--test-command", "-t", help="Command whose exit code 0 means done")],
    choice: ModelChoice,
    run: RunOptions,
    workspace: Annotated[Path | None, typer.Option(help="Directory to work in (default: a temporary one)")] = None,
    files: Annotated[
        list[str] | None, typer.Option("--files", "-f", help="Workspace files to show the executor")
    ] = None,
    target_file: Annotated[str | None, typer.Option(help=(
        "The file the executor writes [default: the module the tests import (from mul import ... -> mul.py), "
        "else solution.py]"))] = None,
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
    penalty_variants: Annotated[bool | None, typer.Option("--penalty-variants/--no-penalty-variants", help=(
        "Draw greedy candidates with other penalties than the embedded engine's repeat penalty (none; a light "
        "frequency penalty) and with a lower token cap [default: on the embedded model, else no]"))] = None,
    analyst: Annotated[bool | None, typer.Option("--analyst/--no-analyst", help=(
        "Ask the analyst LLM for the next instruction after failing tests [default: not on the embedded "
        "model, else yes]"))] = None,
    max_iterations: Annotated[int | None, typer.Option(min=0, max=1000, help=(
        "Execute-validate cycles at most [default: by model, loops.patterns.code.code_loop_defaults]"))] = None,
    program: ProgramOption = None,
    human: HumanOption = None,
) -> None:
    """Execute–Validate–Controller: write code, run the tests, repeat until they pass.

    Unset options follow the model (loops.patterns.code.code_loop_defaults)."""
    from loops.patterns.code.defaults import code_loop_defaults
    from loops.patterns.execute_validate import DEFAULT_TARGET_FILE, ExecuteValidateController
    from loops.tools.validators import ShellValidator

    ShellValidator(workspace=workspace).check(test_command)
    if target_file is None and program is None:  # said before the run: the tests' imports decide the file
        target_file = ExecuteValidateController.target_for(workspace, test_command)
        if target_file != DEFAULT_TARGET_FILE:
            console.print(f"the tests import {target_file.removesuffix('.py').replace('/', '.')}: writing "
                          f"{target_file} (--target-file chooses another)", highlight=False)
    lm = choice.resolve()
    if max_iterations is None and program is None:
        max_iterations = code_loop_defaults(lm).max_iterations
    module = load_program("fix", program, max_iterations=max_iterations, workspace=workspace,
                          policy=policy.value if policy else None, samples=samples, examples=examples,
                          penalty_variants=penalty_variants, analyst=analyst, target_file=target_file,
                          **people("fix", human))
    initial_input = {"prompt": task, "files": list(files or []), "target_file": target_file}
    result, seconds = run_with_progress(module, lm, run.trace, initial_input=initial_input,
                                        test_command=test_command, **run.call_options())
    if workspace is not None:
        console.print(f"files written to {workspace}")
    report(result, seconds, _tests_title(result), passed="the tests pass")


def _tests_title(result: Any) -> str:
    """The verdict on the code kept, with how many tests passed when the test run counted them (pytest's)."""
    from loops.signatures.results import ValidationResult
    from loops.tools.validators import parse_pytest_counts

    verdict = "tests pass" if result.success else "tests still fail"
    validation = (result.best_attempt or {}).get("validation") if isinstance(result.best_attempt, dict) else None
    if not isinstance(validation, ValidationResult):
        return verdict
    passed, failed = (validation.passed, validation.failed) if validation.passed is not None else (
        parse_pytest_counts(validation.stdout))
    return f"{verdict}: {passed} passed, {failed} failed" if passed is not None else (
        f"{verdict} (exit {validation.exit_code})")


@with_options
def direct(
    goal: Annotated[str, typer.Argument(help="What to achieve")],
    choice: ModelChoice,
    run: RunOptions,
    check: CheckOption = None,
    evaluator: Annotated[Judge | None, typer.Option(help=(
        "Who passes a result once every --check holds: 'checks' (they alone: no evaluator call) or 'llm' (the "
        "evaluator) [default: checks on a small model (--profile) when --check is given, else llm]"))] = None,
    max_iterations: Annotated[int | None, typer.Option(
        min=0, max=1000, help="Plan-execute-evaluate cycles at most [default: 3]")] = None,
    plain_text: PlainTextOption = None,
    examples: ExamplesOption = None,
    program: ProgramOption = None,
    human: HumanOption = None,
) -> None:
    """Director–Executor–Evaluator–Controller: plan, execute, evaluate, until the evaluator passes it (never while a
    --check fails).

    Unset, --plain-text and --examples (of the executor) follow the model (loops.patterns.prose.prose_defaults)."""
    from loops.vocabulary.checks import as_checks

    checks = as_checks(check) or None
    judges = {"evaluator": evaluator.value if evaluator else None, **people("direct", human)}
    module = load_program("direct", program, max_iterations=max_iterations, checks=checks, plain_text=plain_text,
                          examples=examples, **judges)
    result, seconds = run_with_progress(module, choice, run.trace, initial_input=goal, **run.call_options())
    report(result, seconds, "passed" if result.success else "not passed", passed="the evaluator passed")

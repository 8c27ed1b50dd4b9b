"""Execute–Validate–Controller: execute, validate programmatically (run the tests), decide.

Phase contracts (ADR `iterative-loop`), pinned here and nowhere else::

    executor(current_input, iteration)                                    -> TaskResult
    validator(test_command, iteration)                                    -> ValidationResult
    controller(executor_result, validation_result, current_input, iteration) -> ControllerDecision

Iterations are numbered from 1. Each phase may be the built-in one, any `dspy.Module` or a plain
callable (sync or async), which gets the contract's arguments positionally.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

import dspy

from loops.adapters import PlainTextAdapter
from loops.contracts import EXECUTE_VALIDATE, as_validation, decision, files_of, passed
from loops.errors import ConfigurationError, RoleFailed
from loops.module import LoopModule
from loops.python_code import (
    WORKED_EXAMPLES,
    align_names,
    extract_code,
    failure_digest,
    names_the_tests_miss,
    read_interface,
)
from loops.runtime import Program, Run, predictor_of
from loops.signatures.execute_validate import ExecutorSignature, IterationAnalystSignature
from loops.signatures.results import (
    CodeRequest,
    ControllerDecision,
    StructuredAnalysisResult,
    TaskResult,
    ValidationResult,
)
from loops.validators import ShellValidator, Workspace

Policy = Literal["repair", "fresh", "auto"]
POLICIES = ("repair", "fresh", "auto")
FRESH_TEMPERATURE = 0.7
PLAIN_TEXT = PlainTextAdapter()
_OUTPUT_TAIL_CHARS = 1500
ANALYST_MAX_TOKENS = 256  # an analysis and one instruction; a rambling model otherwise fills 512


def attempt_score(validation: Any) -> tuple[int, int, int]:
    """How good an attempt was: passing first, then tests passed, then fewer tests failed."""
    if not isinstance(validation, ValidationResult):
        return (int(passed(validation)), 0, 0)
    return (int(validation.ok), validation.passed or 0, -(validation.failed or 0))


def tests_controller(executor_result: TaskResult, validation_result: ValidationResult,
                     current_input: Any, iteration: int) -> ControllerDecision:
    """A controller without an LLM: stop when the tests pass, else retry with the failure digest.

    Like any controller it gets the executor's and the validator's values unchanged, so it reads a
    custom executor's value (a str of code, say) and a custom validator's bool or exit code too.
    The next input is a `CodeRequest` (the built-in executor's input)."""
    validation_result = as_validation(validation_result)
    if validation_result.ok:
        return ControllerDecision.stop(executor_result)
    code = _code_of(executor_result)
    digest = failure_digest(validation_result, code)
    return ControllerDecision.proceed(_next_request(current_input, validation_result, code, digest))


def _code_of(result: Any) -> str:
    content = result.content if isinstance(result, TaskResult) else result
    return content if isinstance(content, str) else ""


def _next_request(current_input: Any, validation: ValidationResult, code: str, digest: str,
                  advice: str = "") -> CodeRequest:
    """The next iteration's input: the same task, what failed (and any advice), the names the tests need."""
    feedback = f"{digest}\n{advice}" if advice and advice != digest else digest
    return CodeRequest.of(current_input).retry(feedback, names_the_tests_miss(validation, code))


ALL_EXAMPLES = tuple(range(len(WORKED_EXAMPLES)))
# A greedy candidate without the engine's repeat penalty passes in a short answer (under 400
# characters on MBPP's train split) or loops until the cap: a lower cap saves time and loses nothing.
PENALIZED_MAX_TOKENS = 256


@dataclass(frozen=True)
class Draw:
    """How one candidate of an iteration is drawn."""

    examples: tuple[int, ...] = ()  # the WORKED_EXAMPLES shown as demos, by index: each choice another prompt
    sampled: bool = False  # a distinct rollout at FRESH_TEMPERATURE, seeded by its number
    # Set (0.0 included), the request's own penalty replaces the embedded engine's repeat penalty: other decoding.
    frequency_penalty: float | None = None

    def call(self, rollout: int, *, fresh: bool = False, own_demos: bool = False
             ) -> tuple[dict[str, Any], tuple[dspy.Example, ...] | None]:
        """The executor call's config and demos for this draw as candidate number `rollout` of a run.
        `fresh` samples whatever the draw; an executor with `own_demos` (an optimized one) is shown
        those instead of the worked examples, which makes its prompt the plain one again, so the same
        request would get the same answer: only a sample can differ."""
        config: dict[str, Any] = {}
        demos = worked_examples(self.examples) if self.examples and not own_demos else None
        if self.frequency_penalty is not None:
            config.update(frequency_penalty=self.frequency_penalty, max_tokens=PENALIZED_MAX_TOKENS)
        if fresh or self.sampled or (self.examples and own_demos):
            # Seeded by its number, so a run repeats: the same task, the same candidates.
            config.update(temperature=FRESH_TEMPERATURE, rollout_id=rollout, seed=rollout)
        return config, demos


# The greedy candidates, in the order they are tried: each is another prompt (no, all or one of the
# worked examples) or other decoding (no repeat penalty, a light frequency penalty). On MBPP's train
# split each of the first five passes tasks those before it do not; the last two passed none new there
# and come last (benchmarks/README.md).
GREEDY_DRAWS = (
    Draw(),
    Draw(examples=ALL_EXAMPLES),
    Draw(frequency_penalty=0.0),
    Draw(examples=(2,)),
    Draw(frequency_penalty=0.2),
    Draw(examples=(0,)),
    Draw(examples=(1,)),
)


def draws(samples: int, examples: bool = False, unpenalized: bool = False) -> tuple[Draw, ...]:
    """The `samples` candidates of an iteration, in the order they are tried: first the greedy
    answers (`GREEDY_DRAWS`; those shown worked examples only with `examples`, those with a penalty of
    their own only with `unpenalized`), which a small model gets right more often than samples, then
    samples, every second one shown the examples."""
    greedy = [draw for draw in GREEDY_DRAWS
              if (examples or not draw.examples) and (unpenalized or draw.frequency_penalty is None)]
    sampled = [Draw(sampled=True, examples=ALL_EXAMPLES if examples and number % 2 == 1 else ())
               for number in range(samples)]
    return tuple((greedy + sampled)[:samples])


@functools.cache
def worked_examples(indices: tuple[int, ...]) -> tuple[dspy.Example, ...]:
    """The `WORKED_EXAMPLES` at `indices` as demos of the built-in executor (`Run.call` copies them into each call)."""
    return tuple(dspy.Example(task=task, target_file="solution.py", file_context="", code=code, notes="")
                 .with_inputs("task", "target_file", "file_context")
                 for task, code in (WORKED_EXAMPLES[index] for index in indices))


class ExecuteValidateController(LoopModule):
    """Execute a task, validate the result by running a test command, and let a controller decide.

    The built-in executor is an LLM that writes `target_file` into the run's workspace (a fresh
    temporary directory per run unless `workspace` is given). Before its first attempt the loop reads
    the workspace's tests (`test_*.py`, `*_test.py`, the files the test command names) for the names
    they import and call, and tells the executor (`read_interface`). The built-in validator runs the
    test command there (its timeout capped to the run's time left); the built-in controller stops
    when the tests pass and otherwise passes the failure digest on, with the analyst LLM's instruction
    when `analyst` is on. Only the LLM roles that may run are built: a custom controller, or
    `analyst=False`, means no `analyst`.

    `policy="repair"` shows the executor its earlier attempts; `policy="fresh"` forgets them and
    samples a new attempt at some temperature, guided only by the digest of what failed;
    `policy="auto"` repairs until the executor repeats an earlier attempt word for word, then
    samples a fresh one. `samples=n` draws n candidates per iteration (`draws`), each its own chain
    (role `executor.k`, with its own history): the policy's attempt, then the other greedy answers
    there are, then distinct rollouts at temperature 0.7, seeded by their number so that a rerun
    draws the same. Each new candidate is written and validated in turn; the iteration stops at the
    first that passes and goes on with the best. An iteration whose candidates were all tried before
    ends the run with `stop_reason="no_progress"` (under `auto`, only once fresh samples repeat too).
    With `examples=True` some greedy candidates (all the worked examples; then one of them each) and
    every second sample are shown worked examples (`WORKED_EXAMPLES`: small tasks and the code that
    passes their tests) as demos: another prompt, another answer as good as the first. An executor
    with demos of its own (an optimized one) is shown those instead, and its candidate is sampled.
    With `unpenalized=True` greedy candidates go without the embedded engine's repeat penalty (no
    penalty, then a light frequency penalty; at most `PENALIZED_MAX_TOKENS`, as the small model
    otherwise loops to its limit): other decoding, other answers, which pass other tasks.
    `GREEDY_DRAWS` is the order.

    Left unset, `policy`, `samples`, `examples`, `unpenalized` and `analyst` follow the model that
    runs (`loops.lm.code_loop_defaults`, decided at call time from the executor's or the analyst's own
    LM, else the context's): for the embedded model `auto`, several candidates, worked examples, the
    unpenalized candidates and no analyst (it misreads test output; the tests' digest serves it
    better); for any other model `repair`, one candidate and the analyst.

    The built-in executor's input is a str (the prompt) or a dict with a `prompt` str and optional
    `files`, `target_file`, `expected_names`, `feedback` (see `CodeRequest`); it answers in plain
    text (`executor_adapter=PlainTextAdapter()`), from which the code is extracted; pass
    `executor_adapter=None` to use the context's adapter instead.

    `final` is the controller's stop value, or the best attempt of the last iteration; `success`
    whether its validation passed; `best_attempt` the iteration, result and validation of the best
    attempt.
    """

    contracts = EXECUTE_VALIDATE

    def __init__(
        self,
        max_iterations: int | None = None,
        executor: Any = None,
        validator: Any = None,
        controller: Any = None,
        *,
        workspace: str | Path | Workspace | None = None,
        target_file: str = "solution.py",
        policy: Policy | None = None,
        samples: int | None = None,
        examples: bool | None = None,
        unpenalized: bool | None = None,
        analyst: bool | None = None,
        validator_timeout_s: float = 60.0,
        executor_adapter: dspy.Adapter | None = PLAIN_TEXT,
        **options: Any,
    ):
        super().__init__(max_iterations=max_iterations, **options)
        if policy is not None and policy not in POLICIES:
            raise ConfigurationError(f"policy must be 'repair', 'fresh', 'auto' or None (by model), got {policy!r}")
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
            raise ConfigurationError(f"samples must be an int >= 1 or None (by model), got {samples!r}")
        for name, choice in (("examples", examples), ("unpenalized", unpenalized), ("analyst", analyst)):
            if choice not in (None, True, False):
                raise ConfigurationError(f"{name} must be True, False or None (by model), got {choice!r}")
        if analyst and controller is not None:
            raise ConfigurationError("analyst=True is the built-in controller's option; a custom controller "
                                     "was given, so no analyst would run: drop one of them")
        if not isinstance(target_file, str) or not target_file.strip():
            raise ConfigurationError(f"target_file must be a relative path, got {target_file!r}")
        self.policy = policy
        self.samples = samples
        self.examples = examples
        self.unpenalized = unpenalized
        self.analyst_choice = analyst
        self.target_file = target_file
        self.workspace = workspace
        self.validator_timeout_s = validator_timeout_s
        self.executor_adapter = executor_adapter
        self._shell = ShellValidator(timeout_s=validator_timeout_s)  # checks commands; runs in each run's workspace
        self._builtin_executor = self._plug("executor", executor, lambda: dspy.Predict(ExecutorSignature))
        self._builtin_controller = controller is None
        self._has_analyst = False
        if controller is not None:
            self._plug("controller", controller, lambda: dspy.Predict(IterationAnalystSignature))
        elif analyst is not False:
            self._has_analyst = self._plug("analyst", None, lambda: dspy.Predict(IterationAnalystSignature))
        if validator is not None:
            self.contracts["validator"].check(validator)
        self.validator = validator

    def forward(self, initial_input: Any, test_command: str, **limits: Any) -> dspy.Prediction:
        self._check_inputs(initial_input, test_command)
        return self._forward(limits, initial_input=initial_input, test_command=test_command)

    async def aforward(self, initial_input: Any, test_command: str, **limits: Any) -> dspy.Prediction:
        self._check_inputs(initial_input, test_command)
        return await self._aforward(limits, initial_input=initial_input, test_command=test_command)

    def settings(self) -> dict[str, Any]:
        """The policy, samples per iteration, worked examples, unpenalized candidate and analyst use a
        run started now would have: the explicit choices, else `loops.lm.code_loop_defaults` of the
        model each role runs on."""
        from loops.lm import code_loop_defaults  # the one rule for what each kind of model is given

        defaults = code_loop_defaults(self._lm_of("executor"))
        analyst = self._has_analyst and (self.analyst_choice if self.analyst_choice is not None
                                         else code_loop_defaults(self._lm_of("analyst")).analyst)
        examples = self.examples if self.examples is not None else defaults.examples
        unpenalized = self.unpenalized if self.unpenalized is not None else defaults.unpenalized
        return {"policy": self.policy or defaults.policy, "samples": self.samples or defaults.samples,
                "examples": examples, "unpenalized": unpenalized, "analyst": analyst}

    def _lm_of(self, role: str) -> Any:
        predictor, _ = predictor_of(getattr(self, role, None))
        return predictor.lm if predictor is not None and predictor.lm is not None else dspy.settings.lm

    def _check_inputs(self, initial_input: Any, test_command: Any) -> None:
        """A developer's mistake raises here, before any LM call: a missing input, an executable that
        does not exist, a target file outside the workspace."""
        if initial_input is None:
            raise ConfigurationError("initial_input is None: give the task (a str, or a dict with a 'prompt' str)")
        if self._builtin_executor:
            target = CodeRequest.of(initial_input).target_file or self.target_file
            if isinstance(self.workspace, Workspace):
                self.workspace.resolve(target)
            elif PurePath(target).is_absolute() or os.path.normpath(target).startswith(".."):
                raise ConfigurationError(f"target file {target!r} is outside the workspace: give a path inside it")
        if self.validator is None:
            self._shell.check(test_command)

    @contextlib.contextmanager
    def _run_workspace(self) -> Iterator[Workspace]:
        if isinstance(self.workspace, Workspace):
            yield self.workspace
            return
        with Workspace(self.workspace) as workspace:
            yield workspace

    def _first_request(self, workspace: Workspace, initial_input: Any, test_command: str) -> CodeRequest:
        """The first request, with the interface the workspace's tests expect of the target file."""
        request = CodeRequest.of(initial_input)
        target = request.target_file or self.target_file
        interface = read_interface(workspace.path, test_command, target)
        if not interface:
            return request
        names = tuple(dict.fromkeys([*request.expected_names, *interface.names]))
        return request.model_copy(update={"interface": request.interface or interface.describe(target),
                                          "expected_names": names})

    def _loop(self, run: Run, initial_input: Any, test_command: str) -> Program:
        settings = self.settings()
        policy, samples = settings["policy"], settings["samples"] if self._builtin_executor else 1
        plan = draws(samples, settings["examples"], settings["unpenalized"])
        with self._run_workspace() as workspace:
            if self._builtin_executor:
                workspace.write(CodeRequest.of(initial_input).workspace_files)
            validator = self.validator or self._builtin_validator(run, workspace)
            current = self._first_request(workspace, initial_input, test_command) if self._builtin_executor \
                else initial_input
            tried: dict[str, Any] = {}  # the built-in executor's codes already validated, and their validation
            repeated = [False] * samples  # per chain: its last candidate repeated an earlier one
            while run.next_iteration():
                iteration = run.iteration
                fresh = [iteration > 1 and (policy == "fresh" or (policy == "auto" and again)) for again in repeated]
                best: tuple[Any, Any, Any, Any] | None = None  # (score, result, validation, prediction)
                written = None
                for chain in range(samples):
                    result, prediction = yield from self._execute(run, workspace, current, iteration, chain,
                                                                  samples, fresh[chain], plan[chain])
                    code = _code_of(result) if self._builtin_executor else None
                    repeated[chain] = code is not None and code in tried
                    if repeated[chain]:
                        validation = tried[code]
                        run.note("this code was tried before: not validated again")
                    else:
                        workspace.write(files_of(result, required=self.validator is None))
                        written = result
                        # Kept before it is validated: a validator that fails must not lose the attempt.
                        run.keep((-1, 0, 0), best_attempt={"iteration": iteration, "result": result,
                                                           "validation": None})
                        run.update(final=result, success=False)
                        validation = yield from run.call_phase("validator", validator, test_command=test_command,
                                                               iteration=iteration)
                        if code is not None:
                            tried[code] = validation
                        run.keep(attempt_score(validation),
                                 best_attempt={"iteration": iteration, "result": result, "validation": validation})
                    if best is None or attempt_score(validation) > best[0]:
                        best = (attempt_score(validation), result, validation, prediction)
                    if passed(validation):
                        break
                _, result, validation, prediction = best
                if prediction is not None:  # an optimizer's demo of the executor: the kept code, as tested
                    run.credit(prediction, code=_code_of(result))
                if written is not None and result is not written:
                    workspace.write(files_of(result, required=self.validator is None))  # the files of the best
                run.update(final=result, success=passed(validation))
                if self._builtin_executor and all(repeated[:chain + 1]) and not passed(validation) and all(
                        policy != "auto" or fresh[number] for number in range(chain + 1)):
                    run.warn(f"iteration {iteration}: every candidate repeated code already tried, and the next "
                             "would be drawn the same way")
                    return run.finish("no_progress")
                verdict = yield from self._decide(run, result, validation, current, test_command, iteration,
                                                  settings["analyst"])
                if verdict.should_stop:
                    return run.finish("stopped", final=verdict.value)
                current = verdict.value
            return run.finish("max_iterations")

    def _builtin_validator(self, run: Run, workspace: Workspace) -> Callable[[str, int], ValidationResult]:
        shell = ShellValidator(workspace=workspace, timeout_s=self.validator_timeout_s)

        def validator(test_command: str, iteration: int) -> ValidationResult:
            left = run.time_left()
            return shell.run(test_command, timeout_s=None if left is None else max(left, 0.1))

        return validator

    def _execute(self, run: Run, workspace: Workspace, current: Any, iteration: int, chain: int, samples: int,
                 fresh: bool, draw: Draw) -> Program:
        """One candidate: the executor's result, and the prediction it came from (None for a custom phase)."""
        if not self._builtin_executor:
            return (yield from run.call_phase("executor", current_input=current, iteration=iteration)), None
        request = CodeRequest.of(current)
        role = "executor" if chain == 0 else f"executor.{chain + 1}"
        if fresh:
            run.forget(role)
        executor, _ = predictor_of(self.executor)
        config, demos = draw.call((iteration - 1) * samples + chain + 1, fresh=fresh,
                                  own_demos=executor is not None and bool(executor.demos))
        target = request.target_file or self.target_file
        context = workspace.read(list(request.files))
        prediction = yield from run.call(
            role,
            config=config or None,
            adapter=self.executor_adapter,
            predictor=self.executor,
            demos=demos,
            task=request.task(),
            target_file=target,
            file_context="\n\n".join(f"# {path}\n{text}" for path, text in context.items()),
        )
        code, aliases = align_names(extract_code(prediction.code or ""), request.expected_names)
        status = "COMPLETE" if code.strip() else "FAILED"
        notes = {"notes": prediction.notes, **({"aliases": aliases} if aliases else {})}
        return TaskResult(status=status, content=code, files={target: code}, notes=notes), prediction

    def _decide(self, run: Run, result: Any, validation: Any, current: Any, test_command: str,
                iteration: int, ask_analyst: bool) -> Program:
        if not self._builtin_controller:
            raw = yield from run.call_phase("controller", executor_result=result, validation_result=validation,
                                            current_input=current, iteration=iteration)
            return decision(raw)
        validation = as_validation(validation)
        if validation.ok:  # the tests' verdict outranks any opinion
            return ControllerDecision.stop(result)
        code = result.content if isinstance(result, TaskResult) else result
        code = code if isinstance(code, str) else str(code)
        digest = failure_digest(validation, code)
        advice = ""
        # After the last attempt an analysis would go unread.
        if ask_analyst and run.iteration < run.budget.max_iterations:
            advice = yield from self._analyse(run, current, code, validation, digest, test_command, iteration)
        return ControllerDecision.proceed(_next_request(current, validation, code, digest, advice))

    def _analyse(self, run: Run, current: Any, code: str, validation: ValidationResult, digest: str,
                 test_command: str, iteration: int) -> Program:
        """The analyst's instruction for the next attempt, or "" when it has none worth passing on."""
        try:
            answer = yield from run.call(
                "analyst",
                config={"max_tokens": ANALYST_MAX_TOKENS},
                goal=CodeRequest.of(current).prompt,
                code=code,
                test_command=test_command,
                exit_code=validation.exit_code,
                test_output=f"{validation.stdout}\n{validation.stderr}"[-_OUTPUT_TAIL_CHARS:],
                digest=digest,
            )
        except RoleFailed as failure:
            run.warn(f"iteration {iteration}: {failure}; continuing with the failure digest instead")
            return ""
        if answer.success:
            # An analyst that contradicts the tests has misread them: its advice is not passed on either.
            run.warn(f"iteration {iteration}: the analyst said success but the tests exited "
                     f"{validation.exit_code}; the tests win and its advice is dropped")
            return ""
        analysis = StructuredAnalysisResult(success=False, analysis=answer.analysis or "",
                                            next_input=(answer.next_input or "").strip() or digest)
        return analysis.next_input

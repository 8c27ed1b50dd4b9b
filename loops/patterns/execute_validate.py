"""Execute–Validate–Controller: execute, validate programmatically (run the tests), decide.

Phase contracts (ADR `iterative-loop`, `loops.vocabulary.contracts.EXECUTE_VALIDATE`)::

    executor(current_input, iteration)                                    -> TaskResult
    validator(test_command, iteration)                                    -> ValidationResult
    controller(executor_result, validation_result, current_input, iteration) -> ControllerDecision

Iterations are numbered from 1. Each phase may be the built-in one, any `dspy.Module` or a plain
callable (sync or async), which gets the contract's arguments positionally. The code loop's own
helpers (reading code out of an answer, the candidate strategy, the test-based controller, the
defaults per model) live in `loops.patterns.code`; this module is the pattern.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from loops.errors import ConfigurationError, RoleFailed
from loops.patterns.code.controller import attempt_score, code_of
from loops.patterns.code.defaults import POLICIES, Policy, code_loop_defaults
from loops.patterns.code.draws import Draw, checked_draws, draws
from loops.patterns.code.python import (
    END_OF_FENCED_CODE,
    align_names,
    extract_code,
    failure_digest,
    module_the_tests_import,
    read_interface,
)
from loops.patterns.code.requests import code_request, next_request
from loops.running.module import LoopModule, Phase
from loops.running.roles import lm_of, predictor_of
from loops.running.runtime import RoleCalls, Run
from loops.signatures.execute_validate import ExecutorSignature, IterationAnalystSignature
from loops.signatures.results import ControllerDecision, StructuredAnalysisResult, TaskResult, ValidationResult
from loops.tools.validators import ShellValidator, Workspace, missing_tests, ran_no_tests, workspace_path
from loops.vocabulary.adapters import PlainTextAdapter
from loops.vocabulary.budget import Budget
from loops.vocabulary.contracts import (
    EXECUTE_VALIDATE,
    EXECUTE_VALIDATE_INPUTS,
    MISSING,
    as_validation,
    decision,
    files_of,
    outcome_passed,
)

__all__ = ["DEFAULT_TARGET_FILE", "ExecuteValidateController"]

PLAIN_TEXT = PlainTextAdapter()
DEFAULT_TARGET_FILE = "solution.py"  # where the code goes when neither the caller nor the tests' imports say
_OUTPUT_TAIL_CHARS = 1500
ANALYST_MAX_TOKENS = 256  # an analysis and one instruction; a rambling model otherwise fills 512


@dataclass(frozen=True)
class _Candidate:
    """One candidate of an iteration, validated: its score, the executor's result, the validation, and the
    prediction it came from (None for a custom executor)."""

    score: tuple[int, int, int]
    result: Any
    validation: Any
    prediction: Any


@dataclass
class _Chains:
    """A run's chains of candidates (one per draw of an iteration): how each is drawn, which codes were
    validated already, and what the current iteration drew. Run state, so it lives in the run's loop."""

    plan: tuple[Draw, ...]
    policy: Policy
    target_file: str = DEFAULT_TARGET_FILE  # where the built-in executor writes, unless an input names another
    tried: dict[str, Any] = field(default_factory=dict)  # the built-in executor's codes validated, and how
    repeated: list[bool] = field(default_factory=list)  # per chain: its last candidate repeated an earlier one
    fresh: list[bool] = field(default_factory=list)  # per chain: whether this iteration's candidate is sampled anew
    drawn: int = 0  # candidates drawn in this iteration
    written: Any = None  # the last result written to the workspace in this iteration

    def start_iteration(self, iteration: int) -> None:
        self.repeated = self.repeated or [False] * len(self.plan)
        self.fresh = [iteration > 1 and (self.policy == "fresh" or (self.policy == "auto" and again))
                      for again in self.repeated]
        self.drawn, self.written = 0, None

    def stalled(self, best: _Candidate) -> bool:
        """Whether the iteration failed with only code tried before, and the next would draw it the same way
        (under `auto`, only once every chain was sampled fresh)."""
        drawn = range(self.drawn)
        return (all(self.repeated[number] for number in drawn) and not outcome_passed(best.validation)
                and all(self.policy != "auto" or self.fresh[number] for number in drawn))


class ExecuteValidateController(LoopModule):
    """Execute a task, validate the result by running a test command, and let a controller decide.

    The built-in executor is an LLM that writes `target_file` into the run's workspace (a fresh
    temporary directory per run unless `workspace` is given); left unset, it is the module the tests
    import (`from mul import mul` -> `mul.py`; `target_for`), else `solution.py`. Before its first attempt
    the loop reads the workspace's tests (`test_*.py`, `*_test.py`, the files the test command names) for the names
    they import and call, and tells the executor (`read_interface`). The built-in validator runs the
    test command there (its timeout capped to the run's time left; a test command that finds no tests is a
    `ConfigurationError`); a validator of the caller's own needs no test command (it is given ""), so a call
    may leave `test_command` out. The built-in controller stops
    when the tests pass and otherwise passes the failure digest on, with the analyst LLM's instruction
    when `analyst` is on. Only the LLM roles that may run are built: a custom controller, or
    `analyst=False`, means no `analyst`.

    `policy="repair"` shows the executor its earlier attempts; `policy="fresh"` forgets them and
    samples a new attempt at some temperature, guided only by the digest of what failed;
    `policy="auto"` repairs until the executor repeats an earlier attempt word for word, then
    samples a fresh one. `samples=n` draws n candidates per iteration (`loops.patterns.code.draws`), each its own chain
    (role `executor.k`, with its own history): the policy's attempt, then the other greedy answers
    there are, then distinct rollouts at temperature 0.7, seeded by their number so that a rerun
    draws the same. Each new candidate is written and validated in turn; the iteration stops at the
    first that passes and goes on with the best. An iteration whose candidates were all tried before
    ends the run with `stop_reason="no_progress"` (under `auto`, only once fresh samples repeat too).
    With `examples=True` some greedy candidates (all the worked examples; then one of them each) and
    every second sample are shown worked examples (`loops.patterns.code.WORKED_EXAMPLES`: small tasks and the code that
    passes their tests) as demos: another prompt, another answer as good as the first. An executor
    with demos of its own (an optimized one) is shown those instead, and its candidate is sampled.
    With `penalty_variants=True` greedy candidates are decoded with other penalties than the embedded
    engine's repeat penalty (none, then a light frequency penalty; at most `PENALIZED_MAX_TOKENS`, as the
    small model otherwise loops to its limit): other decoding, other answers, which pass other tasks.
    `GREEDY_DRAWS` is the order (`loops.patterns.code.draws`). `draws=[Draw(...), ...]` gives the candidates
    themselves instead, in order (what the `draws` optimizer of `loops.optimize` chooses on train data;
    saved with the program), and replaces `samples`, `examples` and `penalty_variants`.

    Left unset, `policy`, `samples`, `examples`, `penalty_variants` and `analyst` follow the model that
    runs (`loops.patterns.code.code_loop_defaults`, decided at call time from the executor's or the analyst's own
    LM, else the context's): for the embedded model `auto`, several candidates, worked examples, the
    penalty variants and no analyst (it misreads test output; the tests' digest serves it better); for
    any other model `repair`, one candidate and the analyst.

    The built-in executor's input is a str (the prompt) or a dict with a `prompt` str and optional
    `files`, `target_file`, `expected_names`, `feedback` (see `CodeRequest`); it answers in plain
    text (`executor_adapter=PlainTextAdapter()`), from which the code is extracted, and its call stops at
    the code's closing fence (`loops.patterns.code.END_OF_FENCED_CODE`: only the first fence's code is read); pass
    `executor_adapter=None` to use the context's adapter instead.

    `final` is the controller's stop value, or the best attempt of the last iteration; `success`
    whether its validation passed; `best_attempt` the iteration, result and validation of the best
    attempt.
    """

    contracts = EXECUTE_VALIDATE
    input_contract = EXECUTE_VALIDATE_INPUTS

    def __init__(
        self,
        max_iterations: int | None = None,
        executor: Any = None,
        validator: Any = None,
        controller: Any = None,
        *,
        workspace: str | Path | Workspace | None = None,
        target_file: str | None = None,
        policy: Policy | None = None,
        samples: int | None = None,
        examples: bool | None = None,
        penalty_variants: bool | None = None,
        draws: Sequence[Draw] | None = None,
        analyst: bool | None = None,
        validator_timeout_s: float = 60.0,
        executor_adapter: dspy.Adapter | None = PLAIN_TEXT,
        **options: Any,
    ):
        super().__init__(max_iterations=max_iterations, **options)
        if policy is not None and policy not in POLICIES:
            raise ConfigurationError(f"policy must be one of {', '.join(map(repr, POLICIES))} or None (by model), "
                                     f"got {policy!r}")
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
            raise ConfigurationError(f"samples must be an int >= 1 or None (by model), got {samples!r}")
        for name, choice in (("examples", examples), ("penalty_variants", penalty_variants), ("analyst", analyst)):
            if choice not in (None, True, False):
                raise ConfigurationError(f"{name} must be True, False or None (by model), got {choice!r}")
        self.draws = checked_draws(draws, samples=samples, examples=examples, penalty_variants=penalty_variants)
        if analyst and controller is not None:
            raise ConfigurationError("analyst=True is the built-in controller's option; a custom controller "
                                     "was given, so no analyst would run: drop one of them")
        if target_file is not None and (not isinstance(target_file, str) or not target_file.strip()):
            raise ConfigurationError(f"target_file must be a relative path (or None: the module the tests import), "
                                     f"got {target_file!r}")
        self.policy = policy
        self.samples = samples
        self.examples = examples
        self.penalty_variants = penalty_variants
        self._analyst = analyst  # the option; `self.analyst` is the role's predictor, when there is one
        self.target_file = target_file
        self.workspace = workspace
        self.validator_timeout_s = validator_timeout_s
        self.executor_adapter = executor_adapter
        self._shell = ShellValidator(timeout_s=validator_timeout_s)  # checks commands; runs in each run's workspace
        self._set_phase("executor", executor, lambda: dspy.Predict(ExecutorSignature))
        if self.draws is not None and not self.builtin_executor:
            raise ConfigurationError("draws are the built-in executor's candidates; a custom executor was given, "
                                     "which draws one candidate: drop one of them")
        if controller is not None:
            self._set_phase("controller", controller, lambda: dspy.Predict(IterationAnalystSignature))
        else:  # the tests decide (`_tested`), with the analyst's advice unless analyst=False
            self._phases["controller"] = Phase("controller", builtin=True)
            if analyst is not False:
                self._set_phase("analyst", None, lambda: dspy.Predict(IterationAnalystSignature))
        if validator is not None:
            self.contracts["validator"].check(validator)
        self.validator = validator

    def forward(self, initial_input: Any = MISSING, test_command: Any = MISSING, **limits: Any) -> dspy.Prediction:
        inputs = {"initial_input": initial_input, "test_command": test_command}
        return self._forward(limits, **self._checked_inputs(limits, inputs))

    async def aforward(self, initial_input: Any = MISSING, test_command: Any = MISSING,
                       **limits: Any) -> dspy.Prediction:
        inputs = {"initial_input": initial_input, "test_command": test_command}
        return await self._aforward(limits, **self._checked_inputs(limits, inputs))

    def settings(self) -> dict[str, Any]:
        """The policy, samples per iteration, worked examples, penalty variants and analyst use a run
        started now would have: the explicit choices, else `loops.patterns.code.code_loop_defaults` of the model
        each role runs on."""
        defaults = code_loop_defaults(self._lm_of("executor"))
        analyst_lm = self._lm_of("analyst")
        analyst = "analyst" in self._llm_roles and (self._analyst if self._analyst is not None else (
            analyst_lm is not None and code_loop_defaults(analyst_lm).analyst))  # no LM at all: no analyst
        if self.draws is not None:
            return {"policy": self.policy or defaults.policy, "samples": len(self.draws),
                    "examples": any(draw.examples for draw in self.draws),
                    "penalty_variants": any(draw.frequency_penalty is not None for draw in self.draws),
                    "analyst": analyst, "draws": self.draws}
        examples = self.examples if self.examples is not None else defaults.examples
        penalty_variants = self.penalty_variants if self.penalty_variants is not None else defaults.penalty_variants
        return {"policy": self.policy or defaults.policy, "samples": self.samples or defaults.samples,
                "examples": examples, "penalty_variants": penalty_variants, "analyst": analyst,
                "draws": draws(self.samples or defaults.samples, examples, penalty_variants)}

    @property
    def builtin_executor(self) -> bool:
        """Whether the executor is the built-in LLM role, which draws the candidates (a custom one draws one)."""
        return self._phases["executor"].builtin

    def with_draws(self, draws: Sequence[Draw]) -> ExecuteValidateController:
        """A copy of this loop (its roles' demos, instructions and LMs included) that draws `draws`, in
        order, instead of what `samples`, `examples` and `penalty_variants` gave; saved with it."""
        chosen = checked_draws(draws)
        if not self.builtin_executor:
            raise ConfigurationError("draws are the built-in executor's candidates; this loop has a custom executor, "
                                     "which draws one candidate")
        program = self.deepcopy()
        program.draws, program.samples, program.examples, program.penalty_variants = chosen, None, None, None
        arguments = {name: value for name, value in self._arguments.items()
                     if name not in ("samples", "examples", "penalty_variants")}
        program._arguments = {**arguments, "draws": chosen}
        return program

    def _roles_that_may_run(self, budget: Budget) -> list[str]:
        # The analyst advises between iterations, so only when there are two, and when the settings ask it.
        analyst = budget.allows_iteration(2) and self.settings()["analyst"]
        return [role for role in super()._roles_that_may_run(budget) if role != "analyst" or analyst]

    def _lm_of(self, role: str) -> Any:
        return lm_of(getattr(self, role, None))

    def _builtin_phases(self) -> frozenset[str]:
        return frozenset(role for role, builtin in (("executor", self.builtin_executor),
                                                    ("validator", self.validator is None)) if builtin)

    def _check_inputs(self, initial_input: Any, test_command: Any) -> None:
        """Inputs that fit the contract, before any LM call: an executable that does not exist, a target file
        outside the workspace, a task dict the built-in executor cannot read. (A validator of the caller's own
        needs no test command: the contract gives it "".)"""
        if self.builtin_executor:
            target = code_request(initial_input).target_file or self.target_file or DEFAULT_TARGET_FILE
            try:
                workspace_path(self._workspace_root(), target)
            except ConfigurationError as error:
                raise ConfigurationError(f"the target file cannot be written: {error}") from None
        if self.validator is None:
            self._shell.check(test_command)

    def _workspace_root(self) -> Path | None:
        """The resolved directory the runs write into, None when each run gets a fresh temporary one."""
        if isinstance(self.workspace, Workspace):
            return self.workspace.path
        return None if self.workspace is None else Path(self.workspace).expanduser().resolve()

    @contextlib.contextmanager
    def _run_workspace(self) -> Iterator[Workspace]:
        if isinstance(self.workspace, Workspace):
            yield self.workspace
            return
        with Workspace(self.workspace) as workspace:
            yield workspace

    # The loop ----------------------------------------------------------------------------------------

    def _loop(self, run: Run, initial_input: Any, test_command: str) -> RoleCalls:
        settings = self.settings()
        executor = self._phases["executor"]
        # A custom executor draws one candidate: it is called as it is.
        chains = _Chains(executor.either(settings["draws"], (Draw(),)), settings["policy"])
        with self._run_workspace() as workspace:
            validator = self.validator or self._shell_validator(run, workspace)
            first_input = executor.either(self._first_request, _as_given)
            current = first_input(workspace, chains, initial_input, test_command)
            while run.next_iteration():
                best = yield from self._draw_candidates(run, workspace, chains, current, validator, test_command)
                self._settle_on(run, workspace, chains, best)
                if chains.stalled(best):
                    run.warn(f"iteration {run.iteration}: every candidate repeated code already tried, and the "
                             "next would be drawn the same way")
                    return run.finish("no_progress")
                verdict = yield from self._decide(run, best, current, test_command, settings["analyst"])
                if verdict.should_stop:
                    return run.finish("stopped", final=verdict.value)
                current = verdict.value
            return run.finish("max_iterations")

    def _first_request(self, workspace: Workspace, chains: _Chains, initial_input: Any, test_command: str) -> Any:
        """The built-in executor's first input: the request with the example's own files written into the
        workspace, its target file (the chains' too), and the interface the workspace's tests expect of it."""
        request = code_request(initial_input)
        workspace.write(request.workspace_files)
        target = request.target_file or self.target_file or self.target_for(workspace.path, test_command)
        workspace.resolve(target)  # the tests' module, as any target, stays inside the workspace
        unfound = None if self.validator is not None else missing_tests(test_command, workspace.path, [target])
        if unfound:
            raise ConfigurationError(f"the test command {test_command!r} would run no tests: {unfound}; fix the "
                                     "test command's files or the workspace (a test command must find tests)")
        request = request.model_copy(update={"target_file": target})
        chains.target_file = target
        interface = read_interface(workspace.path, test_command, target)
        if not interface:
            return request
        names = tuple(dict.fromkeys([*request.expected_names, *interface.names]))
        return request.model_copy(update={"interface": request.interface or interface.describe(target),
                                          "expected_names": names})

    @staticmethod
    def target_for(workspace: str | Path | None, test_command: str) -> str:
        """The file the built-in executor writes when neither the call nor the module names one: the module the
        tests import (`from mul import mul` -> `mul.py`, `loops.patterns.code.module_the_tests_import`), else
        `DEFAULT_TARGET_FILE`."""
        return module_the_tests_import(workspace, test_command) or DEFAULT_TARGET_FILE

    def _draw_candidates(self, run: Run, workspace: Workspace, chains: _Chains, current: Any,
                         validator: Any, test_command: str) -> RoleCalls:
        """Draw the iteration's candidates in turn, validating each new one, until one passes; the best."""
        chains.start_iteration(run.iteration)
        best: _Candidate | None = None
        for chain, draw in enumerate(chains.plan):
            result, prediction = yield from self._phases["executor"].turn(
                run, functools.partial(self._execute, run, workspace, current, chain, chains, draw),
                current_input=current, iteration=run.iteration)
            validation = yield from self._validate(run, workspace, chains, chain, result, validator, test_command)
            chains.drawn = chain + 1
            candidate = _Candidate(attempt_score(validation), result, validation, prediction)
            if best is None or candidate.score > best.score:
                best = candidate
            if outcome_passed(validation):
                break
        return best

    def _execute(self, run: Run, workspace: Workspace, current: Any, chain: int, chains: _Chains,
                 draw: Draw) -> RoleCalls:
        """The built-in executor's candidate: its result, and the prediction it came from."""
        iteration = run.iteration
        request = code_request(current)
        role = "executor" if chain == 0 else f"executor.{chain + 1}"
        if chains.fresh[chain]:
            run.forget(role)
        executor, _ = predictor_of(self.executor)
        config, demos = draw.executor_call((iteration - 1) * len(chains.plan) + chain + 1, fresh=chains.fresh[chain],
                                           own_demos=executor is not None and bool(executor.demos))
        if isinstance(self.executor_adapter, PlainTextAdapter):  # the answer is the code field alone
            config = {**config, "stop": END_OF_FENCED_CODE}
        target = request.target_file or chains.target_file
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

    def _validate(self, run: Run, workspace: Workspace, chains: _Chains, chain: int, result: Any, validator: Any,
                  test_command: str) -> RoleCalls:
        """The candidate's validation: its files written and tested, or the earlier test run of the same code."""
        code = self._phases["executor"].either(code_of(result), None)  # a custom executor's results are not compared
        chains.repeated[chain] = code is not None and code in chains.tried
        if chains.repeated[chain]:
            run.note("this code was tried before: not validated again")
            return chains.tried[code]
        workspace.write(files_of(result, required=self.validator is None))
        chains.written = result
        attempt = {"iteration": run.iteration, "result": result, "validation": None}
        # Offered before it is validated: a validator that fails must not lose the attempt.
        run.offer_candidate((-1, 0, 0), best_attempt=attempt)
        run.set_latest(final=result, success=False)
        validation = yield from run.call_phase("validator", validator, test_command=test_command,
                                               iteration=run.iteration)
        if code is not None:
            chains.tried[code] = validation
        run.offer_candidate(attempt_score(validation), best_attempt={**attempt, "validation": validation})
        return validation

    def _settle_on(self, run: Run, workspace: Workspace, chains: _Chains, best: _Candidate) -> None:
        """Go on with the iteration's best candidate: its files in the workspace, its code the executor's demo."""
        if best.prediction is not None:  # an optimizer's demo of the executor: the kept code, as tested
            run.credit(best.prediction, code=code_of(best.result))
        if chains.written is not None and best.result is not chains.written:
            workspace.write(files_of(best.result, required=self.validator is None))
        run.set_latest(final=best.result, success=outcome_passed(best.validation))

    def _shell_validator(self, run: Run, workspace: Workspace) -> Callable[[str, int], ValidationResult]:
        shell = ShellValidator(workspace=workspace, timeout_s=self.validator_timeout_s)

        def validator(test_command: str, iteration: int) -> ValidationResult:
            left = run.time_left()
            result = shell.run(test_command, timeout_s=None if left is None else max(left, 0.1))
            unfound = ran_no_tests(result)
            if unfound:  # no attempt can pass a test command that finds no tests: the command or the workspace is wrong
                raise ConfigurationError(f"the test command {test_command!r} ran no tests in {str(workspace.path)!r}: "
                                         f"{unfound}; fix the test command's files or options, or the workspace")
            if result.escaped:
                run.warn(f"iteration {iteration}: the test command started processes that left its process group; "
                         f"they were killed when it ended: {'; '.join(result.escaped)}")
            return result

        return validator

    def _decide(self, run: Run, best: _Candidate, current: Any, test_command: str, analyst: bool) -> RoleCalls:
        """The controller's decision on the iteration's best candidate: the tests' (`_tested`), or what the user's
        controller returns."""
        raw = yield from self._phases["controller"].call(
            run, lambda: self._tested(run, best, current, test_command, analyst), executor_result=best.result,
            validation_result=best.validation, current_input=current, iteration=run.iteration)
        return decision(raw)

    def _tested(self, run: Run, best: _Candidate, current: Any, test_command: str, analyst: bool) -> RoleCalls:
        """The built-in controller's decision: stop when the tests pass, else go on with the failure digest and,
        when `analyst` is on, the analyst's instruction."""
        result = best.result
        validation = as_validation(best.validation)
        if validation.ok:  # the tests' verdict outranks any opinion
            return ControllerDecision.stop(result)
        code = result.content if isinstance(result, TaskResult) else result
        code = code if isinstance(code, str) else str(code)
        digest = failure_digest(validation, code)
        advice = ""
        # After the last attempt an analysis would go unread.
        if analyst and run.budget.allows_iteration(run.iteration + 1):
            advice = yield from self._analyse(run, current, code, validation, digest, test_command)
        return ControllerDecision.proceed(next_request(current, validation, code, digest, advice))

    def _analyse(self, run: Run, current: Any, code: str, validation: ValidationResult, digest: str,
                 test_command: str) -> RoleCalls:
        """The analyst's instruction for the next attempt, or "" when it has none worth passing on."""
        try:
            answer = yield from run.call(
                "analyst",
                config={"max_tokens": ANALYST_MAX_TOKENS},
                goal=code_request(current).prompt,
                code=code,
                test_command=test_command,
                exit_code=validation.exit_code,
                test_output=f"{validation.stdout}\n{validation.stderr}"[-_OUTPUT_TAIL_CHARS:],
                digest=digest,
            )
        except RoleFailed as failure:
            run.warn(f"iteration {run.iteration}: {failure}; continuing with the failure digest instead")
            return ""
        if answer.success:
            # An analyst that contradicts the tests has misread them: its advice is not passed on either.
            run.warn(f"iteration {run.iteration}: the analyst said success but the tests exited "
                     f"{validation.exit_code}; the tests win and its advice is dropped")
            return ""
        analysis = StructuredAnalysisResult(success=False, analysis=answer.analysis or "",
                                            next_input=(answer.next_input or "").strip() or digest)
        return analysis.next_input


def _as_given(workspace: Workspace, chains: _Chains, initial_input: Any, test_command: str) -> Any:
    """A custom executor's first input: the call's, as it was given."""
    return initial_input

"""Execute–Validate–Controller: execute, validate programmatically (run the tests), decide.

Phase contracts (ADR `iterative-loop`), pinned here and nowhere else::

    executor(current_input, iteration)                                    -> TaskResult
    validator(test_command, iteration)                                    -> ValidationResult
    controller(executor_result, validation_result, current_input, iteration) -> ControllerDecision

Iterations are numbered from 1. Each phase may be the built-in one, any `dspy.Module` or a plain
callable (sync or async), which gets the contract's arguments positionally.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import dspy

from loops.adapters import PlainTextAdapter
from loops.errors import ConfigurationError, RoleFailed
from loops.module import LoopModule
from loops.runtime import Program, Run
from loops.validators import ShellValidator, Workspace
from signatures.execute_validate import ExecutorSignature, IterationAnalystSignature
from signatures.results import ControllerDecision, StructuredAnalysisResult, TaskResult, ValidationResult

Policy = Literal["repair", "fresh", "auto"]
FRESH_TEMPERATURE = 0.7
PLAIN_TEXT = PlainTextAdapter()
_DIGEST_CHARS = 800
_OUTPUT_TAIL_CHARS = 1500
ANALYST_MAX_TOKENS = 256  # an analysis and one instruction; a rambling model otherwise fills 512


# --- turning a model's answer into code, and a test run into an instruction ----------------------


def extract_code(text: str) -> str:
    """The code in an answer: inside the first fence if there is one, without leading prose, cut back
    to the longest prefix that parses (small models trail off mid-repetition), and without the
    example usage that would run on import."""
    fence = re.search(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", text, re.S)
    lines = (fence.group(1) if fence else text).splitlines()
    code_line = re.compile(r"\s*(def |class |import |from |@|async def |[A-Za-z_][\w.]*\s*=)")
    start = next((n for n, line in enumerate(lines) if code_line.match(line)), 0)
    lines = lines[start:]
    if not _parses(lines):
        # Try the prefixes ending before each top-level statement, longest first.
        cuts = [n for n, line in enumerate(lines) if n and line[:1].strip() and not line.startswith(("#", ")"))]
        lines = next((lines[:cut] for cut in reversed(cuts) if _parses(lines[:cut])), lines)
    return _without_examples("\n".join(lines)).strip() + "\n"


def _without_examples(code: str) -> str:
    """Drop top-level calls, asserts and `if __name__ == "__main__":` blocks.

    Small models end a file with `print(f(5))  # Example usage`, which runs when the tests import
    the file and, with a wrong call, hides a right function behind an import-time error.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    dropped: set[int] = set()
    for node in tree.body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        main_guard = isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
        if (isinstance(node, ast.Expr) and not docstring) or isinstance(node, ast.Assert) or main_guard:
            dropped.update(range(node.lineno - 1, node.end_lineno))
    return "\n".join(line for number, line in enumerate(code.splitlines()) if number not in dropped)


def _parses(lines: list[str]) -> bool:
    try:
        ast.parse("\n".join(lines))
    except SyntaxError:
        return False
    return True


def defined_functions(code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def names_the_tests_miss(validation: ValidationResult, code: str) -> list[str]:
    """Names the tests use (a NameError, a failed import) that the code never mentions."""
    output = f"{validation.stdout}\n{validation.stderr}"
    found = re.findall(r"NameError: name '(\w+)' is not defined|cannot import name '(\w+)'", output)
    names = dict.fromkeys(name for pair in found for name in pair if name)
    return [name for name in names if not re.search(rf"\b{re.escape(name)}\b", code)]


def align_names(code: str, names: list[str]) -> tuple[str, list[str]]:
    """Alias the file's one function to the names the tests call but the file does not define.

    A small model often writes the right function under its own name (tests call `Split`, it writes
    `odd_list`) and repeats that name however it is told. Returns the code and the aliases added.
    """
    defined = defined_functions(code)
    missing = [name for name in names if name not in defined]
    spare = [function for function in defined if function not in names]
    if not missing or len(spare) != 1:
        return code, []
    aliases = [f"{name} = {spare[0]}" for name in missing]
    return code.rstrip("\n") + "\n\n" + "\n".join(aliases) + "\n", aliases


def failure_digest(validation: ValidationResult, code: str = "") -> str:
    """A short, actionable account of why the validation failed, for the executor's next attempt."""
    if validation.ok:
        return ""
    output = f"{validation.stdout}\n{validation.stderr}"
    notes: list[str] = []
    if validation.timed_out:
        notes.append(f"The tests timed out ({validation.error}): look for an endless loop or recursion.")
    try:
        ast.parse(code)
    except SyntaxError as error:
        notes.append(f"Your code does not parse: {error.msg} at line {error.lineno}. Output only Python code.")
    defined = defined_functions(code)
    missed = names_the_tests_miss(validation, code)
    for name in missed:
        have = ", ".join(f"`{function}`" for function in defined) or "no function"
        notes.append(f"The tests call `{name}` but your file defines {have}: name the function `{name}`.")
    for name in dict.fromkeys(re.findall(r"NameError: name '(\w+)' is not defined", output)):
        if name not in missed:
            notes.append(f"NameError: your code uses `{name}` without defining or importing it.")
    if "RecursionError" in output:
        notes.append("RecursionError: your function calls itself without end; do not call it recursively.")
    for kind in ("TypeError", "AttributeError", "IndexError", "KeyError", "ValueError", "ModuleNotFoundError"):
        match = re.search(rf"^E?\s*({kind}: .*)$", output, re.M)
        if match:
            notes.append(f"{match.group(1).strip()}.")
    failing = list(dict.fromkeys(re.findall(r"^>\s+(assert .*)$", output, re.M)))[:3]
    notes.extend(f"This test fails: {assertion.strip()}" for assertion in failing)
    if not notes:
        tail = [line for line in output.splitlines() if line.strip()][-5:]
        notes.append(f"The tests failed (exit code {validation.exit_code}):\n" + "\n".join(tail))
    return "\n".join(notes)[:_DIGEST_CHARS]


# --- the structured input of an iteration ---------------------------------------------------------


def _as_request(current_input: Any) -> dict[str, Any]:
    """The built-in executor's view of an input: a prompt, optional feedback, context files."""
    if isinstance(current_input, str):
        return {"prompt": current_input}
    if isinstance(current_input, dict) and isinstance(current_input.get("prompt"), str):
        return current_input
    raise ConfigurationError(
        f"the built-in executor needs a str or a dict with a 'prompt' str, got {current_input!r:.200}; "
        "pass your own executor for other inputs"
    )


def _as_task_result(value: Any) -> TaskResult:
    if isinstance(value, TaskResult):
        return value
    if isinstance(value, dict) and "status" in value:
        return TaskResult.model_validate(value)
    return TaskResult(status="COMPLETE", content=value)


def _as_validation(value: Any) -> ValidationResult:
    if isinstance(value, ValidationResult):
        return value
    if isinstance(value, dict):
        return ValidationResult.model_validate(value)
    raise ConfigurationError(f"a validator must return a ValidationResult or a dict, got {value!r:.200}")


def attempt_score(validation: ValidationResult) -> tuple[int, int, int]:
    """How good an attempt was: passing first, then tests passed, then fewer tests failed."""
    return (int(validation.ok), validation.passed or 0, -(validation.failed or 0))


def tests_controller(executor_result: TaskResult, validation_result: ValidationResult,
                     current_input: Any, iteration: int) -> ControllerDecision:
    """A controller without an LLM: stop when the tests pass, else retry with the failure digest."""
    if validation_result.ok:
        return ControllerDecision.stop(executor_result)
    code = executor_result.content if isinstance(executor_result.content, str) else ""
    digest = failure_digest(validation_result, code)
    return ControllerDecision.proceed(_next_request(current_input, validation_result, code, digest))


def _next_request(current_input: Any, validation: ValidationResult, code: str, digest: str,
                  advice: str = "") -> dict[str, Any]:
    """The next iteration's input: the same task, what failed (and any advice), the names the tests need."""
    request = _as_request(current_input)
    expected = list(dict.fromkeys([*request.get("expected_names", []), *names_the_tests_miss(validation, code)]))
    feedback = f"{digest}\n{advice}" if advice and advice != digest else digest
    return {**request, "feedback": feedback, "expected_names": expected}


class ExecuteValidateController(LoopModule):
    """Execute a task, validate the result by running a test command, and let a controller decide.

    The built-in executor is an LLM that writes `target_file` into the run's workspace (a fresh
    temporary directory per run unless `workspace` is given); the built-in validator runs the test
    command there; the built-in controller stops when the tests pass and otherwise asks the analyst
    LLM for the next instruction, falling back to the failure digest if the analyst fails.

    `policy="repair"` shows the executor its earlier attempts; `policy="fresh"` forgets them and
    samples a new attempt at some temperature, guided only by the digest of what failed;
    `policy="auto"` repairs until the executor repeats an earlier attempt word for word, then
    samples a fresh one.
    The built-in executor answers in plain text (`executor_adapter=PlainTextAdapter()`), from which
    the code is extracted; pass `executor_adapter=None` to use the context's adapter instead.

    Returns `final` (the controller's stop value, or the last executor result), `success` (the last
    validation passed), `best_attempt` (iteration, result and validation of the best attempt),
    `iterations`, `stop_reason` (`stopped` when the controller stopped), `warnings`, `trace`.
    """

    result_defaults = {"final": None, "success": False, "best_attempt": None}

    def __init__(
        self,
        max_iterations: int = 3,
        executor: Callable[..., Any] | dspy.Module | None = None,
        validator: Callable[..., Any] | dspy.Module | None = None,
        controller: Callable[..., Any] | dspy.Module | None = None,
        *,
        workspace: str | Path | Workspace | None = None,
        target_file: str = "solution.py",
        policy: Policy = "repair",
        validator_timeout_s: float = 60.0,
        executor_adapter: dspy.Adapter | None = PLAIN_TEXT,
        **options: Any,
    ):
        super().__init__(max_iterations=max_iterations, **options)
        if policy not in ("repair", "fresh", "auto"):
            raise ConfigurationError(f"policy must be 'repair', 'fresh' or 'auto', got {policy!r}")
        self.policy = policy
        self.target_file = target_file
        self.workspace = workspace
        self.validator_timeout_s = validator_timeout_s
        self.executor_adapter = executor_adapter
        self.executor = executor if executor is not None else dspy.Predict(ExecutorSignature)
        self.validator = validator
        self.controller = controller
        self.analyst = dspy.Predict(IterationAnalystSignature)
        self._builtin_executor = executor is None

    def forward(self, initial_input: Any, test_command: str, **limits: Any) -> dspy.Prediction:
        return self._forward(limits, initial_input=initial_input, test_command=test_command)

    async def aforward(self, initial_input: Any, test_command: str, **limits: Any) -> dspy.Prediction:
        return await self._aforward(limits, initial_input=initial_input, test_command=test_command)

    @contextlib.contextmanager
    def _run_workspace(self) -> Iterator[Workspace]:
        if isinstance(self.workspace, Workspace):
            yield self.workspace
            return
        with Workspace(self.workspace) as workspace:
            yield workspace

    def _loop(self, run: Run, initial_input: Any, test_command: str) -> Program:
        with self._run_workspace() as workspace:
            validator = self.validator or ShellValidator(workspace=workspace, timeout_s=self.validator_timeout_s)
            current = initial_input
            codes: list[Any] = []
            while run.next_iteration():
                iteration = run.iteration
                result = yield from self._execute(run, workspace, current, iteration, self._fresh_attempt(codes))
                codes.append(result.content)
                workspace.write(result.files)
                validation = _as_validation((yield from run.call_phase(
                    "validator", validator, test_command=test_command, iteration=iteration)))
                run.keep(attempt_score(validation),
                         best_attempt={"iteration": iteration, "result": result, "validation": validation})
                run.update(final=result, success=validation.ok)
                decision = yield from self._decide(run, result, validation, current, test_command, iteration)
                if decision.should_stop:
                    return run.finish("stopped", final=decision.value)
                current = decision.value
            return run.finish("max_iterations")

    def _fresh_attempt(self, codes: list[Any]) -> bool:
        """Whether the next attempt starts over rather than repairing the last one."""
        if not codes or self.policy == "repair":
            return False
        return self.policy == "fresh" or codes[-1] in codes[:-1]

    def _execute(self, run: Run, workspace: Workspace, current: Any, iteration: int, fresh: bool) -> Program:
        if not self._builtin_executor:
            value = yield from run.call_phase("executor", current_input=current, iteration=iteration)
            return _as_task_result(value)
        request = _as_request(current)
        config = None
        if fresh:
            run.forget("executor")
            config = {"temperature": FRESH_TEMPERATURE, "rollout_id": iteration}
        task = request["prompt"]
        if request.get("feedback"):
            task += f"\n\nYour previous attempt failed:\n{request['feedback']}"
        target = request.get("target_file", self.target_file)
        context = workspace.read(request.get("files", []))
        prediction = yield from run.call(
            "executor",
            config=config,
            adapter=self.executor_adapter,
            task=task,
            target_file=target,
            file_context="\n\n".join(f"# {path}\n{text}" for path, text in context.items()),
        )
        code, aliases = align_names(extract_code(prediction.code or ""), request.get("expected_names", []))
        status = "COMPLETE" if code.strip() else "FAILED"
        notes = {"notes": prediction.notes, **({"aliases": aliases} if aliases else {})}
        return TaskResult(status=status, content=code, files={target: code}, notes=notes)

    def _decide(self, run: Run, result: TaskResult, validation: ValidationResult, current: Any,
                test_command: str, iteration: int) -> Program:
        if self.controller is not None:
            raw = yield from run.call_phase("controller", executor_result=result, validation_result=validation,
                                            current_input=current, iteration=iteration)
            return ControllerDecision.coerce(raw)
        if validation.ok:  # the tests' verdict outranks any opinion
            return ControllerDecision.stop(result)
        code = result.content if isinstance(result.content, str) else str(result.content)
        digest = failure_digest(validation, code)
        advice = ""
        if run.iteration < run.budget.max_iterations:  # after the last attempt an analysis would go unread
            advice = yield from self._analyse(run, current, code, validation, digest, test_command, iteration)
        return ControllerDecision.proceed(_next_request(current, validation, code, digest, advice))

    def _analyse(self, run: Run, current: Any, code: str, validation: ValidationResult, digest: str,
                 test_command: str, iteration: int) -> Program:
        """The analyst's instruction for the next attempt, or "" when it has none worth passing on."""
        try:
            answer = yield from run.call(
                "analyst",
                config={"max_tokens": ANALYST_MAX_TOKENS},
                goal=_as_request(current)["prompt"],
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

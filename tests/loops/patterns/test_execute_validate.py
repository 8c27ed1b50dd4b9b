"""Execute–Validate–Controller through its public surface: scripted LMs per role, real commands."""

import asyncio
import re
import shlex
import sys
import time

import dspy
import pytest

import loops
from loops import (
    CommandNotFoundError,
    ConfigurationError,
    ContractError,
    DecisionError,
    ExecuteValidateController,
    RetryPolicy,
    RoleFailed,
    Workspace,
)
from loops.patterns.code.python import (
    END_OF_FENCED_CODE,
    align_names,
    extract_code,
    failure_digest,
    names_the_tests_miss,
)
from loops.signatures.execute_validate import ExecutorSignature, IterationAnalystSignature
from loops.signatures.results import ControllerDecision, TaskResult, ValidationResult
from tests.processes import killed, unique_marker
from tests.scripted import Phase, calls, request_text, scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)
PYTEST = shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio"])
# The first request names the interface the workspace's tests expect (read before the first attempt).
ODD_TASK = ("write odd_list\n\n"
            "The tests call `odd_list(list)`: define exactly these names in solution.py, with these arguments.")
GOOD = "def odd_list(xs):\n    return [x for x in xs if x % 2]\n"
BAD = "def odd_list(xs):\n    return xs\n"
ODD_TEST = "from solution import odd_list\n\n\ndef test_odd():\n    assert odd_list([1, 2, 3]) == [1, 3]\n"


def py(code: str) -> str:
    """A command line running `code` with this interpreter (much faster than starting pytest)."""
    return shlex.join([sys.executable, "-c", code])


CHECK_ODD = py("from solution import odd_list; assert odd_list([1, 2, 3]) == [1, 3]")


def wrote(code):
    """The built-in executor's answer: plain text (its adapter is PlainTextAdapter)."""
    return code


def analysed(next_input="fix it", success=False, analysis="the tests failed"):
    return {"success": success, "analysis": analysis, "next_input": next_input}


def failed(passed=0, total=3):
    return ValidationResult(exit_code=1, stdout=f"{total - passed} failed", passed=passed,
                            failed=total - passed)


PASSED = ValidationResult(exit_code=0, stdout="all passed")


def loop_with(executor_script, analyst_script, **options):
    """A module whose LLM roles answer from their own scripted LMs (a role scripted None is not an LM)."""
    module = ExecuteValidateController(retry=NO_WAIT, **options)
    lms = {}
    for role, script in (("executor", executor_script), ("analyst", analyst_script)):
        if script is not None:
            lms[role] = scripted_lm(script)
            getattr(module, role).set_lm(lms[role])
    return module, lms


def call_counts(lms):
    return {role: calls(lm) for role, lm in lms.items()}


def workspace_with_tests(tmp_path, text=ODD_TEST):
    (tmp_path / "test_solution.py").write_text(text)
    return Workspace(tmp_path)


def rendered(signature, **inputs):
    messages = dspy.ChatAdapter().format(signature, demos=[], inputs=inputs)
    return "\n".join(str(message["content"]) for message in messages)


# --- stopping ------------------------------------------------------------------------------------


def test_tests_that_pass_at_once_stop_the_first_iteration(tmp_path):
    module, lms = loop_with([wrote(GOOD)], [], workspace=workspace_with_tests(tmp_path))

    result = module(initial_input="write odd_list", test_command=PYTEST)

    assert (result.stop_reason, result.iterations, result.success) == ("stopped", 1, True)
    assert result.final == TaskResult(status="COMPLETE", content=GOOD, files={"solution.py": GOOD},
                                      notes={"notes": ""})
    assert (tmp_path / "solution.py").read_text() == GOOD
    assert call_counts(lms) == {"executor": 1, "analyst": 0}
    assert [(step.role, step.iteration) for step in result.trace] == [("executor", 1), ("validator", 1)]
    assert result.best_attempt["iteration"] == 1 and result.best_attempt["validation"].ok
    assert result.warnings == []


def test_failing_tests_continue_with_the_analysts_instruction_then_stop(tmp_path):
    module, lms = loop_with([wrote(BAD), wrote(GOOD)], [analysed("filter out the even numbers")],
                            workspace=workspace_with_tests(tmp_path))

    result = module(initial_input="write odd_list", test_command=PYTEST)

    assert (result.stop_reason, result.iterations, result.success) == ("stopped", 2, True)
    assert result.final.content == GOOD
    assert (tmp_path / "solution.py").read_text() == GOOD
    assert call_counts(lms) == {"executor": 2, "analyst": 1}
    assert [step.role for step in result.trace] == [
        "executor", "validator", "analyst", "executor", "validator"]
    analyst_step = result.trace[2]
    assert analyst_step.inputs["exit_code"] == 1 and analyst_step.inputs["code"] == BAD
    assert "1 failed" in analyst_step.inputs["test_output"]
    second_task = result.trace[3].inputs["task"]
    assert second_task == (ODD_TASK + "\n\nYour previous attempt failed:\n"
                           "This test fails: assert odd_list([1, 2, 3]) == [1, 3]\n"
                           "filter out the even numbers")
    assert "filter out the even numbers" in request_text(lms["executor"].engine.requests[1])


BEST_OF = {0: None, 1: 1, 4: 2}


@pytest.mark.parametrize("max_iterations", [0, 1, 4])
def test_never_passing_stops_at_max_iterations_with_exact_calls(max_iterations):
    codes = [f"def odd_list(xs):\n    return {n}\n" for n in range(1, max_iterations + 1)]
    validator = Phase(*[failed(passed) for passed in [1, 2, 0, 1][:max_iterations]] or [failed()])
    module, lms = loop_with([wrote(code) for code in codes],
                            [analysed(f"hint {n}") for n in range(1, max_iterations + 1)],
                            validator=validator, max_iterations=max_iterations)

    result = module(initial_input="write odd_list", test_command="run the tests")

    # The analyst is not asked after the last attempt: no attempt would follow its advice.
    assert call_counts(lms) == {"executor": max_iterations, "analyst": max(max_iterations - 1, 0)}
    assert validator.args == [("run the tests", n) for n in range(1, max_iterations + 1)]
    assert (result.iterations, result.stop_reason) == (max_iterations, "max_iterations")
    assert result.success is False
    assert any(f"max_iterations={max_iterations}" in warning for warning in result.warnings)
    if max_iterations == 0:
        assert (result.final, result.best_attempt, result.trace) == (None, None, [])
        return
    assert result.final.content == codes[-1]  # the LAST attempt...
    best = result.best_attempt  # ...while the best attempt is kept apart
    assert best["iteration"] == BEST_OF[max_iterations]
    assert best["result"].content == codes[best["iteration"] - 1]
    assert best["validation"].passed == [1, 2][best["iteration"] - 1]


def test_the_best_attempt_is_not_the_last_one_at_max_iterations():
    module, _ = loop_with([wrote("x = 1\n"), wrote("x = 2\n"), wrote("x = 3\n")], [analysed()] * 3,
                          validator=Phase(failed(1), failed(2), failed(0)), max_iterations=3)

    result = module(initial_input="task", test_command="check")

    assert result.final.content == "x = 3\n"
    assert (result.best_attempt["iteration"], result.best_attempt["result"].content) == (2, "x = 2\n")


# --- what the controller decides -----------------------------------------------------------------


def test_the_tests_exit_code_outranks_an_analyst_that_claims_success(tmp_path):
    module, lms = loop_with([wrote(BAD), wrote(GOOD)], [analysed(next_input="7.92083", success=True)],
                            workspace=Workspace(tmp_path))

    result = module(initial_input="write odd_list", test_command=CHECK_ODD)

    assert (result.stop_reason, result.iterations, result.success) == ("stopped", 2, True)
    assert call_counts(lms) == {"executor": 2, "analyst": 1}
    assert "7.92083" not in request_text(lms["executor"].engine.requests[1])  # its advice is dropped too
    assert lms["analyst"].engine.requests[0].config.max_tokens == 256
    assert any("analyst said success but the tests exited 1; the tests win" in warning
               for warning in result.warnings)
    digest = result.trace[2].inputs["digest"]
    assert "exit code 1" in digest and "AssertionError" in digest
    assert result.trace[3].inputs["task"] == f"{ODD_TASK}\n\nYour previous attempt failed:\n{digest}"


def test_an_unparseable_analyst_answer_falls_back_to_the_failure_digest(tmp_path):
    # ChatAdapter falls back to JSONAdapter and the runtime asks once more: four garbage answers.
    module, lms = loop_with([wrote(BAD), wrote(GOOD)], ["no idea"] * 4, workspace=Workspace(tmp_path))

    result = module(initial_input="write odd_list", test_command=CHECK_ODD)

    assert (result.stop_reason, result.iterations, result.success) == ("stopped", 2, True)
    assert call_counts(lms) == {"executor": 2, "analyst": 4}
    assert result.error is None
    assert "analyst: answer could not be parsed; asked again" in result.warnings
    assert any("iteration 1: analyst failed after 2 attempt(s): its answer could not be parsed; "
               "continuing with the failure digest instead" in warning for warning in result.warnings)
    analyst_step = result.trace[2]
    assert analyst_step.role == "analyst" and analyst_step.outputs is None and analyst_step.error
    assert result.trace[3].inputs["task"] == (
        f"{ODD_TASK}\n\nYour previous attempt failed:\n{analyst_step.inputs['digest']}")


def test_tests_controller_retries_with_the_timeout_digest_then_stops(tmp_path):
    module, lms = loop_with([wrote("while True:\n    pass\n"), wrote(GOOD)], None,
                            controller=loops.tests_controller, workspace=Workspace(tmp_path),
                            validator_timeout_s=0.5)

    result = module(initial_input="write odd_list", test_command=CHECK_ODD)

    assert (result.stop_reason, result.iterations, result.success) == ("stopped", 2, True)
    assert calls(lms["executor"]) == 2
    assert result.final.content == GOOD  # loops.tests_controller stops with the executor's result
    first_validation = result.trace[1].outputs["result"]
    assert first_validation.timed_out and first_validation.exit_code == -9
    assert result.trace[3].inputs["task"] == (
        ODD_TASK + "\n\nYour previous attempt failed:\n"
        "The tests timed out (timed out after 0.5s): look for an endless loop or recursion.")


def test_tests_controller_as_a_phase_stops_when_the_tests_pass():
    attempt = TaskResult(status="COMPLETE", content=GOOD)

    decision = loops.tests_controller(attempt, PASSED, "write odd_list", 1)

    assert decision == ControllerDecision.stop(attempt)


@pytest.mark.parametrize("malformed", [("maybe", 1), 42, "stop", None])
def test_a_malformed_controller_decision_raises_decision_error(malformed):
    # A controller that returns no decision is a developer's bug: it raises, it is not a graceful stop.
    controller = Phase(malformed)
    module, lms = loop_with([wrote(GOOD)], None, validator=Phase(failed(1)), controller=controller)

    with pytest.raises(DecisionError, match=re.escape(f"controller returned {malformed!r}, which is not a decision")):
        module(initial_input="task", test_command="check")

    assert (controller.calls, calls(lms["executor"])) == (1, 1)


def test_a_malformed_controller_decision_raises_when_strict_too():
    module, _ = loop_with([wrote(GOOD)], None, validator=Phase(failed(1)), controller=Phase(("maybe", 1)),
                          strict=True)

    with pytest.raises(DecisionError, match=r"\('maybe', 1\)"):
        module(initial_input="task", test_command="check")


@pytest.mark.parametrize("decision", [("stop", "done"), ["stop", "done"], ControllerDecision.stop("done")])
def test_a_decision_may_be_a_pair_a_list_or_a_controller_decision(decision):
    module = ExecuteValidateController(executor=Phase("x = 1"), validator=Phase(True), controller=Phase(decision))

    result = module(initial_input="task", test_command="check")

    assert (result.final, result.success, result.stop_reason, result.iterations) == ("done", True, "stopped", 1)


# --- failures in a phase -------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["executor", "validator", "controller"])
def test_an_exception_in_any_phase_ends_the_loop_with_the_earlier_work_kept(failing):
    boom = ValueError(f"{failing} broke")
    answers = {
        "executor": ["attempt 1", "attempt 2"],
        "validator": [failed(passed=2), failed(passed=0)],
        "controller": [("continue", "try again"), ("continue", "once more")],
    }
    answers[failing][1] = boom
    phases = {role: Phase(*answer) for role, answer in answers.items()}
    module = ExecuteValidateController(max_iterations=3, retry=NO_WAIT, **phases)

    result = module(initial_input="task", test_command="check")

    assert result.stop_reason == "error"
    assert isinstance(result.error, RoleFailed) and result.error.role == failing
    assert result.error.__cause__ is boom
    assert f"{failing} failed after 1 attempt(s): ValueError: {failing} broke" in str(result.error)
    assert result.iterations == 2
    order = ["executor", "validator", "controller"]
    expected = [(role, 1) for role in order] + [(role, 2) for role in order[: order.index(failing) + 1]]
    assert [(step.role, step.iteration) for step in result.trace] == expected
    assert result.trace[-1].error == f"ValueError: {failing} broke"
    # A custom executor's value is kept as it is (no TaskResult wrapped around it).
    assert (result.best_attempt["iteration"], result.best_attempt["result"]) == (1, "attempt 1")
    # Once the second attempt exists it is `final`, even when its validator crashed.
    assert result.final == ("attempt 1" if failing == "executor" else "attempt 2")
    assert result.success is False
    assert [phase.calls for phase in phases.values()] == [
        2, 1 + (failing != "executor"), 1 + (failing == "controller")]
    assert phases["executor"].args[1] == ("try again", 2)


@pytest.mark.parametrize("crash", ["phase", "builtin"])
def test_a_validator_that_crashes_keeps_the_attempt_it_was_validating(crash, tmp_path, monkeypatch):
    # Today's lost work: the validator fails on the first attempt, and nothing may be lost.
    if crash == "phase":
        module, lms = loop_with([wrote(GOOD)], None, validator=Phase(OSError("disk full")),
                                controller=loops.tests_controller)
    else:
        module, lms = loop_with([wrote(GOOD)], None, controller=loops.tests_controller, workspace=Workspace(tmp_path))

        def broken(self, command, timeout_s=None):
            raise OSError("disk full")

        monkeypatch.setattr(loops.ShellValidator, "run", broken)

    result = module(initial_input="write odd_list", test_command=CHECK_ODD)

    assert (result.stop_reason, result.iterations, result.success) == ("error", 1, False)
    assert result.final.content == GOOD
    assert result.best_attempt == {"iteration": 1, "result": result.final, "validation": None}
    assert isinstance(result.error, RoleFailed) and result.error.role == "validator"
    assert "disk full" in str(result.error)
    assert calls(lms["executor"]) == 1


def test_an_exception_in_a_phase_raises_when_strict():
    boom = RuntimeError("validator crashed")
    module = ExecuteValidateController(executor=Phase("x = 1"), validator=Phase(boom),
                                       controller=loops.tests_controller, strict=True, retry=NO_WAIT)

    with pytest.raises(RoleFailed) as raised:
        module(initial_input="task", test_command="check")

    assert raised.value.__cause__ is boom
    prediction = raised.value.prediction
    assert (prediction.stop_reason, prediction.final) == ("error", "x = 1")  # the attempt is kept
    [warning] = prediction.warnings  # where the phase raised, in the caller's code (here, the test's Phase)
    assert warning.startswith("stopped by an error: RoleFailed: validator failed after 1 attempt(s): "
                              "RuntimeError: validator crashed (at ")
    assert warning.endswith("scripted.py:" f"{Phase.__call__.__code__.co_firstlineno + 4} in __call__: raise answer)")


# --- phases --------------------------------------------------------------------------------------


def test_python_phases_get_the_contracts_arguments_positionally_whatever_their_names(tmp_path):
    seen = []

    async def make(job, round_no):
        seen.append(("executor", job, round_no))
        return {"solution.py": GOOD if round_no == 2 else BAD}  # a {path: text} dict of files

    def check(cmd, round_no):
        seen.append(("validator", cmd, round_no))
        return ValidationResult(exit_code=0 if (tmp_path / "solution.py").read_text() == GOOD else 1)

    def decide(done, verdict, job, round_no):
        seen.append(("controller", done["solution.py"] == GOOD, verdict.exit_code, job, round_no))
        return ("stop", "shipped") if verdict.ok else ["continue", f"{job}!"]

    module = ExecuteValidateController(executor=make, validator=check, controller=decide,
                                       workspace=Workspace(tmp_path), retry=NO_WAIT)

    result = module(initial_input="go", test_command="cmd")

    assert seen == [
        ("executor", "go", 1), ("validator", "cmd", 1), ("controller", False, 1, "go", 1),
        ("executor", "go!", 2), ("validator", "cmd", 2), ("controller", True, 0, "go!", 2),
    ]
    assert (result.final, result.success, result.stop_reason) == ("shipped", True, "stopped")
    assert result.iterations == 2
    assert result.best_attempt["result"] == {"solution.py": GOOD}


async def test_async_phases_are_awaited_by_aforward():
    async def make(job, round_no):
        await asyncio.sleep(0)
        return f"{job if isinstance(job, str) else job.prompt} #{round_no}"

    async def check(cmd, round_no):
        return ValidationResult(exit_code=0 if round_no == 2 else 1)

    module = ExecuteValidateController(executor=make, validator=check, controller=loops.tests_controller,
                                       retry=NO_WAIT)

    result = await module.acall(initial_input="go", test_command="cmd")

    assert (result.stop_reason, result.iterations, result.success) == ("stopped", 2, True)
    assert result.final == "go #2"  # the executor's own value, unchanged
    feedback = result.trace[3].inputs["current_input"].feedback  # the built-in controllers' CodeRequest
    assert feedback.startswith("The tests failed (exit code 1)")


@pytest.mark.parametrize(("options", "inputs", "error", "message"), [
    ({}, {"initial_input": None}, ConfigurationError,
     "initial_input must be a task: a non-empty str, or a dict with a 'prompt' str, got None"),
    ({}, {"initial_input": 42}, ConfigurationError, "initial_input must be a task: a non-empty str, or a dict"),
    ({"target_file": "../outside.py"}, {}, ConfigurationError,
     "the target file cannot be written: workspace file path '../outside.py' escapes the workspace root"),
    ({}, {"initial_input": {"prompt": "t", "target_file": "/etc/solution.py"}}, ConfigurationError,
     "workspace file path '/etc/solution.py' is absolute"),
    ({"target_file": "pkg/"}, {}, ConfigurationError, "'pkg/' ends with a separator, so it names a directory"),
    ({}, {"test_command": 123}, ConfigurationError, "test_command must be a command line (a non-empty str), got 123"),
    ({}, {"test_command": "true\x00"}, ConfigurationError, "holds a NUL character (\\x00), which no command line"),
    ({}, {"test_command": "no-such-executable-xyz --run"}, CommandNotFoundError,
     "executable 'no-such-executable-xyz' not found on PATH"),
    ({}, {"test_command": f"{PYTEST} test_nope.py"}, ConfigurationError,
     "would run no tests: it names 'test_nope.py', which is not in"),
    ({}, {"test_command": PYTEST}, ConfigurationError, "would run no tests: the workspace"),
])
def test_a_developers_mistake_raises_before_any_lm_call(tmp_path, options, inputs, error, message):
    module, lms = loop_with([wrote(GOOD)], [analysed()], **options)

    with pytest.raises(error, match=re.escape(message)):
        module(**{"initial_input": "write odd_list", "test_command": CHECK_ODD, **inputs})

    assert call_counts(lms) == {"executor": 0, "analyst": 0}


def test_a_validator_of_ones_own_needs_no_test_command(tmp_path):
    validator = Phase(False, True)
    module, lms = loop_with([wrote(BAD), wrote(GOOD)], None, workspace=tmp_path, validator=validator, analyst=False,
                            samples=1)

    result = module(initial_input="write odd_list")

    assert (result.success, result.stop_reason, result.iterations) == (True, "stopped", 2)
    assert validator.args == [("", 1), ("", 2)]
    assert calls(lms["executor"]) == 2


def test_the_built_in_validator_needs_a_test_command():
    module, lms = loop_with([wrote(GOOD)], [analysed()])

    with pytest.raises(ConfigurationError, match=r"no 'test_command' \(the command whose exit code 0 means done, "
                       r"e.g. 'python -m pytest -q'\): it is required by the built-in validator \(a validator= of "
                       r"your own needs none\)"):
        module(initial_input="write odd_list")

    assert call_counts(lms) == {"executor": 0, "analyst": 0}


def test_a_target_file_outside_a_given_workspace_raises_before_any_lm_call(tmp_path):
    module, lms = loop_with([wrote(GOOD)], [analysed()], workspace=Workspace(tmp_path / "ws"),
                            target_file="../escaped.py")

    with pytest.raises(ConfigurationError):
        module(initial_input="write odd_list", test_command=CHECK_ODD)

    assert call_counts(lms) == {"executor": 0, "analyst": 0}
    assert not (tmp_path / "escaped.py").exists()


def test_a_target_file_reached_through_a_symlink_out_of_a_path_workspace_raises_before_any_lm_call(tmp_path):
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "link").symlink_to(outside)
    module, lms = loop_with([wrote(GOOD)], [analysed()], workspace=str(workspace), target_file="link/solution.py")

    with pytest.raises(ConfigurationError,
                       match=r"'link/solution.py' escapes the workspace root .* \(through a symlink\)"):
        module(initial_input="write odd_list", test_command=CHECK_ODD)

    assert call_counts(lms) == {"executor": 0, "analyst": 0}
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("workspace", ["a path", "a temporary one"])
def test_a_target_file_whose_name_starts_with_two_dots_is_a_file_inside_the_workspace(tmp_path, workspace):
    module, lms = loop_with([wrote(GOOD)], [analysed()], workspace=str(tmp_path) if workspace == "a path" else None,
                            target_file="..sol.py")

    result = module(initial_input="write odd_list",
                    test_command=py("import runpy; assert runpy.run_path('..sol.py')['odd_list']([1, 2, 3]) == [1, 3]"))

    assert result.success and call_counts(lms)["executor"] == 1
    if workspace == "a path":
        assert (tmp_path / "..sol.py").read_text() == GOOD


def test_a_test_command_that_leaves_a_process_running_outside_its_group_is_killed_with_a_warning(tmp_path):
    marker = unique_marker()
    command = shlex.join(["sh", "-c", f"setsid sleep {marker} >/dev/null 2>&1 & sleep 0.2; {CHECK_ODD}"])
    module, lms = loop_with([wrote(GOOD)], [analysed()], workspace=str(tmp_path))

    try:
        result = module(initial_input="write odd_list", test_command=command)
    finally:
        survivors = killed(marker)

    assert result.success
    assert any("left its process group; they were killed when it ended: pid " in warning and marker in warning
               for warning in result.warnings), result.warnings
    assert survivors == []


def test_a_custom_executor_without_files_is_rejected_when_the_builtin_validator_needs_them(tmp_path):
    module = ExecuteValidateController(executor=Phase("def f(): pass"), controller=loops.tests_controller,
                                       workspace=Workspace(tmp_path))

    with pytest.raises(ContractError, match=r"return a TaskResult\(status=..., files=\{path: text\}\) or a "
                                            r"\{path: text\} dict, or pass your own validator"):
        module(initial_input="task", test_command=CHECK_ODD)


def test_a_custom_executors_files_dict_is_written_and_tested_by_the_builtin_validator(tmp_path):
    module = ExecuteValidateController(executor=Phase({"solution.py": GOOD}), controller=loops.tests_controller,
                                       workspace=Workspace(tmp_path))

    result = module(initial_input="task", test_command=CHECK_ODD)

    assert (result.stop_reason, result.success, result.final) == ("stopped", True, {"solution.py": GOOD})
    assert (tmp_path / "solution.py").read_text() == GOOD
    assert result.trace[1].outputs["result"].ok


def test_a_custom_validators_bool_reaches_a_custom_controller_as_a_bool():
    controller = Phase(("continue", "again"), ("stop", "done"))
    module = ExecuteValidateController(executor=Phase("attempt"), validator=Phase(False, True), controller=controller)

    result = module(initial_input="task", test_command="check")

    assert controller.args == [("attempt", False, "task", 1), ("attempt", True, "again", 2)]
    assert (result.final, result.success, result.iterations) == ("done", True, 2)
    assert result.best_attempt == {"iteration": 2, "result": "attempt", "validation": True}


@pytest.mark.parametrize(("validation", "ok"), [
    (True, True), (False, False), (0, True), (2, False), ({"exit_code": 0, "stdout": "fine"}, True),
    ({"exit_code": 1}, False), (PASSED, True),
])
def test_the_builtin_controller_reads_a_custom_validators_bool_int_or_dict(validation, ok):
    module, lms = loop_with(None, [analysed("try harder")], executor=Phase(TaskResult(status="COMPLETE", content="x")),
                            validator=Phase(validation), max_iterations=2)

    result = module(initial_input="task", test_command="check")

    assert result.success is ok
    assert (result.stop_reason, result.iterations) == (("stopped", 1) if ok else ("max_iterations", 2))
    assert calls(lms["analyst"]) == (0 if ok else 1)


def test_a_custom_validators_unreadable_value_raises_for_the_builtin_controller():
    module, lms = loop_with(None, [], executor=Phase("x"), validator=Phase("passed?"))

    with pytest.raises(ContractError, match="the validator returned 'passed\\?'; a ValidationResult, a bool"):
        module(initial_input="task", test_command="check")

    assert calls(lms["analyst"]) == 0


def test_only_the_llm_roles_that_run_are_built():
    assert [name for name, _ in ExecuteValidateController().named_predictors()] == ["executor", "analyst"]
    custom = ExecuteValidateController(controller=loops.tests_controller)
    assert [name for name, _ in custom.named_predictors()] == ["executor"]
    assert not hasattr(custom, "analyst")
    assert [name for name, _ in ExecuteValidateController(executor=Phase("x")).named_predictors()] == ["analyst"]


@pytest.mark.parametrize("max_iterations", [1, 3])
def test_a_custom_executor_runs_with_no_lm_at_all(tmp_path, max_iterations):
    # The analyst follows the model, and there is none: it does not run, so it needs none (no analyst=False).
    module = ExecuteValidateController(max_iterations=max_iterations, executor=Phase({"solution.py": BAD},
                                                                                       {"solution.py": GOOD}),
                                       workspace=Workspace(tmp_path))

    with dspy.context(lm=None):
        result = module(initial_input="task", test_command=CHECK_ODD)

    assert (result.success, result.lm_calls) == (max_iterations > 1, 0)
    assert [step.role for step in result.trace][:3] == ["executor", "validator", "executor"][:2 * max_iterations]
    assert module.settings()["analyst"] is False


def test_the_builtin_validator_is_cut_off_at_the_runs_deadline(tmp_path):
    sleeper = py("import time; time.sleep(30)")
    module = ExecuteValidateController(executor=Phase({"solution.py": GOOD}), controller=loops.tests_controller,
                                       workspace=Workspace(tmp_path), validator_timeout_s=60)

    started = time.monotonic()
    result = module(initial_input="task", test_command=sleeper, timeout_s=1.0)
    elapsed = time.monotonic() - started

    assert elapsed < 5, f"the run took {elapsed:.1f}s with timeout_s=1"
    assert result.stop_reason == "timeout"
    assert result.final == {"solution.py": GOOD}
    validation = result.trace[1].outputs["result"]
    assert validation.timed_out and validation.seconds < 2


class WriteOdd(dspy.Module):
    """A user's executor module: no LLM, just the contract."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, request, attempt):
        self.seen.append((request, attempt))
        code = BAD if attempt == 1 else GOOD
        return TaskResult(status="COMPLETE", content=code, files={"solution.py": code})


def test_a_dspy_module_executor_writes_into_the_workspace_and_the_default_validator_runs_the_tests(tmp_path):
    executor = WriteOdd()
    module, lms = loop_with(None, [analysed("keep only odd numbers")], executor=executor,
                            workspace=Workspace(tmp_path))

    result = module(initial_input="write odd_list", test_command=CHECK_ODD)

    assert (result.stop_reason, result.iterations, result.success) == ("stopped", 2, True)
    assert (tmp_path / "solution.py").read_text() == GOOD
    assert executor.seen[0] == ("write odd_list", 1)
    request, attempt = executor.seen[1]
    assert attempt == 2 and request.prompt == "write odd_list"
    assert request.feedback.endswith("keep only odd numbers")
    assert calls(lms["analyst"]) == 1


# --- histories and policies ----------------------------------------------------------------------


def test_role_histories_hold_their_earlier_turns_and_render():
    first, second = "def odd_list(xs):\n    return 'first'\n", "def odd_list(xs):\n    return 'second'\n"
    module, _ = loop_with([wrote(first), wrote(second), wrote("x = 3\n")],
                          [analysed("drop the even numbers"), analysed("return a list")],
                          validator=Phase(failed()), max_iterations=3)

    result = module(initial_input="write odd_list", test_command="check")

    executor_turns = result.histories["executor"].messages
    assert [turn["code"] for turn in executor_turns[:2]] == [first.strip(), second.strip()]
    assert "drop the even numbers" in executor_turns[1]["task"]
    assert [turn["next_input"] for turn in result.histories["analyst"].messages] == [
        "drop the even numbers", "return a list"]
    assert "notes" not in result.histories["analyst"].messages[0]  # no other role's fields
    text = rendered(ExecutorSignature, task="t", target_file="solution.py", file_context="",
                    history=result.histories["executor"])
    for earlier in ("return 'first'", "return 'second'", "drop the even numbers"):
        assert earlier in text
    text = rendered(IterationAnalystSignature, goal="g", code="c", test_command="check", exit_code=1,
                    test_output="o", digest="d", history=result.histories["analyst"])
    for earlier in ("drop the even numbers", "return a list", "return 'first'"):
        assert earlier in text


@pytest.mark.parametrize(("policy", "roles", "temperature", "turns"), [
    ("repair", ["user", "assistant", "user"], None, 2),
    ("fresh", ["user"], 0.7, 1),
])
def test_fresh_forgets_the_executors_attempts_and_repair_keeps_them(policy, roles, temperature, turns):
    module, lms = loop_with([wrote("x = 1\n"), wrote("x = 2\n")], [analysed("try harder")],
                            validator=Phase(failed()), policy=policy, max_iterations=2)

    result = module(initial_input="task", test_command="check")

    second = lms["executor"].engine.requests[1]
    assert [message.role for message in second.messages] == roles
    assert ("x = 1" in request_text(second)) is (policy == "repair")
    assert "try harder" in request_text(second)
    assert second.config.temperature == temperature
    assert len(result.histories["executor"].messages) == turns


# --- code extraction and failure digests ---------------------------------------------------------


def test_extract_code_takes_the_fenced_code_out_of_prose():
    answer = ("Sure! Here is the function you asked for:\n\n```python\n" + GOOD
              + "```\n\nIt keeps the odd numbers. Let me know if you need anything else.")

    assert extract_code(answer) == GOOD


@pytest.mark.parametrize("answer", [
    "Sure! Here is the function:\n\n```python\n" + GOOD + "```\n\nIt keeps the odd numbers.\n```python\nprint(1)\n```",
    "```py\n" + GOOD + "\n# Example usage:\nprint(Split([1, 2]))\n```\nThe output is [1].",
    "```\n" + GOOD + "```\n\nExplanation:\n```\nSplit([1, 2])\n```\n",  # a bare fence opening the answer
])
def test_extract_code_keeps_the_same_code_when_the_answer_stops_at_the_closing_fence(answer):
    # What a stop at END_OF_FENCED_CODE leaves of an answer (the stop text is not returned) holds the same code.
    cut = answer[:answer.find(END_OF_FENCED_CODE[0])]

    assert extract_code(cut) == extract_code(answer) != "\n"


def test_extract_code_cuts_a_truncated_repetition_back_to_what_parses():
    answer = GOOD + "\n" + GOOD + "\ndef odd_list(xs):\n    return [x for x in"

    code = extract_code(answer)

    assert code == GOOD + "\n" + GOOD
    compile(code, "solution.py", "exec")


def test_the_digest_of_a_name_error_names_the_called_and_the_defined_function():
    validation = ValidationResult(exit_code=1, stdout="E   NameError: name 'Split' is not defined\n")

    digest = failure_digest(validation, GOOD)

    assert "The tests call `Split` but your file defines `odd_list`: name the function `Split`." in digest


def test_the_digest_of_a_syntax_error_says_the_code_does_not_parse():
    validation = ValidationResult(exit_code=1, stderr="SyntaxError: invalid syntax")

    digest = failure_digest(validation, "def odd_list(xs:\n    return xs\n")

    assert digest.startswith("Your code does not parse:")
    assert "at line 1" in digest and "Output only Python code" in digest


def test_the_digest_of_a_timeout_points_at_an_endless_loop():
    validation = ValidationResult(exit_code=-9, timed_out=True, error="timed out after 2s")

    assert failure_digest(validation, GOOD) == (
        "The tests timed out (timed out after 2s): look for an endless loop or recursion.")
    assert failure_digest(PASSED, GOOD) == ""


# --- forward and aforward ------------------------------------------------------------------------


def scripts():
    return [wrote(BAD), wrote(GOOD)], [analysed("only odd numbers")]


def summary(result):
    return (
        result.final, result.success, result.iterations, result.stop_reason, result.warnings,
        [(step.role, step.iteration, step.inputs) for step in result.trace],
    )


def test_forward_and_aforward_run_the_same_loop(tmp_path):
    sync_module, sync_lms = loop_with(*scripts(), workspace=Workspace(tmp_path / "sync"))
    async_module, async_lms = loop_with(*scripts(), workspace=Workspace(tmp_path / "async"))

    sync_result = sync_module(initial_input="write odd_list", test_command=CHECK_ODD)
    async_result = asyncio.run(async_module.acall(initial_input="write odd_list", test_command=CHECK_ODD))

    assert summary(sync_result)[:4] == (sync_result.final, True, 2, "stopped")
    assert summary(sync_result) == summary(async_result)
    assert call_counts(sync_lms) == call_counts(async_lms) == {"executor": 2, "analyst": 1}
    assert (tmp_path / "sync" / "solution.py").read_text() == (tmp_path / "async" / "solution.py").read_text()


SPLIT_TEST = "from solution import *\n\n\ndef test_split():\n    assert Split([1, 2, 3]) == [1, 3]\n"


def test_a_right_function_under_the_wrong_name_is_aliased_to_the_name_the_tests_call(tmp_path):
    # The model repeats its own name however it is told; the loop reads the name the tests call before the
    # first attempt and adds the alias, so even one attempt passes.
    module, lms = loop_with([wrote(GOOD), wrote(GOOD)], [analysed("name it Split")],
                            workspace=workspace_with_tests(tmp_path, SPLIT_TEST))

    result = module(initial_input="write Split", test_command=PYTEST)

    assert (result.stop_reason, result.success, result.iterations) == ("stopped", True, 1)
    assert result.final.notes["aliases"] == ["Split = odd_list"]
    assert (tmp_path / "solution.py").read_text().endswith("\n\nSplit = odd_list\n")
    assert call_counts(lms) == {"executor": 1, "analyst": 0}


@pytest.mark.parametrize(("code", "names", "expected"), [
    (GOOD, ["Split"], GOOD + "\nSplit = odd_list\n"),
    (GOOD, [], GOOD),
    (GOOD + "\ndef helper():\n    pass\n", ["Split"], GOOD + "\ndef helper():\n    pass\n"),  # which one? leave it
    ("def Split(xs):\n    return xs\n", ["Split"], "def Split(xs):\n    return xs\n"),
    ("x = 1\n", ["Split"], "x = 1\n"),
])
def test_align_names_only_aliases_a_single_candidate(code, names, expected):
    assert align_names(code, names)[0] == expected


def test_only_names_the_code_never_mentions_count_as_called_by_the_tests():
    validation = ValidationResult(
        exit_code=1,
        stdout="E   NameError: name 'Split' is not defined\nE   NameError: name 'math' is not defined\n"
               "E   ImportError: cannot import name 'is_odd' from 'solution'",
    )
    code = "def odd_list(xs):\n    return [math.floor(x) for x in xs]\n"

    assert names_the_tests_miss(validation, code) == ["Split", "is_odd"]
    digest = failure_digest(validation, code)
    assert "The tests call `Split` but your file defines `odd_list`" in digest
    assert "NameError: your code uses `math` without defining or importing it." in digest


def test_auto_repairs_until_the_executor_repeats_itself_then_samples_afresh():
    module, lms = loop_with([wrote("x = 1\n"), wrote("x = 1\n"), wrote("x = 2\n")], [analysed()] * 2,
                            validator=Phase(failed()), policy="auto", max_iterations=3)

    module(initial_input="task", test_command="check")

    second, third = lms["executor"].engine.requests[1:]
    assert second.config.temperature is None and any(message.role == "assistant" for message in second.messages)
    assert third.config.temperature == 0.7 and not any(message.role == "assistant" for message in third.messages)


def test_example_usage_that_would_run_on_import_is_dropped():
    answer = (
        'import math\nLIMIT = 3\n\ndef area(r):\n    """Area."""\n    print(r)\n    return math.pi * r * r\n\n'
        "# Example usage:\nprint(area(2, 3))\nassert area(1) == 3\nif __name__ == '__main__':\n    area(5)\n"
    )

    code = extract_code(answer)

    function = 'def area(r):\n    """Area."""\n    print(r)\n    return math.pi * r * r\n'
    assert code == f"import math\nLIMIT = 3\n\n{function}\n# Example usage:\n"

import subprocess
import sys
import typing

import loops
import loops.signatures
from loops.signatures.results import ControllerDecision, StructuredAnalysisResult, TaskResult, ValidationResult


def test_the_public_api_is_exactly_what_all_lists():
    assert set(loops.__all__) == {
        "AnswerError", "AwaitingInput", "Question", "answer", "answering", "human", "pending_question",
        "Budget", "CREATOR_CRITIC", "CallableValidator", "CodeRequest", "CommandNotFoundError", "ConfigurationError",
        "ContractError", "ControllerDecision", "CreatorCriticIterator", "DIRECTOR", "DeadlinePassed", "DecisionError",
        "DirectorExecutorEvaluatorController", "EXECUTE_VALIDATE", "ExecuteValidateController", "LimitReached",
        "LoopModule", "LoopResult", "LoopsError", "MissingDependencyError", "Observer", "PhaseContract",
        "PytestValidator", "REFINE", "Refine", "ReplayDivergence",
        "RetryPolicy", "RoleFailed", "Run", "RunError", "STOP_REASONS", "ShellValidator", "StatusMessages", "Step",
        "StopReason",
        "StructuredAnalysisResult", "TaskResult", "ValidationResult", "Workspace", "current_run", "load", "observing",
        "tests_controller",
    }
    assert all(hasattr(loops, name) for name in loops.__all__)


def test_the_types_a_custom_phase_needs_are_the_ones_the_loops_use():
    assert (loops.TaskResult, loops.ValidationResult, loops.ControllerDecision, loops.StructuredAnalysisResult) == (
        TaskResult, ValidationResult, ControllerDecision, StructuredAnalysisResult)
    assert loops.signatures.TaskResult is loops.TaskResult
    assert loops.signatures.__name__ == "loops.signatures"


def test_stop_reasons_are_one_documented_literal():
    assert set(typing.get_args(loops.StopReason)) == set(loops.STOP_REASONS)
    assert {"approved", "stopped", "max_iterations", "timeout", "context_limit", "lm_calls", "error"} <= set(
        loops.STOP_REASONS)
    assert all(isinstance(text, str) and text for text in loops.STOP_REASONS.values())


def test_the_contract_tables_name_every_pluggable_phase():
    assert list(loops.CREATOR_CRITIC) == ["creator", "critic", "iterator"]
    assert list(loops.EXECUTE_VALIDATE) == ["executor", "validator", "controller"]
    assert list(loops.DIRECTOR) == ["director", "executor", "evaluator", "controller"]
    assert list(loops.REFINE) == ["critic"]
    for table in (loops.CREATOR_CRITIC, loops.EXECUTE_VALIDATE, loops.DIRECTOR, loops.REFINE):
        for role, contract in table.items():
            assert isinstance(contract, loops.PhaseContract) and contract.role == role
            assert contract.params[-1] == "iteration"


def test_errors_form_one_hierarchy_split_into_misuse_and_run_failures():
    assert issubclass(loops.ConfigurationError, ValueError) and issubclass(loops.RunError, RuntimeError)
    assert issubclass(loops.MissingDependencyError, ImportError)
    assert issubclass(loops.CommandNotFoundError, FileNotFoundError)
    assert issubclass(loops.ContractError, TypeError)
    for misuse in (loops.MissingDependencyError, loops.CommandNotFoundError, loops.ContractError, loops.DecisionError):
        assert issubclass(misuse, loops.ConfigurationError)
    for failure in (loops.LimitReached, loops.RoleFailed):
        assert issubclass(failure, loops.RunError)
    for error in (loops.ConfigurationError, loops.RunError, loops.LimitReached, loops.RoleFailed, loops.DecisionError,
                  loops.ContractError):
        assert issubclass(error, loops.LoopsError)
    assert not issubclass(loops.DecisionError, loops.RunError)  # a developer's bug, never a graceful stop


def test_import_loops_and_loops_help_load_neither_dspy_nor_litellm():
    # What start-up costs is measured by benchmarks/startup.py; this pins why it is cheap: nothing heavy is
    # imported before a name is used or a command runs.
    program = ("import sys\nimport loops\nbare = sorted({'dspy', 'litellm'} & set(sys.modules))\n"
               "from loops.cli import main\nsys.argv = ['loops', '--help']\ntry:\n    main()\nexcept SystemExit:\n"
               "    pass\nprint(bare, sorted({'dspy', 'litellm'} & set(sys.modules)), file=sys.stderr)")
    checked = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)

    assert checked.stderr.strip().splitlines()[-1] == "[] []", checked.stderr
    assert "Usage:" in checked.stdout
    # a name is imported when first used
    assert loops.CreatorCriticIterator.__module__ == "loops.patterns.creator_critic"

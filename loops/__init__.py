"""loops: DSPy modules for agent loop patterns, on one loop runtime."""

import os

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from loops.budget import Budget, RetryPolicy
from loops.contracts import CREATOR_CRITIC, DIRECTOR, EXECUTE_VALIDATE, PhaseContract
from loops.creator_critic import CreatorCriticIterator
from loops.director import DirectorExecutorEvaluatorController
from loops.errors import (
    CommandNotFoundError,
    ConfigurationError,
    ContractError,
    DecisionError,
    LimitReached,
    LoopsError,
    MissingDependencyError,
    RoleFailed,
    RunError,
)
from loops.execute_validate import ExecuteValidateController, tests_controller
from loops.module import LoopModule
from loops.runtime import STOP_REASONS, LoopResult, Observer, Run, Step, StopReason, current_run, observing
from loops.saving import load
from loops.signatures.results import ControllerDecision, StructuredAnalysisResult, TaskResult, ValidationResult
from loops.validators import CallableValidator, PytestValidator, ShellValidator, Workspace

__all__ = [
    "Budget",
    "CREATOR_CRITIC",
    "CallableValidator",
    "CommandNotFoundError",
    "ConfigurationError",
    "ContractError",
    "ControllerDecision",
    "CreatorCriticIterator",
    "DIRECTOR",
    "DecisionError",
    "DirectorExecutorEvaluatorController",
    "EXECUTE_VALIDATE",
    "ExecuteValidateController",
    "LimitReached",
    "LoopResult",
    "LoopModule",
    "LoopsError",
    "MissingDependencyError",
    "Observer",
    "PhaseContract",
    "PytestValidator",
    "RetryPolicy",
    "RoleFailed",
    "Run",
    "RunError",
    "STOP_REASONS",
    "ShellValidator",
    "Step",
    "StopReason",
    "StructuredAnalysisResult",
    "TaskResult",
    "ValidationResult",
    "Workspace",
    "current_run",
    "load",
    "observing",
    "tests_controller",
]

"""loops: DSPy modules for agent loop patterns, on one loop runtime."""

import os

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from loops.budget import Budget, RetryPolicy
from loops.code import tests_controller
from loops.context import Observer, current_run, observing
from loops.contracts import CREATOR_CRITIC, DIRECTOR, EXECUTE_VALIDATE, PhaseContract
from loops.creator_critic import CreatorCriticIterator
from loops.director import DirectorExecutorEvaluatorController
from loops.errors import (
    CommandNotFoundError,
    ConfigurationError,
    ContractError,
    DeadlinePassed,
    DecisionError,
    LimitReached,
    LoopsError,
    MissingDependencyError,
    ReplayDivergence,
    RoleFailed,
    RunError,
)
from loops.execute_validate import ExecuteValidateController
from loops.module import LoopModule
from loops.runtime import STOP_REASONS, LoopResult, Run, Step, StopReason
from loops.saving import load
from loops.signatures.results import (
    CodeRequest,
    ControllerDecision,
    StructuredAnalysisResult,
    TaskResult,
    ValidationResult,
)
from loops.validators import CallableValidator, PytestValidator, ShellValidator, Workspace

__all__ = [
    "Budget",
    "CREATOR_CRITIC",
    "CallableValidator",
    "CodeRequest",
    "CommandNotFoundError",
    "ConfigurationError",
    "ContractError",
    "ControllerDecision",
    "CreatorCriticIterator",
    "DIRECTOR",
    "DeadlinePassed",
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
    "ReplayDivergence",
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

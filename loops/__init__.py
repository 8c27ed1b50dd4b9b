"""loops: DSPy modules for agent loop patterns, on one loop runtime."""

import os

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from loops.budget import Budget, RetryPolicy
from loops.creator_critic import CreatorCriticIterator
from loops.director import DirectorExecutorEvaluatorController
from loops.errors import (
    CommandNotFoundError,
    ConfigurationError,
    DecisionError,
    LimitReached,
    LoopsError,
    MissingDependencyError,
    RoleFailed,
    RunError,
)
from loops.execute_validate import ExecuteValidateController, tests_controller
from loops.module import LoopModule
from loops.runtime import Observer, Run, Step, observing
from loops.validators import CallableValidator, PytestValidator, ShellValidator, Workspace

__all__ = [
    "Budget",
    "CallableValidator",
    "CommandNotFoundError",
    "ConfigurationError",
    "CreatorCriticIterator",
    "DecisionError",
    "DirectorExecutorEvaluatorController",
    "ExecuteValidateController",
    "LimitReached",
    "LoopModule",
    "LoopsError",
    "MissingDependencyError",
    "Observer",
    "PytestValidator",
    "RetryPolicy",
    "RoleFailed",
    "Run",
    "RunError",
    "ShellValidator",
    "Step",
    "Workspace",
    "observing",
    "tests_controller",
]

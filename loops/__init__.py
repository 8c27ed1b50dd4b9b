"""loops: DSPy modules for agent loop patterns, on one loop runtime."""

import os

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from loops.budget import Budget, RetryPolicy
from loops.creator_critic import CreatorCriticIterator
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
from loops.module import LoopModule
from loops.runtime import Observer, Run, Step, observing

__all__ = [
    "Budget",
    "CommandNotFoundError",
    "ConfigurationError",
    "CreatorCriticIterator",
    "DecisionError",
    "LimitReached",
    "LoopModule",
    "LoopsError",
    "MissingDependencyError",
    "Observer",
    "RetryPolicy",
    "RoleFailed",
    "Run",
    "RunError",
    "Step",
    "observing",
]

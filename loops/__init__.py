"""loops: DSPy modules for agent loop patterns, on one loop runtime.

Every name below is imported when first used (`loops.CreatorCriticIterator`, `from loops import load`), so
`import loops`, and the `loops` command's `--help`, do not pay for DSPy and the runtime before any work.
"""

import importlib
import os
from typing import Any

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The public API: each name and the module that defines it.
_EXPORTS = {
    "loops.budget": ("Budget", "RetryPolicy"),
    "loops.code": ("tests_controller",),
    "loops.context": ("Observer", "current_run", "observing"),
    "loops.contracts": ("CREATOR_CRITIC", "DIRECTOR", "EXECUTE_VALIDATE", "PhaseContract"),
    "loops.creator_critic": ("CreatorCriticIterator",),
    "loops.director": ("DirectorExecutorEvaluatorController",),
    "loops.errors": ("AnswerError", "AwaitingInput", "CommandNotFoundError", "ConfigurationError", "ContractError",
                     "DeadlinePassed", "DecisionError", "LimitReached", "LoopsError", "MissingDependencyError",
                     "ReplayDivergence", "RoleFailed", "RunError"),
    "loops.execute_validate": ("ExecuteValidateController",),
    "loops.module": ("LoopModule",),
    "loops.person": ("Question", "answer", "answering", "human", "pending_question"),
    "loops.refine": ("REFINE", "Refine"),
    "loops.runtime": ("STOP_REASONS", "LoopResult", "Run", "Step", "StopReason"),
    "loops.saving": ("load",),
    "loops.streaming": ("StatusMessages",),
    "loops.signatures.results": ("CodeRequest", "ControllerDecision", "StructuredAnalysisResult", "TaskResult",
                                 "ValidationResult"),
    "loops.validators": ("CallableValidator", "PytestValidator", "ShellValidator", "Workspace"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'loops' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

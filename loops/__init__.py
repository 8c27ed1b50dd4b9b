"""loops: DSPy modules for agent loop patterns, on one loop runtime.

Every name below is imported when first used (`loops.CreatorCriticIterator`, `from loops import load`), so
`import loops`, and the `loops` command's `--help`, do not pay for DSPy and the runtime before any work.
"""

import importlib
import os
import sys
from importlib.machinery import ModuleSpec
from typing import Any

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The public API: each name and the module that defines it.
_EXPORTS = {
    "loops.vocabulary.budget": ("Budget", "RetryPolicy"),
    "loops.patterns.code": ("tests_controller",),
    "loops.vocabulary.context": ("Observer", "current_run", "observing"),
    "loops.vocabulary.contracts": ("CREATOR_CRITIC", "DIRECTOR", "EXECUTE_VALIDATE", "PhaseContract"),
    "loops.patterns.creator_critic": ("CreatorCriticIterator",),
    "loops.patterns.director": ("DirectorExecutorEvaluatorController",),
    "loops.errors": ("AnswerError", "AwaitingInput", "CommandNotFoundError", "ConfigurationError", "ContractError",
                     "DeadlinePassed", "DecisionError", "LimitReached", "LoopsError", "MissingDependencyError",
                     "ReplayDivergence", "RoleFailed", "RunError"),
    "loops.patterns.execute_validate": ("ExecuteValidateController",),
    "loops.running.module": ("LoopModule",),
    "loops.running.person": ("Question", "answer", "answering", "human", "pending_question"),
    "loops.patterns.refine": ("REFINE", "Refine"),
    "loops.running.runtime": ("STOP_REASONS", "LoopResult", "Run", "Step", "StopReason"),
    "loops.running.saving": ("load",),
    "loops.observers.streaming": ("StatusMessages",),
    "loops.signatures.results": ("CodeRequest", "ControllerDecision", "StructuredAnalysisResult", "TaskResult",
                                 "ValidationResult"),
    "loops.tools.validators": ("CallableValidator", "PytestValidator", "ShellValidator", "Workspace"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)

# Each module's path before the rooms (`loops.checks`) is the very module of its room (`loops.vocabulary.checks`),
# so that what names an old path keeps resolving: code written before, a saved program's `loops.checks:Count`, the
# classes a checkpoint's pickles name (`loops.checkpoint._Fields`, `loops.steps.Step`), a patch of `loops.checks.x`.
# Each room's modules by their old names (a package's submodules follow it: `loops.code.draws`).
_ROOMS = {
    "vocabulary": ("usage", "deadline", "budget", "context", "profile", "adapters", "contracts", "input_contracts",
                   "checks", "builtin_checks", "junk", "display", "demos"),
    "running": ("runtime", "calls", "replay", "drivers", "failures", "steps", "histories", "roles", "person",
                "module", "saving"),
    "recording": ("checkpoint", "checkpoint_records", "checkpoint_store"),
    "observers": ("tracing", "tracing_spans", "streaming"),
    "patterns": ("creator_critic", "director", "execute_validate", "refine", "prose", "code"),
    "tools": ("validators", "workspace", "pytest_reading", "reaper"),
}
_MOVED = {old: room for room, olds in _ROOMS.items() for old in olds}


class _OldPaths:
    """Finds a module by its old path (`loops.checks`, `loops.code.draws`) and gives the module of its room itself,
    imported once: both names are one module. Asked first: the submodule of an old package path would otherwise be
    found in the room's folder and run a second time, as another module."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        return ModuleSpec(name, self) if _room_path(name) else None

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(_room_path(spec.name))

    def exec_module(self, module: Any) -> None:
        """Nothing to run: the module was run once, under its room's name."""


def _room_path(name: str) -> str | None:
    """`loops.vocabulary.checks` for `loops.checks`, `loops.patterns.code.draws` for `loops.code.draws`; None for a
    name that did not move."""
    top, _, rest = name.partition(".")
    old = rest.partition(".")[0]
    return f"loops.{_MOVED[old]}.{rest}" if top == "loops" and old in _MOVED else None


if not any(type(finder).__name__ == "_OldPaths" for finder in sys.meta_path):
    sys.meta_path.insert(0, _OldPaths())


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'loops' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

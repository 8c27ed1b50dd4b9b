"""DSPy signatures of the loop roles, and the pydantic types their phases exchange.

Nothing here imports the rest of the library: these are the contracts the runtime and the patterns
are written against.
"""

from loops.signatures.creator_critic import CRITERIA, CreatorSignature, CriticSignature, IteratorSignature
from loops.signatures.director import (
    DirectorSignature,
    EvaluatorSignature,
    LoopControllerSignature,
    PlanExecutorSignature,
)
from loops.signatures.execute_validate import ExecutorSignature, IterationAnalystSignature
from loops.signatures.refine import FeedbackSignature
from loops.signatures.results import (
    CodeRequest,
    ControllerDecision,
    StructuredAnalysisResult,
    TaskResult,
    ValidationResult,
)

__all__ = [
    "CRITERIA",
    "CodeRequest",
    "ControllerDecision",
    "CreatorSignature",
    "CriticSignature",
    "DirectorSignature",
    "EvaluatorSignature",
    "FeedbackSignature",
    "ExecutorSignature",
    "IterationAnalystSignature",
    "IteratorSignature",
    "LoopControllerSignature",
    "PlanExecutorSignature",
    "StructuredAnalysisResult",
    "TaskResult",
    "ValidationResult",
]

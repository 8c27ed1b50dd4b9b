"""DSPy signatures of the loop roles, and the pydantic types their phases exchange."""

from loops.signatures.creator_critic import CreatorSignature, CriticSignature, IteratorSignature
from loops.signatures.results import ControllerDecision, StructuredAnalysisResult, TaskResult, ValidationResult

__all__ = [
    "ControllerDecision",
    "CreatorSignature",
    "CriticSignature",
    "IteratorSignature",
    "StructuredAnalysisResult",
    "TaskResult",
    "ValidationResult",
]

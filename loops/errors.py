"""The one error hierarchy of `loops`.

::

    LoopsError
    ├── ConfigurationError (ValueError)      a developer's misuse, raised before anything runs
    │   ├── MissingDependencyError (ImportError)   an optional extra is not installed
    │   └── CommandNotFoundError (FileNotFoundError) a validator's executable does not exist
    └── RunError (RuntimeError)              a failure during a run
        ├── LimitReached                     a budget limit was hit (raised only with strict=True)
        ├── RoleFailed                       a role or phase failed for good; the cause is chained
        └── DecisionError (ValueError)       a controller returned something that is not a decision

A loop never loses its work to a `RunError`: by default it ends gracefully with the best result so
far, a `stop_reason` and `warnings`, and attaches the error to the prediction. `strict=True` raises
instead, with the partial prediction on the exception's `prediction` attribute.
"""

from __future__ import annotations

from typing import Any


class LoopsError(Exception):
    """Base class of every error raised by `loops`."""


class ConfigurationError(LoopsError, ValueError):
    """The library was set up or called wrongly; the message says how to fix it."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional extra (e.g. `loops[local]`) is needed for what was asked."""


class CommandNotFoundError(ConfigurationError, FileNotFoundError):
    """A validator was given a command whose executable cannot be found."""


class RunError(LoopsError, RuntimeError):
    """A loop run failed. `prediction` holds what the run produced before the failure, if any."""

    prediction: Any = None


class LimitReached(RunError):
    """A budget limit ended the run (only raised when the loop runs with `strict=True`)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class RoleFailed(RunError):
    """A role (an LLM predictor or a pluggable phase) failed after its retries."""

    def __init__(self, role: str, message: str):
        super().__init__(message)
        self.role = role


class DecisionError(RunError, ValueError):
    """A controller returned a value that is not a continue/stop decision."""

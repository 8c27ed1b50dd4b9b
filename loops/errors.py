"""The one error hierarchy of `loops`.

::

    LoopsError
    ├── ConfigurationError (ValueError)      a developer's mistake: raised before any LM call where it
    │   │                                    can be known, otherwise at the call that reveals it
    │   ├── MissingDependencyError (ImportError)     an optional extra is not installed
    │   ├── CommandNotFoundError (FileNotFoundError) a validator's executable does not exist
    │   ├── ContractError (TypeError)        a phase does not fit its contract (arity, what it returns)
    │   ├── DecisionError                    a controller returned something that is not a decision
    │   ├── ReplayDivergence                 a resumed run does not match its checkpoint's record
    │   └── AnswerError                      a person's answer does not fit the fields of the role it
    │                                        answers for (the message names them and their types)
    ├── AwaitingInput                        a role answered by a person has no one to answer it now: the
    │                                        run pauses (stop reason "awaiting_input"), its checkpoint
    │                                        holding the question (`loops.running.person`)
    ├── RunError (RuntimeError)              a failure during a run
    │   ├── LimitReached                     a budget limit was hit (raised only with strict=True)
    │   │   └── DeadlinePassed (TimeoutError)    an LM call abandoned at the run's deadline; the
    │   │                                    runtime turns it into the graceful stop "timeout"
    │   └── RoleFailed                       a role or phase failed for good; the cause is chained
    └── DslError                             an error in a DSL program, at a position: its own branch,
                                             drawn in `loops.sexp.errors`

    RequestRefused (BaseException)           no error of the tree, a carrier: the run's limits refused an
                                             LM request where DSPy would swallow or wrap an Exception (a
                                             callback, an engine); the runtime raises its `limit` instead

A developer's mistake always raises. A failure during a run never loses the work: by default the
loop ends gracefully with the best result so far, a `stop_reason` and `warnings`, and the error on
the prediction; `strict=True` raises the `RunError` instead, with that prediction on its
`prediction` attribute. Anything else (a bug in a pattern's own control flow) propagates as itself.

A phase that raises a `LoopsError` of another branch (`loops.sexp.DslError`: a bug in the DSL program
whose lambda is the phase) is not retried and does not stop the loop gracefully: it propagates as
itself, like a developer's mistake.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AnswerError",
    "AwaitingInput",
    "CommandNotFoundError",
    "ConfigurationError",
    "ContractError",
    "DeadlinePassed",
    "DecisionError",
    "LimitReached",
    "LoopsError",
    "MissingDependencyError",
    "ReplayDivergence",
    "RequestRefused",
    "RoleFailed",
    "RunError",
    "a_or_an",
]


class LoopsError(Exception):
    """Base class of every error raised by `loops`."""


class ConfigurationError(LoopsError, ValueError):
    """The library was set up or called wrongly; the message says how to fix it."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional extra (e.g. `loops[local]`) is needed for what was asked."""


class CommandNotFoundError(ConfigurationError, FileNotFoundError):
    """A validator was given a command whose executable cannot be found."""


class ContractError(ConfigurationError, TypeError):
    """A pluggable phase does not fit its role's contract: it takes the wrong arguments or returned
    something the next built-in phase cannot use. The message gives the contract."""


class DecisionError(ConfigurationError):
    """A controller returned a value that is not a continue/stop decision."""


class ReplayDivergence(ConfigurationError):
    """A resumed run does not match its record: another program, other inputs, or calls in another order."""


class AnswerError(ConfigurationError):
    """A person's answer (at the terminal, from an answer function, or `loops runs answer`) does not fit the
    fields of the role it answers for; the message names every field and its type."""


class AwaitingInput(LoopsError):
    """A role answered by a person has no one to answer it in this process: the run pauses with the stop
    reason "awaiting_input" (the runtime catches it), and its checkpoint holds `question`. `prediction` is
    the work so far of a run nested in another (a DSL loop form's), which pauses the enclosing run too."""

    prediction: Any = None

    def __init__(self, question: Any):
        super().__init__(f"the {question.role} waits for a person's answer")
        self.question = question


class RunError(LoopsError, RuntimeError):
    """A loop run failed. `prediction` holds what the run produced before the failure, if any."""

    prediction: Any = None


class LimitReached(RunError):
    """A budget limit ended the run (only raised when the loop runs with `strict=True`)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class DeadlinePassed(LimitReached, TimeoutError):
    """An LM call was abandoned because the run's time was up (raised by engines; the runtime ends the run
    with the stop reason "timeout")."""

    def __init__(self, message: str):
        super().__init__("timeout", message)


class RoleFailed(RunError):
    """A role (an LLM predictor or a pluggable phase) failed after its retries."""

    def __init__(self, role: str, message: str):
        super().__init__(message)
        self.role = role


class RequestRefused(BaseException):
    """The run's limits refused an LM request (`loops.vocabulary.context.before_request`), or an engine gave one up at
    the run's deadline. It is a `BaseException` so that it passes DSPy's handlers untouched: DSPy swallows
    what a callback raises and wraps what an engine raises, both by catching `Exception`. The runtime
    raises `limit` (a `LimitReached`) in its place, so nothing outside a run's call ever sees it."""

    def __init__(self, limit: LimitReached):
        super().__init__(str(limit))
        self.limit = limit


def a_or_an(noun: str) -> str:
    """`noun` with its indefinite article, for the messages above ("an ExecuteValidateController", "a dict")."""
    return f"{'an' if noun[:1].lower() in 'aeiou' and noun[:1] else 'a'} {noun}"

"""How a failed role call is read: a transient fault to retry, an answer to ask for again, a developer's mistake
to raise at once, or a failure for good; and where in the caller's own code an error was raised.

`failure_action` is the one rule the runtime follows after every failed attempt (`loops.running.calls`); it matches
LiteLLM's exception classes by name, so the local path never has to import LiteLLM.
"""

from __future__ import annotations

import linecache
import sysconfig
from typing import Literal

from dspy.utils import exceptions as dspy_errors

from loops.errors import ConfigurationError, DeadlinePassed, LoopsError
from loops.vocabulary.budget import RetryPolicy

__all__ = ["FailureAction", "describe", "failure_action", "is_transient", "is_unparseable", "raised_at",
           "setup_error"]

_TRANSIENT_ERRORS = (
    dspy_errors.LMRateLimitError,
    dspy_errors.LMTimeoutError,
    dspy_errors.LMServerError,
    dspy_errors.LMTransportError,
    TimeoutError,
    ConnectionError,
)
# LiteLLM's exception classes, matched by name so the local path never has to import litellm.
_TRANSIENT_NAMES = frozenset({"RateLimitError", "Timeout", "APITimeoutError", "APIConnectionError",
                              "ServiceUnavailableError", "InternalServerError"})
# A developer's mistake that surfaces only when the LM is called: no retry can fix it.
_SETUP_ERRORS = (
    dspy_errors.LMConfigurationError,
    dspy_errors.LMAuthError,
    dspy_errors.LMBillingError,
    dspy_errors.LMUnsupportedModelError,
    dspy_errors.LMUnsupportedFeatureError,
)
_SETUP_NAMES = frozenset({"AuthenticationError", "PermissionDeniedError", "NotFoundError", "BadRequestError"})


def is_transient(error: BaseException) -> bool:
    """Whether trying the same LM call again later may succeed."""
    if isinstance(error, _TRANSIENT_ERRORS):
        return True
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__)


def is_unparseable(error: BaseException) -> bool:
    return isinstance(error, dspy_errors.AdapterParseError)


def setup_error(error: BaseException) -> ConfigurationError | None:
    """The developer's mistake behind an exception raised by a role call (no LM, a rejected key, an
    unknown model), as a `ConfigurationError`; None for a failure during the run."""
    if isinstance(error, ConfigurationError):
        return error
    if isinstance(error, ValueError) and "No LM is loaded" in str(error):
        return ConfigurationError("no LM is configured: call dspy.configure(lm=...) (e.g. loops.lm.local_lm() for "
                                  "the embedded offline model) or pass one with dspy.context(lm=...)")
    if isinstance(error, _SETUP_ERRORS) or any(cls.__name__ in _SETUP_NAMES for cls in type(error).__mro__):
        return ConfigurationError(f"the LM refused the request, which no retry can fix: {describe(error)}; check "
                                  "the model name, the API key and the provider's settings")
    return None

FailureAction = Literal["propagate", "setup", "timeout", "reparse", "retry", "give_up"]


def failure_action(error: BaseException, *, llm: bool, attempts: int, parse_failures: int, retry: RetryPolicy,
                   out_of_time: bool) -> FailureAction:
    """What a role call does after an attempt of it failed with `error` (`attempts` made so far, of which
    `parse_failures` were answers that could not be parsed):

    - "propagate": the error is no failure of this call (a limit that refused its next request, or a limit
      or failure of a role call a phase made, already recorded; a `loops.sexp.DslError`, a bug in the DSL
      program that must keep its position);
    - "setup": a developer's mistake that surfaced at the call (no LM, a rejected key): it raises;
    - "timeout": the run's time is up;
    - "reparse": ask an LLM role again, at a little temperature, for an answer that parses;
    - "retry": a transient fault (rate limit, time-out, dropped connection): wait, then send again;
    - "give_up": the role failed for good.
    """
    if isinstance(error, LoopsError) and not isinstance(error, ConfigurationError | DeadlinePassed):
        return "propagate"
    if setup_error(error) is not None:
        return "setup"
    if isinstance(error, DeadlinePassed) or out_of_time:
        return "timeout"
    # Only an LLM role is asked again with a config of its own: a phase (a user's program) takes no `config`.
    if is_unparseable(error) and llm and parse_failures < retry.parse_retries:
        return "reparse"
    if is_transient(error) and attempts < retry.attempts:
        return "retry"
    return "give_up"


_NOT_USER_CODE = tuple(sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib"))


def raised_at(error: BaseException) -> str:
    """Where in the caller's own code `error` was raised (the innermost frame outside loops, the standard library
    and installed packages), as ` (at FILE:LINE in FUNCTION: SOURCE)`; "" when no frame is theirs."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        module = frame.f_globals.get("__name__", "")
        if not (module == "loops" or module.startswith("loops.")) and not frame.f_code.co_filename.startswith(
                _NOT_USER_CODE):
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    code, line = found.tb_frame.f_code, found.tb_lineno
    source = linecache.getline(code.co_filename, line).strip()
    return f" (at {code.co_filename}:{line} in {code.co_name}{': ' + source if source else ''})"


def describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")

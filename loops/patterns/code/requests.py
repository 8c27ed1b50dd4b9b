"""The built-in executor's input: a task as the user gives it (a str, or a dict with a `prompt`), read into a
`CodeRequest`, and the request of the next iteration after a failed test run."""

from __future__ import annotations

from typing import Any

from loops.errors import ConfigurationError
from loops.patterns.code.python import names_the_tests_miss
from loops.signatures.results import CodeRequest, ValidationResult
from loops.vocabulary.contracts import short_repr

__all__ = ["code_request", "next_request"]


def code_request(value: Any) -> CodeRequest:
    """A str, a dict with a `prompt` str, or a request, as a request; raises `ConfigurationError`."""
    if isinstance(value, CodeRequest):
        return value
    if isinstance(value, str):
        return CodeRequest(prompt=value)
    if isinstance(value, dict) and isinstance(value.get("prompt"), str):
        try:
            return CodeRequest.model_validate(value)
        except ValueError as exc:
            fields = ", ".join(CodeRequest.model_fields)
            raise ConfigurationError(f"the built-in executor's input dict takes the keys {fields}; "
                                     f"{short_repr(value)} does not fit: {exc}") from None
    raise ConfigurationError(
        f"the built-in executor needs a str or a dict with a 'prompt' str, got {short_repr(value)}; "
        "pass your own executor for other inputs"
    )


def next_request(current_input: Any, validation: ValidationResult, code: str, digest: str,
                 advice: str = "") -> CodeRequest:
    """The next iteration's input: the same task, what failed (and any advice), the names the tests need."""
    feedback = f"{digest}\n{advice}" if advice and advice != digest else digest
    return code_request(current_input).retry(feedback, names_the_tests_miss(validation, code))


"""What a pattern's call takes, written once as data: `InputContract` (`CREATOR_CRITIC_INPUTS`,
`EXECUTE_VALIDATE_INPUTS`, `DIRECTOR_INPUTS`), each `Input` with whether it is required and what the built-in
phases that read it need it to be (`VALUE_KINDS`); `MISSING`, the default of an input not given; and whether a
value is text UTF-8 can carry (`not_text`, `first_non_text`, `as_text`). A module checks every call against its
contract before any LM call, and `loops.batch` every example of a batch before the first one runs.

Its own room because a call's inputs change with what users pass a loop, never with how the loop reads what its
phases return (`loops.vocabulary.contracts`, which re-exports every name here).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CREATOR_CRITIC_INPUTS", "DIRECTOR_INPUTS", "EXECUTE_VALIDATE_INPUTS", "MISSING", "VALUE_KINDS", "Input",
           "InputContract", "as_text", "first_non_text", "not_text", "short_repr"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # the default of a required input in a pattern's forward(): not given

# What the built-in phases need an input to be, by kind: how it is said, and the test. "value" and "anything"
# are for inputs no built-in phase reads (a custom phase takes what its caller passes).
VALUE_KINDS: Mapping[str, tuple[str, Callable[[Any], bool]]] = {
    "text": ("a non-empty str", lambda value: isinstance(value, str) and bool(value.strip())),
    "any text": ("a str (it may be empty)", lambda value: isinstance(value, str)),
    "goal": ("a goal (a non-empty value)", lambda value: value is not None and bool(str(value).strip())),
    "task": ("a task: a non-empty str, or a dict with a 'prompt' str",
             lambda value: (isinstance(value, str) and bool(value.strip()))
             or (isinstance(value, Mapping) and isinstance(value.get("prompt"), str))),
    "command": ("a command line (a non-empty str)", lambda value: isinstance(value, str) and bool(value.strip())),
    "value": ("a value (not None)", lambda value: value is not None),
    "anything": ("any value", lambda value: True),
}


@dataclass(frozen=True)
class Input:
    """One input of a pattern's call: what it is (`about`), what the built-in phases that read it (`read_by`) need
    it to be (`kind`, a key of `VALUE_KINDS`), what it must be when none of them runs (`custom`), its default
    (`MISSING`: it is required), and its default when none of them runs (`custom_default`: a validator of the
    caller's own needs no test command, and is given "")."""

    about: str
    kind: str
    read_by: tuple[str, ...]
    custom: str = "value"
    default: Any = MISSING
    custom_default: Any = MISSING

    def read_in(self, builtin: Collection[str]) -> bool:
        """Whether a built-in phase reads it in a program whose built-in phases are `builtin`."""
        return any(role in builtin for role in self.read_by)

    def kind_in(self, builtin: Collection[str]) -> str:
        """What it must be in a program whose built-in phases are `builtin`: `kind` if one of them reads it."""
        return self.kind if self.read_in(builtin) else self.custom

    def default_in(self, builtin: Collection[str]) -> Any:
        """Its default in a program whose built-in phases are `builtin` (`MISSING`: it is required there)."""
        return self.default if self.default is not MISSING or self.read_in(builtin) else self.custom_default

    def missing(self, name: str) -> str:
        """What a call that does not give it is told."""
        unneeded = "" if self.custom_default is MISSING else (
            f" by the built-in {' and '.join(self.read_by)} (a {self.read_by[0]}= of your own needs none)")
        return f"no {name!r} ({self.about}): it is required{unneeded}"


@dataclass(frozen=True)
class InputContract:
    """The inputs of a pattern's call, by name. `open`: any other name is an input too, of any value (a DSL
    program's variables)."""

    inputs: Mapping[str, Input] = field(default_factory=dict)
    open: bool = False

    def problems(self, given: Mapping[str, Any], builtin: Collection[str], options: Collection[str] = (), *,
                 inputs_only: bool = False) -> list[str]:
        """Every way `given` does not fit this contract, each said in a sentence with its fix; [] when it fits.

        `builtin` are the phases of the program that are the built-in ones (their inputs' `kind` applies, else
        their `custom` kind); `options` the names a call takes beside its inputs (limits, a checkpoint). With
        `inputs_only` (a batch's example: data), an option among `given` is a mistake too."""
        found = []
        for name in given:
            if name in self.inputs:
                continue
            if name in options:
                if inputs_only:
                    found.append(f"{name!r} is an option of the run (a limit, a checkpoint), not an input: data "
                                 f"holds inputs only{self._naming()}; set it for the whole batch, on its program "
                                 "or on the command line")
            elif not self.open:
                close = difflib.get_close_matches(name, [*self.inputs, *([] if inputs_only else options)], n=1)
                suggestion = f" (did you mean {close[0]!r}?)" if close else ""
                found.append(f"unknown {'input' if inputs_only else 'input or option'} {name!r}{suggestion}"
                             f"{self._naming()}")
        for name, spec in self.inputs.items():
            if name not in given or given[name] is MISSING:
                if spec.default_in(builtin) is MISSING:
                    found.append(spec.missing(name))
                continue
            value = given[name]
            expected, fits = VALUE_KINDS[spec.kind_in(builtin)]
            if not fits(value):
                found.append(f"{name} must be {expected}, got {short_repr(value, 100)}")
        for name, value in given.items():
            if name in self.inputs or (self.open and name not in options):
                bad = not_text(value)
                if bad:
                    found.append(f"{name} is not UTF-8 text: it holds {bad}")
        return found

    def _naming(self) -> str:
        return f"; the inputs are {', '.join(self.inputs)}" if self.inputs else ""


_SURROGATE = re.compile("[\ud800-\udfff]")


def not_text(value: Any) -> str | None:
    """What in `value` (a str, or one within a dict, list or tuple) is not text that UTF-8 can carry, said in a
    few words; None when it all is."""
    if isinstance(value, str):
        found = first_non_text(value)
        return None if found is None else f"{found[1]} at character {found[0] + 1}"
    if isinstance(value, Mapping):
        value = [*value, *value.values()]
    parts = value if isinstance(value, list | tuple) else ()
    return next((found for found in map(not_text, parts) if found), None)


def as_text(text: str) -> str:
    """`text` with each character UTF-8 cannot carry (`first_non_text`) replaced by U+FFFD: printable."""
    return _SURROGATE.sub("\ufffd", text)


def first_non_text(text: str) -> tuple[int, str] | None:
    """The index of the first character of `text` that UTF-8 cannot carry, and what it is; None when there is
    none. A byte that was not UTF-8 in a command line or a file read leniently arrives as a lone surrogate
    (Python's surrogateescape); so does a lone surrogate written in Python, and neither can be sent anywhere."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's spelling of a byte: 0xDC00 + the byte
        return found.start(), f"the byte {code - 0xDC00:#04x} (not UTF-8)"
    return found.start(), f"a lone surrogate U+{code:04X} (no character)"


_CHECKS = "the call's checks, beside the loop's own: callables of the draft, or short forms such as 'max-words=40'"

CREATOR_CRITIC_INPUTS = InputContract({
    "requirements": Input("what to create", "text", ("creator", "critic", "iterator")),
    "context": Input("background for the creator", "any text", ("creator",), default=""),
    "checks": Input(_CHECKS, "anything", ("critic",), custom="anything", default=None),
})

EXECUTE_VALIDATE_INPUTS = InputContract({
    "initial_input": Input("the task", "task", ("executor",)),
    "test_command": Input("the command whose exit code 0 means done, e.g. 'python -m pytest -q'", "command",
                          ("validator",), custom="anything", custom_default=""),
})

DIRECTOR_INPUTS = InputContract({
    "initial_input": Input("the goal", "goal", ("director",)),
    "checks": Input(_CHECKS, "anything", ("evaluator",), custom="anything", default=None),
})


def short_repr(value: Any, limit: int = 200) -> str:
    """`repr(value)`, cut to `limit` characters with an ellipsis: a value quoted in an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"

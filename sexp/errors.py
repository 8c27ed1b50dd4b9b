"""The errors of the S-expression DSL: one branch of `loops.errors.LoopsError`.

::

    LoopsError
    └── DslError                        a DSL program went wrong at a position (file:line:col)
        ├── DslSyntaxError (SyntaxError)    text that cannot be read, or a special form of the wrong shape
        │   └── IncompleteInput             the text ends inside a list or a string: a REPL asks for more
        ├── UnboundName (NameError)         a name with no definition (also `set!` of one, and a tool the
        │                                   host has not granted, e.g. the shell)
        ├── DslTypeError (TypeError)        a value of the wrong type, e.g. `(+ 1 "a")` or `(5 1)`
        │   └── ArityError                  a procedure called with the wrong number of arguments
        ├── DslValueError (ValueError)      a value out of range: division by zero, `car` of nil, a bad option
        ├── LimitExceeded                   the program's step budget, wall clock, recursion depth, a size
        │                                   cap (string, list, integer) or memory ran out
        └── ToolError                       a tool, the context provider or another Python callable raised;
                                            the original exception is chained as `__cause__`

Every error carries the `node` it is about; `str(error)` renders the position, the source line and a
caret under the column::

    program.sexp:3:4: unbound name 'foo'
        (+ foo 1)
           ^

Syntax errors are raised by `read` and by the analysis of special forms, before anything runs. A
`loops.errors.LoopsError` raised by Python code the program calls (e.g. a `ConfigurationError` from a
validator) is a developer's mistake of its own kind: it propagates as itself, with a note naming the
DSL form that made the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loops.errors import LoopsError

if TYPE_CHECKING:
    from loops.sexp.reader import Node

__all__ = [
    "ArityError",
    "DslError",
    "DslSyntaxError",
    "DslTypeError",
    "DslValueError",
    "IncompleteInput",
    "LimitExceeded",
    "ToolError",
    "UnboundName",
]


class DslError(LoopsError):
    """An error in a DSL program. `message` is the bare message, `node` the form it is about (None
    until the evaluator attaches the call site to an error raised by a primitive)."""

    def __init__(self, message: str, node: Node | None = None):
        super().__init__(message)
        self.message = message
        self.node = node

    def __str__(self) -> str:
        if self.node is None:
            return self.message
        return f"{self.node.location}: {self.message}\n{self.node.excerpt()}"


class DslSyntaxError(DslError, SyntaxError):
    """The program cannot be read, or a special form does not have its shape (`(if)`, `(let (x) x)`).

    The `SyntaxError` attributes (`filename`, `lineno`, `offset`, `text`) are filled too, so Python's
    own traceback display and notebook front-ends point at the place as well.
    """

    def __init__(self, message: str, node: Node | None = None):
        super().__init__(message, node)
        if node is not None:
            self.filename = node.source.filename
            self.lineno = node.line
            self.offset = node.col
            self.text = node.source.line_text(node.line)


class IncompleteInput(DslSyntaxError):
    """The text ends inside an unclosed list or string; more input could complete it."""


class UnboundName(DslError, NameError):
    """A name that is not defined where it is used, `set!` of a name never defined, or a tool the host has
    not granted (found when the program is analysed)."""


class DslTypeError(DslError, TypeError):
    """A value of the wrong type for an operation."""


class ArityError(DslTypeError):
    """A procedure called with too few or too many arguments, or with a named argument it lacks."""


class DslValueError(DslError, ValueError):
    """A value of the right type but out of range for the operation."""


class LimitExceeded(DslError):
    """The program's step budget, wall-clock limit, recursion depth, a size cap or memory ran out. `limit`
    is one of "max_steps", "timeout_s", "max_depth", "max_string_chars", "max_list_items",
    "max_int_digits", "memory"."""

    def __init__(self, message: str, node: Node | None = None, *, limit: str):
        super().__init__(message, node)
        self.limit = limit


class ToolError(DslError):
    """A tool, the context provider or another Python callable raised; `__cause__` is its exception."""

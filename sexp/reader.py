"""The reader: program text to `Node`s that know their file, line and column.

Syntax (see `loops.sexp.values` for the values it produces):

- lists `( ... )`; several top-level forms per program; `;` starts a comment to the end of the line;
- integers `42 -7`, floats `4.2 1e-3 .5 +inf.0 -inf.0 +nan.0`;
- strings `"..."` with the escapes `\\n \\t \\r \\" \\\\` (a raw newline inside a string is kept);
- `#t #f` and `true false`; `nil` (the same value as `'()` and `()`);
- `'x` for `(quote x)`; `:name` keywords; every other atom is a symbol, e.g. `user:analyze-task`,
  `*loop-config*`, `string=?`, `math:add`. `.` is a symbol used only in parameter lists.

The characters `` ` , [ ] { } `` are reserved and raise a syntax error, as does an atom that starts
like a number but is not one (`1abc`), and so does a character that is no text (a lone surrogate, which no
file and no LM can hold). Input that ends inside a list or a string raises
`IncompleteInput`; every other problem raises `DslSyntaxError` at its position.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from loops.sexp.errors import DslSyntaxError, IncompleteInput
from loops.sexp.values import NIL, Keyword, Symbol, to_source
from loops.vocabulary.contracts import as_text, first_non_text

__all__ = ["Node", "Source", "read"]


class Source:
    """The text of one program and its file name, shared by all of its nodes."""

    __slots__ = ("filename", "text", "_line_starts", "_lines")

    def __init__(self, text: str, filename: str = "<string>"):
        self.text = text
        self.filename = filename
        self._line_starts = [0] + [match.end() for match in re.finditer("\n", text)]
        self._lines: list[str] | None = None

    def position(self, offset: int) -> tuple[int, int]:
        """(line, column) of a character offset, both 1-based."""
        index = bisect.bisect_right(self._line_starts, offset) - 1
        return index + 1, offset - self._line_starts[index] + 1

    def line_text(self, line: int) -> str:
        """Line `line` (1-based) as shown under an error: a character no text may hold (a lone surrogate) as U+FFFD,
        so that the line can be printed, its columns unchanged."""
        if self._lines is None:
            self._lines = [as_text(line.rstrip("\r")) for line in self.text.split("\n")]
        return self._lines[line - 1] if 0 < line <= len(self._lines) else ""


class Node:
    """One form of a program: an atom (`value` is an int, float, str, bool, `Symbol` or `Keyword`) or a
    list (`value` is a tuple of child nodes; `nil` and `()` are the empty list)."""

    __slots__ = ("value", "source", "line", "col")

    def __init__(self, value: Any, source: Source, line: int, col: int):
        self.value = value
        self.source = source
        self.line = line
        self.col = col

    @property
    def is_list(self) -> bool:
        return type(self.value) is tuple

    @property
    def symbol(self) -> str | None:
        """The name if this node is a symbol, else None."""
        return str(self.value) if type(self.value) is Symbol else None

    @property
    def location(self) -> str:
        return f"{self.source.filename}:{self.line}:{self.col}"

    def excerpt(self) -> str:
        """The node's source line and a caret under its column, each indented by four spaces."""
        text = self.source.line_text(self.line)
        # Tabs before the column are kept so the caret lines up however the terminal expands them.
        padding = "".join("\t" if char == "\t" else " " for char in text[: self.col - 1])
        return f"    {text}\n    {padding}^"

    def to_value(self) -> Any:
        """The datum this node stands for when quoted: lists become tuples of their items' values."""
        if type(self.value) is tuple:
            return tuple(item.to_value() for item in self.value)
        return self.value

    def __repr__(self) -> str:
        return f"<Node {to_source(self.to_value())} at {self.location}>"


_TOKEN = re.compile(
    r"""
      (?P<space>\s+|;[^\n]*)
    | (?P<open>\()
    | (?P<close>\))
    | (?P<quote>')
    | (?P<string>"(?:[^"\\]|\\.)*")
    | (?P<unterminated>")
    | (?P<atom>[^\s()'";`,\[\]{}]+)
    | (?P<reserved>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?=[eE]))(?:[eE][+-]?[0-9]+)?\Z")
_NUMBER_LIKE = re.compile(r"[+-]?\.?[0-9]")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_NAMED_ATOMS: dict[str, Any] = {
    "#t": True, "#f": False, "true": True, "false": False, "nil": NIL,
    "+inf.0": float("inf"), "-inf.0": float("-inf"), "+nan.0": float("nan"), "-nan.0": float("nan"),
}
_QUOTE = Symbol("quote")


class _Open:
    """A list being read: where it opened, its items so far, and quotes waiting for their datum."""

    __slots__ = ("node_position", "items", "pending_quotes")

    def __init__(self, node_position: tuple[int, int] | None):
        self.node_position = node_position
        self.items: list[Node] = []
        self.pending_quotes: list[tuple[int, int]] = []


def read(text: str, filename: str = "<string>") -> list[Node]:
    """All top-level forms of `text`, in order. Iterative: nesting depth is not limited by Python's stack."""
    source = Source(text, filename)

    def error(message: str, offset: int, kind: type[DslSyntaxError] = DslSyntaxError) -> DslSyntaxError:
        return kind(message, Node(None, source, *source.position(offset)))

    bad = first_non_text(text)
    if bad is not None:
        raise error(f"the program is not UTF-8 text: it holds {bad[1]} here", bad[0])
    top = _Open(None)
    stack = [top]

    def finish(datum: Node) -> None:
        frame = stack[-1]
        while frame.pending_quotes:
            line, col = frame.pending_quotes.pop()
            datum = Node((Node(_QUOTE, source, line, col), datum), source, line, col)
        frame.items.append(datum)

    for match in _TOKEN.finditer(text):
        kind, offset = match.lastgroup, match.start()
        if kind == "space":
            continue
        if kind == "open":
            stack.append(_Open(source.position(offset)))
        elif kind == "close":
            frame = stack[-1]
            if frame is top:
                raise error("unexpected ')' with no list open", offset)
            if frame.pending_quotes:
                line, col = frame.pending_quotes[-1]
                raise DslSyntaxError("nothing to quote before ')'", Node(None, source, line, col))
            stack.pop()
            finish(Node(tuple(frame.items), source, *frame.node_position))
        elif kind == "quote":
            stack[-1].pending_quotes.append(source.position(offset))
        elif kind == "string":
            finish(Node(_unescape(match.group(), offset, error), source, *source.position(offset)))
        elif kind == "unterminated":
            raise error("unterminated string: the input ends before its closing quote", offset, IncompleteInput)
        elif kind == "atom":
            finish(Node(_atom(match.group(), offset, error), source, *source.position(offset)))
        else:
            raise error(f"unexpected character {match.group()!r}; it is reserved in this language", offset)

    if len(stack) > 1:
        line, col = stack[-1].node_position
        raise IncompleteInput("unclosed list: the input ends before this '(' is closed", Node(None, source, line, col))
    if top.pending_quotes:
        line, col = top.pending_quotes[-1]
        raise IncompleteInput("nothing follows this quote", Node(None, source, line, col))
    return top.items


def _unescape(token: str, offset: int, error) -> str:
    def replace(match: re.Match[str]) -> str:
        try:
            return _ESCAPES[match.group(1)]
        except KeyError:
            raise error(
                f"unknown escape '\\{match.group(1)}' in string; use \\n \\t \\r \\\" or \\\\",
                offset + 1 + match.start(),
            ) from None

    return _ESCAPE.sub(replace, token[1:-1])


def _atom(token: str, offset: int, error) -> Any:
    if token in _NAMED_ATOMS:
        return _NAMED_ATOMS[token]
    if _INTEGER.match(token):
        try:
            return int(token)
        except ValueError:  # longer than sys.get_int_max_str_digits()
            raise error(f"integer literal too long ({len(token)} digits)", offset) from None
    if _FLOAT.match(token):
        return float(token)
    if _NUMBER_LIKE.match(token):
        raise error(f"malformed number {token!r}", offset)
    if token.startswith("#"):
        raise error(f"unknown syntax {token!r}; booleans are #t and #f", offset)
    if token.startswith(":"):
        if len(token) == 1:
            raise error("a keyword needs a name after ':'", offset)
        return Keyword(token[1:])
    return Symbol(token)

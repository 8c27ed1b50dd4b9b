"""The DSL's values are plain Python values; this module names the few that are not, and prints them.

| DSL            | Python                                                                  |
|----------------|-------------------------------------------------------------------------|
| `42`, `4.2`    | `int`, `float` (`+inf.0`, `-inf.0`, `+nan.0` for the non-finite floats) |
| `"text"`       | `str`                                                                   |
| `#t`, `#f`     | `True`, `False` (also read from `true`, `false`)                        |
| `foo`, `'foo`  | `Symbol("foo")`, a `str` subclass: `Symbol("stop") == "stop"`           |
| `:max`         | `Keyword("max")`, a `str` subclass that evaluates to itself             |
| `(1 2)`        | `tuple`: `(1, 2)`; lists made by the DSL are always tuples              |
| `nil`, `'()`   | `()`, the empty tuple, exported as `NIL`: nil *is* the empty list       |
| records        | `dict` (read with `get-field`)                                          |

Values coming from Python (tool results, bindings, arguments of a DSL procedure called from Python)
go through `to_dsl`: `None` becomes nil and Python lists become tuples, so `null?` and `equal?` see one
nil and one kind of list. There are no improper (dotted) pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["NIL", "Keyword", "Symbol", "is_list", "to_dsl", "to_source"]

NIL: tuple[()] = ()


class Symbol(str):
    """A name. Reading `foo` gives the node of `Symbol("foo")`; `'foo` evaluates to it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Keyword(str):
    """`:name`, a self-evaluating constant used for options (`:max-iterations 5`); its value is the
    name without the colon."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Keyword({str.__repr__(self)})"


def is_list(value: Any) -> bool:
    """True for DSL lists (tuples) and for Python lists that reached the DSL unconverted."""
    return isinstance(value, (tuple, list))


def to_dsl(value: Any) -> Any:
    """A Python value as the DSL sees it: `None` is nil and lists (at any depth) are tuples."""
    if value is None:
        return NIL
    if isinstance(value, (list, tuple)):
        return tuple(to_dsl(item) for item in value)
    return value


_STRING_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"})


class _Text(str):
    """Printer output already in its final form (as opposed to a value still to print)."""

    __slots__ = ()


_SPACE, _CLOSE, _DICT_CLOSE, _COLON, _COMMA = _Text(" "), _Text(")"), _Text("}"), _Text(": "), _Text(", ")


class _Leave:
    """Marks the end of a container on the printer's stack, so cycles can be detected."""

    __slots__ = ("container_id", "text")

    def __init__(self, container_id: int, text: _Text):
        self.container_id = container_id
        self.text = text


def to_source(value: Any, limit: int | None = None, check: Callable[[], None] | None = None) -> str:
    """The text of `value` in DSL syntax: `read` gives the value back for numbers, strings, booleans,
    symbols, keywords and lists of them. Records print as `{key: value, ...}` and procedures as
    `#<procedure name>`; neither can be read back.

    Iterative, so a deeply nested value prints without Python recursion; a container that contains
    itself prints as `...` where it recurs. With `limit`, printing stops once the text has at least
    that many characters (a list that shares its items may print far longer than it is); `check` is
    called every 65,536 items (a run's clock).
    """
    out: list[str] = []
    stack: list[Any] = [value]
    open_containers: set[int] = set()
    length = measured = count = 0  # the text of out[:measured] is `length` characters long
    while stack:
        count += 1
        if not count & 0xFF:
            if limit is not None:
                length += sum(map(len, out[measured:]))
                measured = len(out)
                if length >= limit:
                    break
            if check is not None and not count & 0xFFFF:
                check()
        item = stack.pop()
        if type(item) is _Text:
            out.append(item)
        elif type(item) is _Leave:
            open_containers.discard(item.container_id)
            out.append(item.text)
        elif isinstance(item, (tuple, list)):
            if not item:
                out.append("nil")
            elif id(item) in open_containers:
                out.append("...")
            else:
                open_containers.add(id(item))
                out.append("(")
                stack.append(_Leave(id(item), _CLOSE))
                for index in range(len(item) - 1, -1, -1):
                    stack.append(item[index])
                    if index:
                        stack.append(_SPACE)
        elif isinstance(item, dict):
            if id(item) in open_containers:
                out.append("...")
                continue
            open_containers.add(id(item))
            out.append("{")
            stack.append(_Leave(id(item), _DICT_CLOSE))
            entries = list(item.items())
            for index in range(len(entries) - 1, -1, -1):
                key, entry = entries[index]
                stack.extend((entry, _COLON, _Text(key) if isinstance(key, str) else key))
                if index:
                    stack.append(_COMMA)
        else:
            out.append(_atom_source(item))
    return "".join(out)


def _atom_source(value: Any) -> str:
    if value is None:  # inside a record from Python; the DSL itself never makes None
        return "nil"
    if value is True:
        return "#t"
    if value is False:
        return "#f"
    if isinstance(value, Symbol):
        return str(value)
    if isinstance(value, Keyword):
        return f":{value}"
    if isinstance(value, str):
        return f'"{value.translate(_STRING_ESCAPES)}"'
    if isinstance(value, float):
        if math.isnan(value):
            return "+nan.0"
        if math.isinf(value):
            return "+inf.0" if value > 0 else "-inf.0"
        return repr(value)
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # more digits than sys.get_int_max_str_digits() allows
            return f"#<integer of about {value.bit_length() * 30103 // 100000} digits>"
    label = getattr(value, "dsl_label", None)
    if label is not None:
        return f"#<{label}>"
    if callable(value):
        return f"#<python {getattr(value, '__qualname__', type(value).__name__)}>"
    return f"#<{type(value).__name__}>"

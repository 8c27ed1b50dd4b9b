"""The built-in procedures: plain Python functions of DSL values, registered by name with `@primitive`.

A primitive checks its arguments and raises `DslTypeError`/`DslValueError`/`ArityError` without a
node; the evaluator attaches the call site. Numbers are ints and floats (booleans are not numbers).

- lists: `list car cdr cons null? nil? length append`
- arithmetic, variadic: `+ - * /` (`/` of two ints that divide exactly is an int, else a float);
  comparisons, chained: `= < > <= >=`
- `not eq? equal?`: `eq?` is identity, except that equal numbers of one type, equal strings, symbols
  and keywords, and empty lists are `eq?`; `equal?` compares structurally (numbers by value, lists
  item by item, records key by key), never a symbol with a string or a boolean with a number
- strings: `string-append string=?` (symbols count as their names), `(string-contains? text part)`,
  `(string-split text [separator])` (on whitespace without one), `(string-join list [separator])`,
  `(to-string value)` (a string as it is, anything else as the REPL prints it)
- records: `(get-field record name)` reads a dict's key, an association list's entry (a list of
  two-element lists whose first item is the name as a symbol or string) or a plain object's data
  attribute; a missing field, or any field of nil, is nil. Attribute names starting with `_`, and
  attributes that are methods, modules or classes, are refused: the DSL reads data, it does not reach
  into Python.
"""

from __future__ import annotations

import inspect
import operator
import types
from collections.abc import Callable
from typing import Any

from loops.sexp.errors import ArityError, DslTypeError, DslValueError
from loops.sexp.values import NIL, Keyword, Symbol, is_list, to_dsl, to_source

__all__ = ["PRIMITIVES", "primitive"]

PRIMITIVES: dict[str, Callable[..., Any]] = {}


def primitive(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function as the primitive(s) `names`; the first name is used in error messages."""

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        function.dsl_primitive = True
        function.dsl_name = names[0]
        function.dsl_label = f"primitive '{names[0]}'"
        for name in names:
            PRIMITIVES[name] = function
        return function

    return register


def _describe(value: Any) -> str:
    text = to_source(value)
    return text if len(text) <= 60 else text[:57] + "..."


# The exact types that the two-argument fast paths of arithmetic and comparisons accept.
_PLAIN_NUMBERS = frozenset({int, float})


def _is_number(value: Any) -> bool:
    kind = type(value)
    return kind is int or kind is float or (kind is not bool and isinstance(value, (int, float)))


def _numbers(name: str, args: tuple[Any, ...], at_least: int = 0) -> None:
    if len(args) < at_least:
        raise ArityError(f"'{name}' expects at least {at_least} argument{'s' if at_least > 1 else ''}, got {len(args)}")
    for value in args:
        if not _is_number(value):
            raise DslTypeError(f"'{name}' expects numbers, got {_describe(value)}")


def _a_list(name: str, value: Any) -> tuple[Any, ...] | list[Any]:
    if not is_list(value):
        raise DslTypeError(f"'{name}' expects a list, got {_describe(value)}")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or isinstance(value, Keyword):
        raise DslTypeError(f"'{name}' expects strings, got {_describe(value)}")
    return value


# -- arithmetic ------------------------------------------------------------------------------------


@primitive("+")
def add(*args: Any) -> Any:
    if len(args) == 2 and type(args[0]) in _PLAIN_NUMBERS and type(args[1]) in _PLAIN_NUMBERS:
        return args[0] + args[1]
    _numbers("+", args)
    return sum(args)


@primitive("-")
def subtract(*args: Any) -> Any:
    if len(args) == 2 and type(args[0]) in _PLAIN_NUMBERS and type(args[1]) in _PLAIN_NUMBERS:
        return args[0] - args[1]
    _numbers("-", args, at_least=1)
    if len(args) == 1:
        return -args[0]
    result = args[0]
    for value in args[1:]:
        result -= value
    return result


@primitive("*")
def multiply(*args: Any) -> Any:
    _numbers("*", args)
    result = 1
    for value in args:
        result *= value
    return result


@primitive("/")
def divide(*args: Any) -> Any:
    _numbers("/", args, at_least=1)
    result, divisors = (1, args) if len(args) == 1 else (args[0], args[1:])
    for divisor in divisors:
        if divisor == 0:
            raise DslValueError("division by zero")
        if type(result) is int and type(divisor) is int and result % divisor == 0:
            result //= divisor
        else:
            result /= divisor
    return result


def _comparison(name: str, holds: Callable[[Any, Any], bool]) -> Callable[..., bool]:
    def compare(*args: Any) -> bool:
        if len(args) == 2 and type(args[0]) in _PLAIN_NUMBERS and type(args[1]) in _PLAIN_NUMBERS:
            return holds(args[0], args[1])
        _numbers(name, args, at_least=1)
        return all(holds(left, right) for left, right in zip(args, args[1:], strict=False))

    compare.__name__ = compare.__qualname__ = f"compare_{name}"
    return primitive(name)(compare)


_comparison("=", operator.eq)
_comparison("<", operator.lt)
_comparison(">", operator.gt)
_comparison("<=", operator.le)
_comparison(">=", operator.ge)


# -- equality and logic ----------------------------------------------------------------------------


@primitive("not")
def not_(value: Any) -> bool:
    return not value


_ATOM_TYPES = (bool, int, float, str, Symbol, Keyword)


@primitive("eq?")
def eq(left: Any, right: Any) -> bool:
    if left is right:
        return True
    if type(left) is type(right) and type(left) in _ATOM_TYPES:
        return left == right
    return is_list(left) and is_list(right) and not left and not right


def _kind(value: Any) -> Any:
    if isinstance(value, bool):
        return bool
    if _is_number(value):
        return int
    if isinstance(value, (Symbol, Keyword)):
        return type(value)
    if isinstance(value, str):
        return str
    if is_list(value):
        return tuple
    if isinstance(value, dict):
        return dict
    return object


@primitive("equal?")
def equal(left: Any, right: Any) -> bool:
    # Iterative with a stack of pairs, so deep lists cannot exhaust Python's stack; pairs already being
    # compared count as equal, so self-containing host lists terminate.
    pending = [(left, right)]
    seen: set[tuple[int, int]] = set()
    while pending:
        a, b = pending.pop()
        if a is b:
            continue
        kind = _kind(a)
        if kind is not _kind(b):
            return False
        if kind is tuple or kind is dict:
            if (id(a), id(b)) in seen:
                continue
            seen.add((id(a), id(b)))
            if len(a) != len(b):
                return False
            if kind is tuple:
                pending.extend(zip(a, b, strict=True))
            else:
                if a.keys() != b.keys():
                    return False
                pending.extend((a[key], b[key]) for key in a)
        elif a != b:
            return False
    return True


# -- lists -----------------------------------------------------------------------------------------


@primitive("list")
def list_(*items: Any) -> tuple[Any, ...]:
    return items


@primitive("car")
def car(value: Any) -> Any:
    items = _a_list("car", value)
    if not items:
        raise DslValueError("'car' of nil: the list is empty")
    return items[0]


@primitive("cdr")
def cdr(value: Any) -> tuple[Any, ...]:
    items = _a_list("cdr", value)
    if not items:
        raise DslValueError("'cdr' of nil: the list is empty")
    return tuple(items[1:])


@primitive("cons")
def cons(item: Any, rest: Any) -> tuple[Any, ...]:
    if not is_list(rest):
        raise DslTypeError(
            f"'cons' expects a list as its second argument (there are no dotted pairs), got {_describe(rest)}"
        )
    return (item, *rest)


@primitive("null?", "nil?")
def is_null(value: Any) -> bool:
    return is_list(value) and not value


@primitive("length")
def length(value: Any) -> int:
    if not is_list(value) and not isinstance(value, str):
        raise DslTypeError(f"'length' expects a list or a string, got {_describe(value)}")
    return len(value)


@primitive("append")
def append(*lists: Any) -> tuple[Any, ...]:
    result: list[Any] = []
    for value in lists:
        result.extend(_a_list("append", value))
    return tuple(result)


# -- strings ---------------------------------------------------------------------------------------


@primitive("string-append")
def string_append(*parts: Any) -> str:
    return "".join([str(_text("string-append", part)) for part in parts])


@primitive("string=?")
def string_equal(*args: Any) -> bool:
    if not args:
        raise ArityError("'string=?' expects at least 1 argument, got 0")
    texts = [str(_text("string=?", value)) for value in args]
    return all(text == texts[0] for text in texts)


@primitive("string-contains?")
def string_contains(text: Any, part: Any) -> bool:
    return str(_text("string-contains?", part)) in str(_text("string-contains?", text))


@primitive("string-split")
def string_split(text: Any, separator: Any = None) -> tuple[str, ...]:
    """Split on `separator`, or on runs of whitespace when it is left out."""
    if separator is not None and not str(_text("string-split", separator)):
        raise DslValueError("'string-split' needs a non-empty separator")
    sep = None if separator is None else str(separator)
    return tuple(str(_text("string-split", text)).split(sep))


@primitive("string-join")
def string_join(parts: Any, separator: Any = " ") -> str:
    return str(_text("string-join", separator)).join(str(_text("string-join", part))
                                                      for part in _a_list("string-join", parts))


@primitive("to-string")
def to_string(value: Any) -> str:
    """A string as it is; any other value as the REPL prints it."""
    return str(value) if isinstance(value, str) and not isinstance(value, Keyword) else to_source(value)


# -- records ---------------------------------------------------------------------------------------


@primitive("get-field")
def get_field(record: Any, name: Any) -> Any:
    if not isinstance(name, str):
        raise DslTypeError(f"'get-field' expects a field name (string or symbol), got {_describe(name)}")
    key = str(name)
    if isinstance(record, dict):
        return to_dsl(record.get(key))
    if is_list(record):
        for entry in record:
            if is_list(entry) and len(entry) == 2 and isinstance(entry[0], str) and str(entry[0]) == key:
                return to_dsl(entry[1])
        return NIL
    if key.startswith("_"):
        raise DslValueError(f"'get-field' refuses the private name '{key}'")
    value = getattr(record, key, None)
    if callable(value) or isinstance(value, types.ModuleType) or inspect.isclass(value):
        raise DslTypeError(f"'get-field': field '{key}' of {_describe(record)} is not data (it is code)")
    return to_dsl(value)


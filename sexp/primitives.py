"""The built-in procedures: plain Python functions of DSL values, registered by name with `@primitive`.

A primitive checks its arguments and raises `DslTypeError`/`DslValueError`/`ArityError` without a
node; the evaluator attaches the call site. Numbers are ints and floats (booleans are not numbers).

- lists: `list car cdr cons null? nil? length append`
- arithmetic, variadic: `+ - * /` (`/` of two ints that divide exactly is an int, else a float);
  comparisons, chained, of two numbers or more: `= < > <= >=` (as R7RS writes them; `(< x)` is an
  arity error, not a comparison that holds)
- `not eq? equal?`: `eq?` is identity, except that equal numbers of one type, equal strings, symbols
  and keywords, and empty lists are `eq?`; `equal?` compares structurally (numbers by value, lists
  item by item, records key by key), never a symbol with a string or a boolean with a number
- strings: `string-append`, `string=?` (two or more; symbols count as their names), `(string-contains? text part)`,
  `(string-split text [separator])` (on whitespace without one), `(string-join list [separator])`,
  `(to-string value)` (a string as it is, anything else as the REPL prints it)
- records: `(get-field record name)` reads a dict's key, an association list's entry (a list of
  two-element lists whose first item is the name as a symbol or string) or a plain object's data
  attribute; a missing field, or any field of nil, is nil. Attribute names starting with `_`, and
  attributes that are methods, modules or classes, are refused, and so is any field of code (a
  procedure, a tool, an atom) or of the interpreter's own objects: the DSL reads data, it does not
  reach into Python nor into the interpreter that runs it.
- checks (`loops.vocabulary.checks`): `(check:max-words 40)`, `(check:include "BPA-free")`, `(check:words 10 40)`, one
  `check:KEY` per short form of `loops.vocabulary.checks.SPEC_FORMS`, and `(check "max-words=40")` for any short form:
  the rules a loop form's `checks` clause runs on every draft
- sizes: a string, list or integer that a primitive would make over `Limits.max_string_chars`,
  `max_list_items` or `max_int_digits` raises `LimitExceeded` before it is made; `equal?` and
  `to-string`, which walk a value however much it shares, look at the run's clock as they go.
"""

from __future__ import annotations

import inspect
import operator
import types
from collections.abc import Callable
from typing import Any

from loops.errors import ConfigurationError
from loops.sexp.errors import ArityError, DslTypeError, DslValueError, LimitExceeded
from loops.sexp.evaluator import current_evaluation, current_limits
from loops.sexp.values import NIL, Keyword, Symbol, is_list, to_dsl, to_source
from loops.vocabulary.checks import SPEC_FORMS, parse_check

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
    text = to_source(value, limit=61)
    return text if len(text) <= 60 else text[:57] + "..."


# -- size caps (`Limits.max_string_chars`, `max_list_items`, `max_int_digits`) ------------------------
# Sizes are checked before a value is built where they can be known (a join's length is the sum of its
# parts'), so an oversized value is refused before it takes the time and memory to make.

# Integers inside (-2**63, 2**63) are under every allowed cap (`MIN_INT_DIGITS`): the fast paths of
# arithmetic compare with these bounds and look at the cap only beyond them.
_SMALL_INT, _MINUS_SMALL_INT = 2**63, -(2**63)


def _checked_int(name: str, value: Any) -> Any:
    if type(value) is int and value.bit_length() > current_limits().max_int_bits:
        raise _int_limit(name)
    return value


def _int_limit(name: str) -> LimitExceeded:
    return LimitExceeded(f"'{name}' would make an integer of more than {current_limits().max_int_digits:,} digits "
                         "(Limits.max_int_digits)", limit="max_int_digits")


def _check_chars(name: str, chars: int) -> None:
    cap = current_limits().max_string_chars
    if chars > cap:
        raise LimitExceeded(f"'{name}' would make a string of more than {cap:,} characters "
                            "(Limits.max_string_chars)", limit="max_string_chars")


def _check_items(name: str, items: int) -> None:
    cap = current_limits().max_list_items
    if items > cap:
        raise LimitExceeded(f"'{name}' would make a list of more than {cap:,} items (Limits.max_list_items)",
                            limit="max_list_items")


def _clock() -> Callable[[], None] | None:
    """What a primitive that walks a value calls now and then: the run's clock check."""
    ev = current_evaluation()
    return ev.check_clock if ev is not None else None


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
        result = args[0] + args[1]
        return result if _MINUS_SMALL_INT < result < _SMALL_INT else _checked_int("+", result)
    _numbers("+", args)
    result = 0
    for value in args:
        result = _checked_int("+", result + value)
    return result


@primitive("-")
def subtract(*args: Any) -> Any:
    if len(args) == 2 and type(args[0]) in _PLAIN_NUMBERS and type(args[1]) in _PLAIN_NUMBERS:
        result = args[0] - args[1]
        return result if _MINUS_SMALL_INT < result < _SMALL_INT else _checked_int("-", result)
    _numbers("-", args, at_least=1)
    if len(args) == 1:
        return -args[0]
    result = args[0]
    for value in args[1:]:
        result = _checked_int("-", result - value)
    return result


@primitive("*")
def multiply(*args: Any) -> Any:
    _numbers("*", args)
    result = 1
    bits = current_limits().max_int_bits
    for value in args:
        # A product has at least as many bits as its factors together, less one: checked before it is made.
        if type(result) is int and type(value) is int and result.bit_length() + value.bit_length() - 1 > bits:
            raise _int_limit("*")
        result *= value
    return _checked_int("*", result)


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
        _numbers(name, args, at_least=2)
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
    clock, count = _clock(), 0
    while pending:
        a, b = pending.pop()
        count += 1
        if clock is not None and not count & _CLOCK_MASK:
            clock()
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


# How often a primitive that walks a value looks at the clock: every 65,536 items.
_CLOCK_MASK = 0xFFFF


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
    _check_items("cons", len(rest) + 1)
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
    _check_items("append", sum(len(_a_list("append", value)) for value in lists))
    result: list[Any] = []
    for value in lists:
        result.extend(value)
    return tuple(result)


# -- strings ---------------------------------------------------------------------------------------


@primitive("string-append")
def string_append(*parts: Any) -> str:
    _check_chars("string-append", sum(len(_text("string-append", part)) for part in parts))
    return "".join([str(part) for part in parts])


@primitive("string=?")
def string_equal(*args: Any) -> bool:
    if len(args) < 2:
        raise ArityError(f"'string=?' expects at least 2 arguments, got {len(args)}")
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
    cap = current_limits().max_list_items
    # At most one split more than the cap: enough to know it is over, without making all the pieces.
    pieces = str(_text("string-split", text)).split(sep, cap)
    _check_items("string-split", len(pieces))
    return tuple(pieces)


@primitive("string-join")
def string_join(parts: Any, separator: Any = " ") -> str:
    glue = str(_text("string-join", separator))
    texts = [str(_text("string-join", part)) for part in _a_list("string-join", parts)]
    _check_chars("string-join", sum(map(len, texts)) + len(glue) * max(len(texts) - 1, 0))
    return glue.join(texts)


@primitive("to-string")
def to_string(value: Any) -> str:
    """A string as it is; any other value as the REPL prints it."""
    if isinstance(value, str) and not isinstance(value, Keyword):
        return str(value)
    cap = current_limits().max_string_chars
    text = to_source(value, limit=cap + 1, check=_clock())
    _check_chars("to-string", len(text))
    return text


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
    if _is_code(record):
        raise DslTypeError(f"'get-field' reads data, and {_describe(record)} is code: it has no fields")
    if key.startswith("_"):
        raise DslValueError(f"'get-field' refuses the private name '{key}'")
    value = getattr(record, key, None)
    if _is_code(value):
        raise DslTypeError(f"'get-field': field '{key}' of {_describe(record)} is not data (it is code)")
    return to_dsl(value)


def _is_code(value: Any) -> bool:
    """Procedures, tools, atoms, modules, classes, and the interpreter's own objects (its scopes, its
    runs): what a program may call or pass along, never look into."""
    return (callable(value) or isinstance(value, types.ModuleType) or inspect.isclass(value)
            or (type(value).__module__.startswith("loops.sexp.") and not isinstance(value, str)))



# -- checks (`loops.vocabulary.checks`): the rules a loop form's `checks` clause runs on every draft -------------------


def _check_primitive(key: str) -> Callable[..., Any]:
    """`check:KEY`: the built-in check of the short form `KEY=value` (`loops.vocabulary.checks.SPEC_FORMS`), its value
    the argument (a range, `N..M`, as two arguments: `(check:words 10 40)`); no argument for a form without one."""
    form = SPEC_FORMS[key]

    def make(*args: Any) -> Any:
        if not form.value and args:
            raise ArityError(f"'check:{key}' takes no argument, got {len(args)}")
        if form.value and not 1 <= len(args) <= (2 if ".." in form.value else 1):
            raise ArityError(f"'check:{key}' expects its {form.value} as argument(s), got {len(args)}")
        for arg in args:
            if not isinstance(arg, str | int) or isinstance(arg, bool):
                raise DslTypeError(f"'check:{key}' expects {form.value}, got {_describe(arg)}")
        return _parsed_check(f"{key}={'..'.join(map(str, args))}" if form.value else key)

    make.__name__ = f"check_{key.replace('-', '_')}"
    return primitive(f"check:{key}")(make)


def _parsed_check(spec: str) -> Any:
    try:
        return parse_check(spec)
    except ConfigurationError as error:
        raise DslValueError(str(error)) from None


for _key in SPEC_FORMS:
    _check_primitive(_key)


@primitive("check")
def check(spec: Any) -> Any:
    """`(check "max-words=40")`: the built-in check of a short form, as the CLI's --check takes it."""
    if not isinstance(spec, str):
        raise DslTypeError(f"'check' expects a short form such as \"max-words=40\", got {_describe(spec)}")
    return _parsed_check(str(spec))

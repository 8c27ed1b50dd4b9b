"""Workrail-style bounded loops: `while`, `until`, `for` and `for-each`, with limits that end a loop
gracefully instead of failing the program.

::

    (while condition [options] body...)        ; body while condition is true
    (until condition [options] body...)        ; body while condition is false (checked before each body)
    (for (i start end [step]) [options] body...)   ; i = start, start+step, ... while i < end (i > end for step < 0)
    (for-each (x list) [options] body...)      ; x bound to each item
    (for-each (x i list) [options] body...)    ; and i to its 0-based index

    options:  :max-iterations N     default and hard cap 1000; 0 runs no body
              :timeout S            seconds of wall clock for this loop (default: only the program's limit)
              :max-context-chars N  size of the values the bodies produce, measured as the length of
                                    their printed form (default 262144); a warning at 80 %

The value of a loop is the value of its last body (nil when no body ran). When a limit stops a loop
that had more to do, the loop ends with that value and the run gets a warning; nothing is raised. So
``(while #t :max-iterations 3 ...)`` runs exactly three bodies, and ``(for (i 0 3) :max-iterations 3
...)`` runs three bodies without a warning. Option values are expressions evaluated when the loop
starts; literal values are checked before the program runs. `for` and `for-each` bind their variables
in a fresh scope per iteration, so procedures made in a body keep their own iteration's values.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from loops.sexp.errors import DslTypeError, DslValueError
from loops.sexp.evaluator import Analyzer, Env, Evaluation, Exec, special_form
from loops.sexp.reader import Node
from loops.sexp.values import NIL, is_list, to_source
from loops.vocabulary.budget import MAX_ITERATIONS_CAP

__all__ = ["CONTEXT_WARNING_RATIO", "DEFAULT_MAX_CONTEXT_CHARS", "LOOP_OPTIONS"]

DEFAULT_MAX_CONTEXT_CHARS = 256 * 1024
CONTEXT_WARNING_RATIO = 0.8


def _is_int(value: Any) -> bool:
    return type(value) is int


def _max_iterations_problem(value: Any) -> str | None:
    if not _is_int(value) or value < 0:
        return f"must be a non-negative integer, got {to_source(value)}"
    if value > MAX_ITERATIONS_CAP:
        return f"{value} is over the hard cap of {MAX_ITERATIONS_CAP} iterations"
    return None


def _timeout_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return f"must be a positive number of seconds, got {to_source(value)}"
    return None


def _max_context_chars_problem(value: Any) -> str | None:
    if not _is_int(value) or value < 1:
        return f"must be a positive integer, got {to_source(value)}"
    return None


LOOP_OPTIONS: Mapping[str, Callable[[Any], str | None]] = {
    "max-iterations": _max_iterations_problem,
    "timeout": _timeout_problem,
    "max-context-chars": _max_context_chars_problem,
}


class _Bounds:
    """The limits of one run of one loop: iterations, its own clock, the size of what it produced."""

    __slots__ = ("form", "node", "ev", "max_iterations", "deadline", "timeout", "max_chars", "count", "chars",
                 "warned_chars")

    def __init__(self, form: str, node: Node, ev: Evaluation, options: dict[str, Any]):
        self.form = form
        self.node = node
        self.ev = ev
        self.max_iterations = options.get("max-iterations", MAX_ITERATIONS_CAP)
        self.timeout = options.get("timeout")
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.max_chars = options.get("max-context-chars", DEFAULT_MAX_CONTEXT_CHARS)
        self.count = 0
        self.chars = 0
        self.warned_chars = False

    def may_run(self) -> bool:
        """Whether the next body may run; called only when the loop has a next body to run."""
        if self.count >= self.max_iterations:
            self.ev.warn(f"{self.form} stopped at max-iterations {self.max_iterations} with more to do; "
                         "its value is the last body's", self.node)
            return False
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.ev.warn(f"{self.form} stopped by its timeout of {self.timeout:g}s after {self.count} iterations; "
                         "its value is the last body's", self.node)
            return False
        self.ev.tick(self.node)
        self.count += 1
        return True

    def produced(self, value: Any) -> bool:
        """Account for a body's value; False when the loop must stop because its values grew too big."""
        self.chars += len(to_source(value))
        if self.chars > self.max_chars:
            self.ev.warn(f"{self.form} stopped after {self.count} iterations: its values reached {self.chars} chars, "
                         f"over max-context-chars {self.max_chars}; its value is the last body's", self.node)
            return False
        if not self.warned_chars and self.chars >= CONTEXT_WARNING_RATIO * self.max_chars:
            self.warned_chars = True
            self.ev.warn(f"{self.form} values reached {self.chars} chars, "
                         f"{self.chars * 100 // self.max_chars} % of max-context-chars {self.max_chars}", self.node)
        return True


def _start(form: str, node: Node, options: dict[str, tuple[Node, Exec]], env: Env, ev: Evaluation) -> _Bounds:
    values = {}
    for key, (value_node, run) in options.items():
        value = run(env, ev)
        problem = LOOP_OPTIONS[key](value)
        if problem is not None:
            raise DslValueError(f":{key} {problem}", value_node)
        values[key] = value
    return _Bounds(form, node, ev, values)


_OPTIONS_USAGE = "[:max-iterations n] [:timeout s] [:max-context-chars n]"


def _conditional(analyzer: Analyzer, node: Node, until: bool) -> Exec:
    items = node.value
    form = items[0].symbol
    if len(items) < 2:
        raise analyzer.syntax_error(f"malformed {form}: expected ({form} condition {_OPTIONS_USAGE} body...)", node)
    condition = analyzer.analyze(items[1])
    options, body_nodes = analyzer.options(items[2:], LOOP_OPTIONS, form)
    body = analyzer.body(body_nodes, tail=False)

    def conditional_loop(env: Env, ev: Evaluation) -> Any:
        bounds = _start(form, node, options, env, ev)
        value = NIL
        while bool(condition(env, ev)) is not until and bounds.may_run():
            value = body(env, ev)
            if not bounds.produced(value):
                break
        return value

    return conditional_loop


@special_form("while")
def _while(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    return _conditional(analyzer, node, until=False)


@special_form("until")
def _until(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    return _conditional(analyzer, node, until=True)


def _number(value: Any, node: Node, what: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DslTypeError(f"the {what} of a for loop must be a number, got {to_source(value)}", node)
    return value


@special_form("for")
def _for(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    usage = f"(for (name start end [step]) {_OPTIONS_USAGE} body...)"
    spec = items[1] if len(items) >= 2 else None
    if spec is None or not spec.is_list or len(spec.value) not in (3, 4):
        raise analyzer.syntax_error(f"malformed for: expected {usage}", spec if spec is not None else node)
    name = analyzer.name(spec.value[0], "a loop variable name")
    bound_nodes = spec.value[1:]
    bounds_of = [analyzer.analyze(bound) for bound in bound_nodes]
    options, body_nodes = analyzer.options(items[2:], LOOP_OPTIONS, "for")
    body = analyzer.body(body_nodes, tail=False)

    def for_loop(env: Env, ev: Evaluation) -> Any:
        start, end, *given_step = [
            _number(run(env, ev), bound, what)
            for run, bound, what in zip(bounds_of, bound_nodes, ("start", "end", "step"), strict=False)
        ]
        step = given_step[0] if given_step else 1
        if step == 0:
            raise DslValueError("the step of a for loop must not be 0", bound_nodes[2])
        bounds = _start("for", node, options, env, ev)
        value = NIL
        current = start
        while (current < end if step > 0 else current > end) and bounds.may_run():
            value = body(Env({name: current}, env), ev)
            if not bounds.produced(value):
                break
            current += step
        return value

    return for_loop


@special_form("for-each")
def _for_each(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    usage = f"(for-each (item [index] list) {_OPTIONS_USAGE} body...)"
    spec = items[1] if len(items) >= 2 else None
    if spec is None or not spec.is_list or len(spec.value) not in (2, 3):
        raise analyzer.syntax_error(f"malformed for-each: expected {usage}", spec if spec is not None else node)
    *name_nodes, list_node = spec.value
    names = [analyzer.name(name_node, "a loop variable name") for name_node in name_nodes]
    if len(names) == 2 and names[0] == names[1]:
        raise analyzer.syntax_error(f"'{names[0]}' names both the item and the index", name_nodes[1])
    list_of = analyzer.analyze(list_node)
    options, body_nodes = analyzer.options(items[2:], LOOP_OPTIONS, "for-each")
    body = analyzer.body(body_nodes, tail=False)

    def for_each_loop(env: Env, ev: Evaluation) -> Any:
        values = list_of(env, ev)
        if not is_list(values):
            raise DslTypeError(f"for-each expects a list, got {to_source(values)}", list_node)
        bounds = _start("for-each", node, options, env, ev)
        value = NIL
        for index, item in enumerate(values):
            if not bounds.may_run():
                break
            scope = {names[0]: item} if len(names) == 1 else {names[0]: item, names[1]: index}
            value = body(Env(scope, env), ev)
            if not bounds.produced(value):
                break
        return value

    return for_each_loop

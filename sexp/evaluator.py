"""The evaluator: each form is analysed once into a Python closure, then run (SICP's `analyze`).

Three phases, as in small interpreters since Norvig's lispy: `read` turns text into nodes with
positions; `Analyzer.analyze` checks the shape of every special form and builds an `Exec`, a closure
``exec(env, ev) -> value``; running a program calls its top-level closures in order. A malformed form
anywhere in a program is reported before any of it runs.

Scopes and calls
    An `Env` is one scope (a dict) with a parent. The interpreter's globals hold the primitives, the
    tools and every top-level `define`, and persist between `eval_source` calls (a REPL's state).
    `lambda` captures its scope; each call gets a fresh child scope. Every call made in tail position
    returns a `TailCall` that the caller's trampoline (`run_closure`) runs, so tail recursion runs in
    constant Python stack; other calls are counted against `Limits.max_depth` and raise
    `LimitExceeded` at the call site, never a Python `RecursionError`.

Truthiness is Python's: `#f`, `0`, `0.0`, `""`, nil and an empty record are false; everything else
is true.

Extension points
    Special forms: a table filled by a decorator. A later module adds a form without editing this one::

        @special_form("twice")
        def _twice(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
            items = node.value                          # the child nodes; items[0] is the form's name
            if len(items) != 2:
                raise analyzer.syntax_error("twice needs one expression: (twice expr)", node)
            body = analyzer.analyze(items[1])           # analyse sub-forms once, at analysis time
            def run(env: Env, ev: Evaluation) -> Any:   # runs every time the form is evaluated
                body(env, ev)
                return body(env, ev)
            return run

    `tail` is True when the form's value is the value of the enclosing procedure; a form may then
    analyse its result expression with ``analyzer.analyze(sub, tail=True)`` (as `if` does) and return
    what that closure returns unchanged. Sub-forms analysed with ``tail=False`` (the default) never
    return a `TailCall`. `Analyzer.body` analyses a sequence, `Analyzer.parameters` a parameter list
    and `Analyzer.options` the `:keyword value` options of the loop forms.

    The run: every closure receives the `Evaluation` of the current run, `ev`. It holds the
    interpreter (`ev.interpreter`: globals, tools, context provider, limits), the run's `warnings` and
    `log`, the step budget and the deadline. Forms call procedures through ``ev.apply(f, args, node)``,
    count work with ``ev.tick(node)`` and report graceful stops with ``ev.warn(message, node)``.

    Procedures from Python: a DSL procedure is a `Closure`; ``closure(*args)`` runs it inside the run
    that is active in this context (or a fresh one of its interpreter) and returns the DSL value; a
    `DslError` raised inside keeps its position. `closure.params`, `closure.rest` (the name taking
    extra arguments, or None), `closure.variadic`, `closure.arity` (min, max or None),
    `closure.accepts(n)`, `closure.name` and `closure.node` let a host check a phase's arity before
    running anything.

    Named-argument operators: a callable with a true attribute `named_arguments` (a `Tool`; an atom
    later) that is defined through `Interpreter.define` is registered in
    `Interpreter.named_operators`. In ``(name (p expr) ...)`` with such a name as operator, each
    two-element list headed by a symbol is a named argument passed as a keyword argument; other
    arguments are positional. `(call f ...)` applies this rule to any `f` (a DSL procedure then binds
    named arguments to its parameters by name). A form that defines such an operator at analysis time
    adds its name to ``analyzer.interpreter.named_operators`` so later forms are analysed accordingly.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import inspect
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loops.errors import ConfigurationError, LoopsError
from loops.sexp.errors import (
    ArityError,
    DslError,
    DslSyntaxError,
    DslTypeError,
    DslValueError,
    LimitExceeded,
    ToolError,
    UnboundName,
)
from loops.sexp.reader import Node
from loops.sexp.values import NIL, Keyword, Symbol, to_dsl, to_source
from loops.vocabulary import context
from loops.vocabulary.deadline import Deadline

if TYPE_CHECKING:
    from loops.sexp.interpreter import Interpreter

__all__ = [
    "DEFAULT_LIMITS",
    "MIN_INT_DIGITS",
    "SPECIAL_FORMS",
    "Analyzer",
    "Closure",
    "Env",
    "Evaluation",
    "Exec",
    "Limits",
    "TailCall",
    "call_named",
    "call_python",
    "constant",
    "current_evaluation",
    "current_limits",
    "describe_callable",
    "out_of_memory",
    "run_closure",
    "special_form",
]

logger = logging.getLogger("loops.sexp")
# A library leaves output to the application: without its own handlers, warnings stay in `warnings`.
logger.addHandler(logging.NullHandler())

# How many steps run between two looks at the clock: often enough to stop within milliseconds of the
# deadline, rarely enough that `time.monotonic()` costs nothing measurable.
_CLOCK_CHECK_INTERVAL = 1024


class Env:
    """One scope: `vars` maps names to values; lookups continue in `parent`."""

    __slots__ = ("vars", "parent")

    def __init__(self, vars: dict[str, Any], parent: Env | None = None):
        self.vars = vars
        self.parent = parent

    def find(self, name: str) -> Env | None:
        """The innermost scope that defines `name`, or None."""
        env: Env | None = self
        while env is not None:
            if name in env.vars:
                return env
            env = env.parent
        return None


def nearest_name(name: str, env: Env | None) -> str:
    """"; did you mean 'display'?" for a name that is not bound, naming the nearest one that is (in `env` or a
    special form), "" when none is near (difflib's ratio of at least 0.75)."""
    known: set[str] = set(SPECIAL_FORMS)
    while env is not None:
        known.update(env.vars)
        env = env.parent
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f"; did you mean '{near[0]}'?" if near else ""


Exec = Callable[[Env, "Evaluation"], Any]
Handler = Callable[["Analyzer", Node, bool], Exec]
SPECIAL_FORMS: dict[str, Handler] = {}


def special_form(name: str) -> Callable[[Handler], Handler]:
    """Register `handler(analyzer, node, tail) -> Exec` as the special form `name`."""

    def register(handler: Handler) -> Handler:
        if name in SPECIAL_FORMS:
            raise ConfigurationError(f"special form {name!r} is already defined")
        SPECIAL_FORMS[name] = handler
        return handler

    return register


# Each nested DSL call needs Python frames, and Python's recursion limit is raised to fit; beyond this
# depth the memory a runaway recursion takes before it is stopped is no longer small.
MAX_DEPTH_CAP = 10_000


# The smallest integer cap allowed: the arithmetic primitives look at the cap only for results beyond
# 2**63 (19 digits), so that adding small numbers costs one comparison more.
MIN_INT_DIGITS = 20


@dataclass(frozen=True)
class Limits:
    """What one program run may use before it ends with `LimitExceeded`.

    `max_steps` counts procedure calls and loop iterations; `timeout_s` is wall-clock seconds (None:
    no limit; inside a loop run the run's own deadline counts too, whichever comes first); `max_depth`
    is how many non-tail calls may be nested (tail calls do not nest). `max_string_chars`,
    `max_list_items` and `max_int_digits` cap the size of one value a primitive makes or a tool or
    binding brings in, so that no single primitive call can take more than a moment or all memory.
    """

    max_steps: int = 5_000_000
    timeout_s: float | None = 300.0
    max_depth: int = 2_000
    max_string_chars: int = 10_000_000
    max_list_items: int = 1_000_000
    max_int_digits: int = 10_000

    def __post_init__(self) -> None:
        if type(self.max_steps) is not int or self.max_steps < 1:
            raise ConfigurationError(f"Limits.max_steps must be a positive int, got {self.max_steps!r}")
        if type(self.max_depth) is not int or not 1 <= self.max_depth <= MAX_DEPTH_CAP:
            raise ConfigurationError(
                f"Limits.max_depth must be an int from 1 to {MAX_DEPTH_CAP}, got {self.max_depth!r}; "
                "deeper recursion should be written as tail calls, which do not nest"
            )
        timeout = self.timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf
        ):
            raise ConfigurationError(f"Limits.timeout_s must be a positive number of seconds or None, got {timeout!r}")
        for name, least in (("max_string_chars", 1), ("max_list_items", 1), ("max_int_digits", MIN_INT_DIGITS)):
            value = getattr(self, name)
            if type(value) is not int or value < least:
                raise ConfigurationError(f"Limits.{name} must be an int of at least {least}, got {value!r}")

    @property
    def max_int_bits(self) -> int:
        """The bit length of the largest integer of `max_int_digits` digits."""
        return math.ceil(self.max_int_digits * math.log2(10))


DEFAULT_LIMITS = Limits()

_current_evaluation: contextvars.ContextVar[Evaluation | None] = contextvars.ContextVar(
    "loops_sexp_evaluation", default=None
)


class Evaluation:
    """The state of one program run, passed to every closure as `ev`.

    `warnings` collects graceful stops (e.g. a loop that hit its max-iterations), each rendered as
    ``file:line:col: message``; `log` collects `log-message` output; `value` is the value of the last
    top-level form once the run has finished.
    """

    def __init__(self, interpreter: Interpreter, limits: Limits):
        self.interpreter = interpreter
        self.limits = limits
        self.warnings: list[str] = []
        self.log: list[str] = []
        self.loop_runs: dict[Node, int] = {}  # how many times each loop form has run in this run
        self.last_loop: tuple[str, bool] | None = None  # the last loop form's (stop_reason, success)
        self.value: Any = NIL
        self.steps = 0
        self.depth = 0
        self.max_depth = limits.max_depth
        # One clock: the earlier of the program's own wall clock and the deadline of the loop run it is
        # part of (a compiled program's, or the loop form's whose phase called it), as engines read it.
        # The run's is its very `Deadline` (a person's wait moves it once, for the run and the program alike),
        # read from the run context, not copied: a clock of the program's own is made only when it comes first.
        run = context.run_deadline()
        timeout = limits.timeout_s
        if run is not None and run.at is not None and (timeout is None or run.at < time.monotonic() + timeout):
            self.deadline, self.clock = run, "the run's deadline passed (Budget.timeout_s, --timeout)"
            self._own_deadline = False
        else:
            self.deadline, self.clock = Deadline(timeout), "no timeout" if timeout is None else f"timeout_s={timeout:g}"
            self._own_deadline = True
        self.checkpoint = min(_CLOCK_CHECK_INTERVAL, limits.max_steps + 1)

    def tick(self, node: Node) -> None:
        """Count one step of work done at `node`; raises `LimitExceeded` when the budget or clock ran out."""
        self.steps += 1
        if self.steps >= self.checkpoint:
            self.check_limits(node)

    def check_limits(self, node: Node) -> None:
        if self.steps > self.limits.max_steps:
            raise LimitExceeded(f"step budget exhausted: max_steps={self.limits.max_steps}", node, limit="max_steps")
        self.check_clock(node)
        self.checkpoint = min(self.steps + _CLOCK_CHECK_INTERVAL, self.limits.max_steps + 1)

    def check_clock(self, node: Node | None = None) -> None:
        """Raise `LimitExceeded` once the deadline has passed: what a long primitive or tool calls as it
        goes (without a node, the evaluator attaches the call site)."""
        at = self.deadline.at
        if at is not None and time.monotonic() > at:
            raise LimitExceeded(f"wall-clock limit exceeded: {self.clock}", node, limit="timeout_s")

    def time_left(self) -> float | None:
        """Seconds until the deadline (0 once passed); None without one. A tool bounds its wait by it."""
        return self.deadline.left()

    def warn(self, message: str, node: Node | None = None) -> None:
        """Record a graceful stop or another thing the caller should know; also logged."""
        text = f"{node.location}: {message}" if node is not None else message
        self.warnings.append(text)
        logger.warning("%s", text)

    def log_message(self, message: str) -> None:
        self.log.append(message)
        logger.info("%s", message)

    def apply(self, procedure: Any, args: Sequence[Any], node: Node | None = None) -> Any:
        """Call a DSL procedure or Python callable with positional DSL values, as a non-tail call."""
        node = node if node is not None else getattr(procedure, "node", None)
        if type(procedure) is Closure:
            return run_closure(procedure, tuple(args), node, self)
        return call_python(procedure, tuple(args), None, node)

    @contextlib.contextmanager
    def active(self) -> Iterator[Evaluation]:
        """Make this the run that DSL procedures called from Python join; a person's wait in it (a loop form's
        `(human)` phase, `loops.vocabulary.context.paused`) moves its deadline past the wait."""
        token = _current_evaluation.set(self)
        try:
            if self._own_deadline:
                with context.on_pause(self.deadline.shift):
                    yield self
            else:  # the run's moves with the run
                yield self
        finally:
            _current_evaluation.reset(token)


def current_evaluation() -> Evaluation | None:
    """The program run active in this context, if any: what a primitive or tool reads its limits and
    clock from."""
    return _current_evaluation.get()


def current_limits() -> Limits:
    """The limits of the active run, else the defaults."""
    ev = _current_evaluation.get()
    return ev.limits if ev is not None else DEFAULT_LIMITS


class TailCall:
    """A call in tail position, returned to the trampoline in `run_closure` instead of being made.

    It takes the same arguments as `run_closure` (the run is not needed), so an application calls
    either one without knowing which.
    """

    __slots__ = ("closure", "args", "node")

    def __init__(self, closure: Closure, args: tuple[Any, ...], node: Node, ev: Evaluation | None = None):
        self.closure = closure
        self.args = args
        self.node = node


class Closure:
    """A procedure made by `lambda` or `define`; callable from Python as ``closure(*args)``."""

    __slots__ = ("params", "rest", "body", "env", "name", "node", "interpreter")

    def __init__(
        self,
        params: tuple[str, ...],
        rest: str | None,
        body: Exec,
        env: Env,
        name: str | None,
        node: Node,
        interpreter: Interpreter,
    ):
        self.params = params
        self.rest = rest
        self.body = body
        self.env = env
        self.name = name
        self.node = node
        self.interpreter = interpreter

    @property
    def variadic(self) -> bool:
        return self.rest is not None

    @property
    def arity(self) -> tuple[int, int | None]:
        """(minimum, maximum) number of arguments; the maximum is None for a variadic procedure."""
        return len(self.params), None if self.rest is not None else len(self.params)

    def accepts(self, count: int) -> bool:
        return count == len(self.params) or (self.rest is not None and count > len(self.params))

    @property
    def dsl_label(self) -> str:
        return f"procedure {self.name or 'lambda'}"

    def describe(self) -> str:
        return f"procedure '{self.name}'" if self.name else "lambda"

    def __call__(self, *args: Any) -> Any:
        ev = _current_evaluation.get()
        if ev is not None and ev.interpreter is self.interpreter:
            return run_closure(self, to_dsl(args), self.node, ev)
        ev = self.interpreter.start_evaluation()
        with ev.active():
            return run_closure(self, to_dsl(args), self.node, ev)

    def __repr__(self) -> str:
        return f"<Closure {self.name or 'lambda'} ({' '.join(self.params)}{' . ' + self.rest if self.rest else ''})>"


def _bind_arguments(closure: Closure, args: tuple[Any, ...], node: Node) -> Env:
    params = closure.params
    if closure.rest is None:
        if len(args) != len(params):
            raise ArityError(_arity_message(closure, len(args)), node)
        return Env(dict(zip(params, args, strict=True)), closure.env)
    if len(args) < len(params):
        raise ArityError(_arity_message(closure, len(args)), node)
    scope = dict(zip(params, args[: len(params)], strict=True))
    scope[closure.rest] = args[len(params):]
    return Env(scope, closure.env)


def _arity_message(closure: Closure, given: int) -> str:
    expected = len(closure.params)
    amount = f"at least {expected}" if closure.rest is not None else str(expected)
    noun = "argument" if expected == 1 else "arguments"
    return f"{closure.describe()} expects {amount} {noun}, got {given}"


def run_closure(closure: Closure, args: tuple[Any, ...], node: Node, ev: Evaluation) -> Any:
    """Call `closure` as a non-tail call: one level of depth, and a trampoline for its tail calls."""
    ev.depth += 1
    try:
        if ev.depth > ev.max_depth:
            raise LimitExceeded(
                f"recursion too deep: more than max_depth={ev.max_depth} nested calls "
                "(make the recursive call a tail call, or raise Limits.max_depth)",
                node,
                limit="max_depth",
            )
        while True:
            params = closure.params
            if closure.rest is None and len(args) == len(params):  # the common call, bound here (lengths equal)
                env = Env({params[0]: args[0]} if len(params) == 1 else dict(zip(params, args, strict=False)),
                          closure.env)
            else:
                env = _bind_arguments(closure, args, node)
            ev.steps += 1
            if ev.steps >= ev.checkpoint:
                ev.check_limits(node)
            result = closure.body(env, ev)
            if type(result) is not TailCall:
                return result
            closure, args, node = result.closure, result.args, result.node
    except RecursionError:
        # The depth limit is the real guard; this covers deep nesting inside one procedure body.
        raise LimitExceeded("recursion too deep for Python's stack", node, limit="max_depth") from None
    except MemoryError:
        raise out_of_memory(node) from None
    finally:
        ev.depth -= 1


def call_python(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, node: Node | None) -> Any:
    """Call a primitive, tool or other Python callable; its failures become DSL errors at `node`."""
    try:
        result = function(*args, **kwargs) if kwargs else function(*args)
    except Exception as exc:
        _raise_from_python(exc, function, args, node)
    return to_dsl(result) if result is None or type(result) is list else result


def _raise_from_python(exc: Exception, function: Any, args: tuple[Any, ...], node: Node | None) -> None:
    """Re-raise an exception from Python code called by the DSL as the right DSL error."""
    if isinstance(exc, DslError):
        if exc.node is None:
            exc.node = node
        raise exc
    if isinstance(exc, RecursionError):
        raise LimitExceeded("recursion too deep for Python's stack", node, limit="max_depth") from None
    if isinstance(exc, MemoryError):
        raise out_of_memory(node) from None
    if not callable(function):
        raise DslTypeError(f"{to_source(function)} is not a procedure", node) from None
    name = describe_callable(function)
    if isinstance(exc, LoopsError):
        # A developer's mistake reported by the library: keep its type, say which form made the call.
        if node is not None:
            exc.add_note(f"raised by {name} called at {node.location}\n{node.excerpt()}")
        raise exc
    if getattr(function, "dsl_primitive", False):
        if isinstance(exc, TypeError) and not _binds(function, args):
            expected = len(inspect.signature(function).parameters)
            noun = "argument" if expected == 1 else "arguments"
            raise ArityError(f"'{function.dsl_name}' expects {expected} {noun}, got {len(args)}", node) from None
        kind = DslValueError if isinstance(exc, (ArithmeticError, ValueError)) else DslTypeError
        raise kind(f"{name}: {exc}", node) from exc
    raise ToolError(f"{name} raised {type(exc).__name__}: {exc}", node) from exc


def out_of_memory(node: Node | None) -> LimitExceeded:
    """The error of a `MemoryError` raised while evaluating `node`: a limit, as the size caps are."""
    return LimitExceeded("out of memory: the program's values do not fit in the memory this process may use "
                         "(lower Limits.max_string_chars / max_list_items, or make fewer copies)", node, limit="memory")


def _binds(function: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    try:
        inspect.signature(function).bind(*args)
    except TypeError:
        return False
    return True


def describe_callable(function: Any) -> str:
    """How an error names a Python callable the DSL calls: its `dsl_label` (a tool, an atom), else its name."""
    label = getattr(function, "dsl_label", None)
    if label is not None:
        return label
    return f"python function '{getattr(function, '__qualname__', type(function).__name__)}'"


def call_named(
    function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], node: Node, ev: Evaluation, tail: bool
) -> Any:
    """Apply `function` to positional and named arguments; a DSL procedure gets them by parameter name."""
    if type(function) is not Closure:
        return call_python(function, args, kwargs, node)
    if not kwargs:
        return (TailCall if tail else run_closure)(function, args, node, ev)
    if function.rest is not None:
        raise ArityError(f"{function.describe()} is variadic and takes no named arguments", node)
    params = function.params
    unknown = [name for name in kwargs if name not in params]
    if unknown:
        raise ArityError(
            f"{function.describe()} has no parameter '{unknown[0]}' (its parameters: {' '.join(params)})", node
        )
    by_position = dict(zip(params, args, strict=False))
    twice = [name for name in kwargs if name in by_position]
    if twice:
        raise ArityError(f"{function.describe()} got parameter '{twice[0]}' both by position and by name", node)
    by_position.update(kwargs)
    if len(args) > len(params):
        raise ArityError(_arity_message(function, len(args)), node)
    missing = [name for name in params if name not in by_position]
    if missing:
        raise ArityError(f"{function.describe()} got no value for its parameter '{missing[0]}'", node)
    ordered = tuple(by_position[name] for name in params)
    return (TailCall if tail else run_closure)(function, ordered, node, ev)


class Analyzer:
    """Turns nodes into closures, checking the shape of special forms. One per program analysis."""

    def __init__(self, interpreter: Interpreter):
        self.interpreter = interpreter
        self.people: list[Any] = []  # the `(human)` phases of the program's loop forms, as analysed

    def analyze(self, node: Node, tail: bool = False) -> Exec:
        value = node.value
        if type(value) is tuple:
            if not value:
                return constant(NIL)
            head = value[0].value
            if type(head) is Symbol:
                handler = SPECIAL_FORMS.get(head)
                if handler is not None:
                    return handler(self, node, tail)
                if head in self.interpreter.named_operators:
                    return self.named_application(value[0], value[1:], node, tail)
            return self._application(node, tail)
        if type(value) is Symbol:
            return self._variable(node)
        return constant(value)

    def syntax_error(self, message: str, node: Node) -> DslSyntaxError:
        return DslSyntaxError(message, node)

    def body(self, nodes: Sequence[Node], tail: bool) -> Exec:
        """A sequence evaluated in order; its value is the last one's (nil when empty)."""
        if not nodes:
            return constant(NIL)
        execs = [self.analyze(item) for item in nodes[:-1]]
        last = self.analyze(nodes[-1], tail)
        if not execs:
            return last

        def sequence(env: Env, ev: Evaluation) -> Any:
            for run in execs:
                run(env, ev)
            return last(env, ev)

        return sequence

    def name(self, node: Node, what: str = "a name") -> str:
        """The symbol at `node` as a name that may be bound."""
        name = node.symbol
        if name is None:
            raise self.syntax_error(f"expected {what}, got {to_source(node.to_value())}", node)
        if name in SPECIAL_FORMS:
            raise self.syntax_error(f"'{name}' is a special form and cannot be used as a name", node)
        if name == ".":
            raise self.syntax_error("'.' may only appear in a parameter list, before the rest parameter", node)
        return name

    def parameters(self, node: Node) -> tuple[tuple[str, ...], str | None]:
        """A parameter list: `(a b)`, `(a . rest)`, or a single symbol `args` taking all arguments."""
        if not node.is_list:
            return (), self.name(node, "a parameter list")
        items = node.value
        names: list[str] = []
        rest: str | None = None
        for index, item in enumerate(items):
            if item.symbol == ".":
                if index != len(items) - 2:
                    raise self.syntax_error("'.' must be followed by exactly one rest parameter", item)
                rest = self.name(items[-1], "a rest parameter name")
                break
            names.append(self.name(item, "a parameter name"))
        for index, name in enumerate(names + ([rest] if rest else [])):
            if name in names[:index]:
                raise self.syntax_error(f"parameter '{name}' appears twice", node)
        return tuple(names), rest

    def lambda_(self, params_node: Node, body_nodes: Sequence[Node], node: Node, name: str | None) -> Exec:
        params, rest = self.parameters(params_node)
        if not body_nodes:
            raise self.syntax_error("a procedure needs a body: (lambda (params...) body...)", node)
        body = self.body(body_nodes, tail=True)
        interpreter = self.interpreter

        def make_closure(env: Env, ev: Evaluation) -> Closure:
            return Closure(params, rest, body, env, name, node, interpreter)

        return make_closure

    def options(
        self, items: Sequence[Node], known: Mapping[str, Callable[[Any], str | None]], form: str
    ) -> tuple[dict[str, tuple[Node, Exec]], Sequence[Node]]:
        """Leading `:keyword expr` pairs of `items`, and the items after them.

        `known` maps each option name to a checker returning what is wrong with a value (None when it is
        fine). Literal values are checked here, at analysis time; a form checks the values of other
        expressions with the same checker when it evaluates them (as the bounded loops do).
        """
        found: dict[str, tuple[Node, Exec]] = {}
        index = 0
        while index < len(items) and type(items[index].value) is Keyword:
            key_node = items[index]
            key = str(key_node.value)
            if key not in known:
                names = " ".join(f":{name}" for name in known)
                raise self.syntax_error(f"{form} has no option :{key} (its options: {names})", key_node)
            if key in found:
                raise self.syntax_error(f"option :{key} is given twice", key_node)
            if index + 1 >= len(items):
                raise self.syntax_error(f"option :{key} needs a value", key_node)
            value_node = items[index + 1]
            if not value_node.is_list and type(value_node.value) is not Symbol:
                problem = known[key](value_node.value)
                if problem is not None:
                    raise self.syntax_error(f":{key} {problem}", value_node)
            found[key] = (value_node, self.analyze(value_node))
            index += 2
        return found, items[index:]

    def named_application(self, operator: Node, arguments: Sequence[Node], node: Node, tail: bool) -> Exec:
        """``(f a (name expr) ...)``: two-element lists headed by a symbol are named arguments, unless the
        symbol names a special form (so `'x`, read as `(quote x)`, stays a positional argument)."""
        op = self.analyze(operator)
        positional: list[Exec] = []
        named: list[tuple[str, Exec]] = []
        for argument in arguments:
            items = argument.value
            key = items[0].symbol if type(items) is tuple and len(items) == 2 else None
            if key is not None and key not in SPECIAL_FORMS:
                if any(key == seen for seen, _ in named):
                    raise self.syntax_error(f"named argument '{key}' is given twice", argument)
                named.append((key, self.analyze(items[1])))
            else:
                positional.append(self.analyze(argument))

        def apply_named(env: Env, ev: Evaluation) -> Any:
            function = op(env, ev)
            args = tuple([run(env, ev) for run in positional])
            kwargs = {key: run(env, ev) for key, run in named}
            return call_named(function, args, kwargs, node, ev, tail)

        return apply_named

    def _variable(self, node: Node) -> Exec:
        name = self.name(node, "a name")
        withheld = self.interpreter.withheld.get(name)
        if withheld is not None:
            raise UnboundName(withheld, node)

        def lookup(env: Env, ev: Evaluation) -> Any:
            scopes = env
            while scopes is not None:
                scope = scopes.vars
                if name in scope:
                    return scope[name]
                scopes = scopes.parent
            raise UnboundName(f"unbound name '{name}'{nearest_name(name, env)}", node)

        return lookup

    def _application(self, node: Node, tail: bool) -> Exec:
        op = self.analyze(node.value[0])
        arg_execs = [self.analyze(item) for item in node.value[1:]]
        return _APPLICATIONS[min(len(arg_execs), len(_APPLICATIONS) - 1)](op, arg_execs, node, tail)


def constant(value: Any) -> Exec:
    """The closure of a self-evaluating value."""

    def self_evaluating(env: Env, ev: Evaluation) -> Any:
        return value

    return self_evaluating


# One application closure per argument count up to two, because building the argument tuple with a
# comprehension costs more than the rest of a call. A call in tail position is `TailCall`ed, one in
# any other position is run by `run_closure`; both take the same arguments. Python callables are
# called inline rather than through `call_python`, which saves a Python call per primitive.
def _application_0(op: Exec, arg_execs: list[Exec], node: Node, tail: bool) -> Exec:
    call_closure = TailCall if tail else run_closure

    def apply_0(env: Env, ev: Evaluation) -> Any:
        function = op(env, ev)
        if type(function) is Closure:
            return call_closure(function, (), node, ev)
        return call_python(function, (), None, node)

    return apply_0


def _application_1(op: Exec, arg_execs: list[Exec], node: Node, tail: bool) -> Exec:
    (first,) = arg_execs
    call_closure = TailCall if tail else run_closure

    def apply_1(env: Env, ev: Evaluation) -> Any:
        function = op(env, ev)
        args = (first(env, ev),)
        if type(function) is Closure:
            return call_closure(function, args, node, ev)
        try:
            result = function(*args)
        except Exception as exc:
            _raise_from_python(exc, function, args, node)
        return to_dsl(result) if result is None or type(result) is list else result

    return apply_1


def _application_2(op: Exec, arg_execs: list[Exec], node: Node, tail: bool) -> Exec:
    first, second = arg_execs
    call_closure = TailCall if tail else run_closure

    def apply_2(env: Env, ev: Evaluation) -> Any:
        function = op(env, ev)
        args = (first(env, ev), second(env, ev))
        if type(function) is Closure:
            return call_closure(function, args, node, ev)
        try:
            result = function(*args)
        except Exception as exc:
            _raise_from_python(exc, function, args, node)
        return to_dsl(result) if result is None or type(result) is list else result

    return apply_2


def _application_n(op: Exec, arg_execs: list[Exec], node: Node, tail: bool) -> Exec:
    call_closure = TailCall if tail else run_closure

    def apply_n(env: Env, ev: Evaluation) -> Any:
        function = op(env, ev)
        args = tuple([run(env, ev) for run in arg_execs])
        if type(function) is Closure:
            return call_closure(function, args, node, ev)
        return call_python(function, args, None, node)

    return apply_n


_APPLICATIONS = (_application_0, _application_1, _application_2, _application_n)

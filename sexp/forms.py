"""The core special forms. Each checks its shape when analysed and returns the closure that runs it.

- `(quote d)`, `'d`: the datum `d`, unevaluated.
- `(if test then [else])`: `then` when `test` is true, else `else` (nil when absent).
- `(cond (test body...) ... (else body...))`: the body of the first true test; a clause without a
  body gives the test's value; nil when no test holds.
- `(define name expr)`, `(define (name params...) body...)`: bind in the current scope; the form's
  value is the symbol `name`.
- `(bind name expr)`: the seed's binding form, like `define`; its value is the value bound.
- `(set! name expr)`: change the innermost existing binding (an unbound name is an error); its value
  is the new value.
- `(lambda (a b) body...)`, `(lambda (a . rest) body...)`, `(lambda args body...)`: a procedure;
  `rest` and `args` receive the extra arguments as a list.
- `(let ((name expr) ...) body...)`: parallel bindings in a new scope.
- `(begin body...)`, `(progn body...)`: evaluate in order; the last value (nil when empty).
- `(and x...)`, `(or x...)`: the deciding value; `(and)` is `#t`, `(or)` is `#f`.
- `(call f args...)`: apply `f` with named arguments, `(x 10)` passing `x=10`.
- `(map f list)`: when `f` is a symbol or a `lambda` form, apply that procedure to each item;
  otherwise evaluate the expression `f` once per item with `item` bound to it (the seed's form).
  Either way, a list of the results.
- `(loop count body...)`: evaluate the body `count` times; the last value (nil when `count` is 0).
- `(get_context (query expr) [(inputs expr)] [(matching_strategy expr)])`: ask the interpreter's
  context provider; a list of paths.
- `(log-message expr...)`: join the values with spaces (strings as their text) and add the message
  to the run's log (and Python logging); the message.
"""

from __future__ import annotations

from typing import Any

from loops.sexp.errors import DslTypeError, DslValueError, LimitExceeded, UnboundName
from loops.sexp.evaluator import Analyzer, Env, Evaluation, Exec, call_python, constant, nearest_name, special_form
from loops.sexp.reader import Node
from loops.sexp.values import NIL, Keyword, Symbol, is_list, to_source

__all__: list[str] = []

GET_CONTEXT_OPTIONS = ("query", "inputs", "matching_strategy")


def _shape(analyzer: Analyzer, node: Node, ok: bool, usage: str) -> None:
    if not ok:
        raise analyzer.syntax_error(f"malformed {node.value[0].symbol}: expected {usage}", node)


@special_form("quote")
def _quote(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    _shape(analyzer, node, len(node.value) == 2, "(quote datum)")
    try:
        return constant(node.value[1].to_value())
    except RecursionError:
        raise analyzer.syntax_error("quoted datum nested too deeply", node) from None


@special_form("if")
def _if(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    _shape(analyzer, node, 3 <= len(items) <= 4, "(if test then [else])")
    test = analyzer.analyze(items[1])
    then = analyzer.analyze(items[2], tail)
    if len(items) == 3:
        def if_then(env: Env, ev: Evaluation) -> Any:
            return then(env, ev) if test(env, ev) else NIL

        return if_then
    otherwise = analyzer.analyze(items[3], tail)

    def if_then_else(env: Env, ev: Evaluation) -> Any:
        return then(env, ev) if test(env, ev) else otherwise(env, ev)

    return if_then_else


@special_form("cond")
def _cond(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    clauses: list[tuple[Exec | None, Exec | None]] = []
    last_index = len(node.value) - 2
    for index, clause in enumerate(node.value[1:]):
        if not clause.is_list or not clause.value:
            raise analyzer.syntax_error(f"a cond clause is (test body...), got {to_source(clause.to_value())}", clause)
        head, *body = clause.value
        if head.symbol == "else":
            if index != last_index:
                raise analyzer.syntax_error("the else clause must be the last cond clause", clause)
            if not body:
                raise analyzer.syntax_error("the else clause needs a body: (else body...)", clause)
            clauses.append((None, analyzer.body(body, tail)))
        else:
            clauses.append((analyzer.analyze(head), analyzer.body(body, tail) if body else None))

    def cond(env: Env, ev: Evaluation) -> Any:
        for test, body in clauses:
            if test is None:
                return body(env, ev)
            value = test(env, ev)
            if value:
                return value if body is None else body(env, ev)
        return NIL

    return cond


def _binding_form(analyzer: Analyzer, node: Node, usage: str) -> tuple[str, Exec]:
    items = node.value
    _shape(analyzer, node, len(items) == 3, usage)
    name = analyzer.name(items[1])
    value_node = items[2]
    if value_node.is_list and len(value_node.value) >= 3 and value_node.value[0].symbol == "lambda":
        return name, analyzer.lambda_(value_node.value[1], value_node.value[2:], value_node, name)
    return name, analyzer.analyze(value_node)


@special_form("define")
def _define(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    _shape(analyzer, node, len(items) >= 2, "(define name expr) or (define (name params...) body...)")
    target = items[1]
    if target.is_list:
        _shape(analyzer, node, bool(target.value), "(define (name params...) body...)")
        name = analyzer.name(target.value[0], "a procedure name")
        params = Node(target.value[1:], target.source, target.line, target.col)
        value = analyzer.lambda_(params, items[2:], node, name)
    else:
        name, value = _binding_form(analyzer, node, "(define name expr) or (define (name params...) body...)")
    symbol = Symbol(name)

    def define(env: Env, ev: Evaluation) -> Any:
        env.vars[name] = value(env, ev)
        return symbol

    return define


@special_form("bind")
def _bind(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    name, value = _binding_form(analyzer, node, "(bind name expr)")

    def bind(env: Env, ev: Evaluation) -> Any:
        result = env.vars[name] = value(env, ev)
        return result

    return bind


@special_form("set!")
def _set(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    name, value = _binding_form(analyzer, node, "(set! name expr)")
    name_node = node.value[1]

    def set_(env: Env, ev: Evaluation) -> Any:
        scope = env.find(name)
        if scope is None:
            raise UnboundName(f"cannot set! '{name}': it is not defined (define it first){nearest_name(name, env)}",
                              name_node)
        result = scope.vars[name] = value(env, ev)
        return result

    return set_


@special_form("lambda")
def _lambda(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    _shape(analyzer, node, len(items) >= 3, "(lambda (params...) body...)")
    return analyzer.lambda_(items[1], items[2:], node, None)


@special_form("let")
def _let(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    _shape(analyzer, node, len(items) >= 3 and items[1].is_list, "(let ((name expr) ...) body...)")
    bindings: list[tuple[str, Exec]] = []
    for binding in items[1].value:
        if not binding.is_list or len(binding.value) != 2:
            raise analyzer.syntax_error(f"a let binding is (name expr), got {to_source(binding.to_value())}", binding)
        name = analyzer.name(binding.value[0])
        if any(name == bound for bound, _ in bindings):
            raise analyzer.syntax_error(f"'{name}' is bound twice in this let", binding)
        bindings.append((name, analyzer.analyze(binding.value[1])))
    body = analyzer.body(items[2:], tail)

    def let(env: Env, ev: Evaluation) -> Any:
        return body(Env({name: init(env, ev) for name, init in bindings}, env), ev)

    return let


@special_form("begin")
@special_form("progn")
def _begin(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    return analyzer.body(node.value[1:], tail)


def _connective(analyzer: Analyzer, node: Node, tail: bool, stop_when: bool) -> Exec:
    operands = node.value[1:]
    if not operands:
        return constant(not stop_when)
    leading = [analyzer.analyze(operand) for operand in operands[:-1]]
    last = analyzer.analyze(operands[-1], tail)

    def connective(env: Env, ev: Evaluation) -> Any:
        for run in leading:
            value = run(env, ev)
            if bool(value) is stop_when:
                return value
        return last(env, ev)

    return connective


@special_form("and")
def _and(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    return _connective(analyzer, node, tail, stop_when=False)


@special_form("or")
def _or(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    return _connective(analyzer, node, tail, stop_when=True)


@special_form("call")
def _call(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    _shape(analyzer, node, len(items) >= 2, "(call procedure args...) with named arguments written (name expr)")
    return analyzer.named_application(items[1], items[2:], node, tail)


def _list_operand(value: Any, node: Node, form: str) -> Any:
    if not is_list(value):
        raise DslTypeError(f"{form} expects a list, got {to_source(value)}", node)
    return value


@special_form("map")
def _map(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    _shape(analyzer, node, len(items) == 3, "(map procedure list) or (map expression-using-item list)")
    function_node, list_node = items[1], items[2]
    values_of = analyzer.analyze(list_node)
    function_value = function_node.value
    is_procedure = function_node.symbol is not None or (
        type(function_value) is tuple and bool(function_value) and function_value[0].symbol == "lambda"
    )
    if is_procedure:
        procedure_of = analyzer.analyze(function_node)

        def map_procedure(env: Env, ev: Evaluation) -> Any:
            procedure = procedure_of(env, ev)
            results = []
            for value in _list_operand(values_of(env, ev), list_node, "map"):
                ev.tick(node)
                results.append(ev.apply(procedure, (value,), node))
            return tuple(results)

        return map_procedure
    template = analyzer.analyze(function_node)

    def map_template(env: Env, ev: Evaluation) -> Any:
        results = []
        for value in _list_operand(values_of(env, ev), list_node, "map"):
            ev.tick(node)
            results.append(template(Env({"item": value}, env), ev))
        return tuple(results)

    return map_template


@special_form("loop")
def _loop(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    _shape(analyzer, node, len(items) >= 3, "(loop count body...)")
    count_node = items[1]
    count_of = analyzer.analyze(count_node)
    body = analyzer.body(items[2:], tail=False)

    def loop(env: Env, ev: Evaluation) -> Any:
        count = count_of(env, ev)
        if type(count) is not int or count < 0:
            raise DslValueError(f"loop count must be a non-negative integer, got {to_source(count)}", count_node)
        value = NIL
        for _ in range(count):
            ev.tick(node)
            value = body(env, ev)
        return value

    return loop


@special_form("get_context")
def _get_context(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    options: list[tuple[str, Exec]] = []
    for option in node.value[1:]:
        if not option.is_list or len(option.value) != 2 or option.value[0].symbol is None:
            raise analyzer.syntax_error(
                f'a get_context option is (name expr), e.g. (query "..."); got {to_source(option.to_value())}', option
            )
        key = option.value[0].symbol
        if key not in GET_CONTEXT_OPTIONS:
            raise analyzer.syntax_error(
                f"get_context has no option '{key}' (its options: {' '.join(GET_CONTEXT_OPTIONS)})", option
            )
        if any(key == seen for seen, _ in options):
            raise analyzer.syntax_error(f"get_context option '{key}' is given twice", option)
        options.append((key, analyzer.analyze(option.value[1])))
    _shape(analyzer, node, bool(options), '(get_context (query "...") [(inputs ...)] [(matching_strategy ...)])')

    def get_context(env: Env, ev: Evaluation) -> Any:
        return call_python(ev.interpreter.context, (), {key: run(env, ev) for key, run in options}, node)

    return get_context


@special_form("log-message")
def _log_message(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    _shape(analyzer, node, len(node.value) >= 2, "(log-message expr...)")
    parts = [analyzer.analyze(item) for item in node.value[1:]]

    def log_message(env: Env, ev: Evaluation) -> Any:
        values = [run(env, ev) for run in parts]
        cap = ev.limits.max_string_chars
        text = " ".join(
            str(value) if isinstance(value, str) and not isinstance(value, Keyword)
            else to_source(value, limit=cap + 1, check=ev.check_clock)
            for value in values
        )
        if len(text) > cap:
            raise LimitExceeded(f"log-message would make a message of more than {cap:,} characters "
                                "(Limits.max_string_chars)", node, limit="max_string_chars")
        ev.log_message(text)
        return text

    return log_message

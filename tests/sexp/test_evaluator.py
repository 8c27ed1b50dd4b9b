import pytest

from loops.errors import LoopsError
from loops.sexp import (
    ArityError,
    DslError,
    DslSyntaxError,
    DslTypeError,
    DslValueError,
    Env,
    Interpreter,
    Symbol,
    UnboundName,
    evaluate,
    to_source,
)

# (program, the printed value it evaluates to, or the error it raises)
CASES = [
    # atoms and quote
    ("42", "42"), ("-4.5", "-4.5"), ('"hi"', '"hi"'), ("#t", "#t"), ("false", "#f"), ("nil", "nil"), ("()", "nil"),
    (":key", ":key"), ("'sym", "sym"), ("'(1 (a \"b\") nil)", '(1 (a "b") nil)'), ("(quote x)", "x"),
    ("(quote)", DslSyntaxError), ("(quote a b)", DslSyntaxError), ("undefined-name", UnboundName),
    ("1 2 3", "3"), ("", "nil"),
    # if / cond
    ("(if #t 1 2)", "1"), ("(if #f 1 2)", "2"), ("(if #f 1)", "nil"), ("(if 0 'yes 'no)", "no"),
    ('(if "" \'yes \'no)', "no"), ("(if nil 'yes 'no)", "no"), ("(if '(0) 'yes 'no)", "yes"),
    ("(if 0.0 'yes 'no)", "no"), ("(if)", DslSyntaxError), ("(if 1)", DslSyntaxError),
    ("(if 1 2 3 4)", DslSyntaxError),
    ("(cond ((= 1 2) 'a) ((= 1 1) 'b) (else 'c))", "b"), ("(cond (#f 1) (else 2 3))", "3"),
    ("(cond (#f 1))", "nil"), ("(cond (7))", "7"), ("(cond)", "nil"),
    ("(cond (else 1) (#t 2))", DslSyntaxError), ("(cond (else))", DslSyntaxError), ("(cond 1)", DslSyntaxError),
    ("(cond ())", DslSyntaxError),
    # define / bind / set! / let / begin
    ("(define x 5) x", "5"), ("(define x 5)", "x"), ("(define (sq x) (* x x)) (sq 7)", "49"),
    ("(define (f) 1) (f)", "1"), ("(define)", DslSyntaxError), ("(define 1 2)", DslSyntaxError),
    ("(define x)", DslSyntaxError), ("(define x 1 2)", DslSyntaxError), ("(define ())", DslSyntaxError),
    ("(define (f x))", DslSyntaxError), ("(define (f x x) x)", DslSyntaxError), ("(define if 1)", DslSyntaxError),
    ("(define (loop n) n)", DslSyntaxError),
    ("(bind r (+ 1 2))", "3"), ("(bind r (+ 1 2)) r", "3"), ("(bind r)", DslSyntaxError),
    ("(define x 1) (set! x 2)", "2"), ("(define x 1) (set! x (+ x 1)) x", "2"), ("(set! nope 1)", UnboundName),
    ("(define x 1) (define (f) (set! x 10)) (f) x", "10"), ("(set! x)", DslSyntaxError),
    ("(let ((x 1) (y 2)) (+ x y))", "3"), ("(let () 5)", "5"), ("(define x 1) (let ((x 2) (y x)) y)", "1"),
    ("(let ((x 1)) (define z 2) (+ x z))", "3"), ("(let ((x 1)) (define z 2)) z", UnboundName),
    ("(let (x) x)", DslSyntaxError), ("(let ((x 1)))", DslSyntaxError), ("(let x 1)", DslSyntaxError),
    ("(let ((x 1) (x 2)) x)", DslSyntaxError), ("(let ((1 2)) 1)", DslSyntaxError),
    ("(begin 1 2 3)", "3"), ("(begin)", "nil"), ("(progn (define a 1) (+ a 1))", "2"),
    # lambda, closures, variadic procedures
    ("((lambda (x y) (- x y)) 10 3)", "7"), ("((lambda () 42))", "42"),
    ("(define (adder n) (lambda (x) (+ x n))) ((adder 5) 10)", "15"),
    ("(define (counter) (define n 0) (lambda () (set! n (+ n 1)) n)) (define c (counter)) (c) (c)", "2"),
    ("((lambda (a . rest) (list a rest)) 1 2 3)", "(1 (2 3))"), ("((lambda (a . rest) rest) 1)", "nil"),
    ("((lambda args args) 1 2)", "(1 2)"), ("((lambda args args))", "nil"), ("(define (f . xs) xs) (f 1)", "(1)"),
    ("((lambda (x) x))", ArityError), ("((lambda (x) x) 1 2)", ArityError), ("((lambda (a . r) a))", ArityError),
    ("(lambda (x))", DslSyntaxError), ("(lambda)", DslSyntaxError), ("(lambda (1) 1)", DslSyntaxError),
    ("(lambda (a .) a)", DslSyntaxError), ("(lambda (a . b c) a)", DslSyntaxError),
    ("((lambda (. b) b) 1 2)", "(1 2)"), ("(lambda (a . a) a)", DslSyntaxError), ("(5 1)", DslTypeError),
    ('("f")', DslTypeError), ("(if 1)", DslSyntaxError), ("(+ if 1)", DslSyntaxError), ("(list .)", DslSyntaxError),
    # and / or / not
    ("(and 1 2 3)", "3"), ("(and 1 #f 3)", "#f"), ("(and 1 0 3)", "0"), ("(and)", "#t"),
    ('(or #f 0 "" nil)', "nil"), ("(or #f 7 8)", "7"), ("(or)", "#f"), ("(and #f undefined)", "#f"),
    ("(or 1 undefined)", "1"), ("(not 0)", "#t"), ("(not 'a)", "#f"), ("(not nil)", "#t"), ("(not)", ArityError),
    # lists
    ("(list 1 2 3)", "(1 2 3)"), ("(list)", "nil"), ("(car '(1 2))", "1"), ("(cdr '(1 2))", "(2)"),
    ("(cdr '(1))", "nil"), ("(cons 1 '(2))", "(1 2)"), ("(cons 1 nil)", "(1)"), ("(null? nil)", "#t"),
    ("(null? '())", "#t"), ("(null? (cdr '(1)))", "#t"), ("(null? '(1))", "#f"), ("(null? 0)", "#f"),
    ("(nil? nil)", "#t"), ("(length '(1 2 3))", "3"), ("(length nil)", "0"), ('(length "abc")', "3"),
    ("(append '(1) '(2 3) nil '(4))", "(1 2 3 4)"), ("(append)", "nil"),
    ("(car nil)", DslValueError), ("(cdr nil)", DslValueError), ("(car 5)", DslTypeError),
    ("(cons 1 2)", DslTypeError), ("(length 5)", DslTypeError), ("(append '(1) 2)", DslTypeError),
    ("(car '(1) '(2))", ArityError), ("(cons 1)", ArityError),
    # arithmetic and comparisons
    ("(+ 1 2 3)", "6"), ("(+)", "0"), ("(+ 1 2.5)", "3.5"), ("(- 10 1 2)", "7"), ("(- 5)", "-5"), ("(*)", "1"),
    ("(* 2 3 4)", "24"), ("(/ 6 3)", "2"), ("(/ 7 2)", "3.5"), ("(/ 2)", "0.5"), ("(/ 1.0 4)", "0.25"),
    ("(/ 60 2 3)", "10"), ("(+ 1 \"a\")", DslTypeError), ("(+ #t 1)", DslTypeError), ("(-)", ArityError),
    ("(/)", ArityError), ("(/ 1 0)", DslValueError), ("(/ 1.5 0.0)", DslValueError), ("(/ 0)", DslValueError),
    ("(* 'a 2)", DslTypeError), ("(+ 1e308 1e308)", "+inf.0"),
    ("(= 1 1 1)", "#t"), ("(= 1 1.0)", "#t"), ("(= 1 2)", "#f"), ("(< 1 2 3)", "#t"), ("(< 1 3 2)", "#f"),
    ("(> 3 2 1)", "#t"), ("(<= 1 1 2)", "#t"), ("(>= 2 2 3)", "#f"), ("(< 1)", ArityError), ("(<)", ArityError),
    ('(< 1 "2")', DslTypeError), ("(= 'a 'a)", DslTypeError),
    # equality
    ("(eq? 'a 'a)", "#t"), ("(eq? 'a 'b)", "#f"), ("(eq? 1 1)", "#t"), ("(eq? 1 1.0)", "#f"), ("(eq? nil '())", "#t"),
    ('(eq? "a" "a")', "#t"), ("(eq? '(1) '(1))", "#f"), ("(define l '(1)) (eq? l l)", "#t"), ("(eq? #t 1)", "#f"),
    ("(equal? '(1 (2 \"x\")) (list 1 (list 2 \"x\")))", "#t"), ("(equal? 1 1.0)", "#t"),
    ("(equal? 'a \"a\")", "#f"), ("(equal? #t 1)", "#f"), ("(equal? '(1 2) '(1 2 3))", "#f"),
    ("(equal? nil '())", "#t"), ("(equal? :a 'a)", "#f"),
    # strings
    ('(string-append "a" "b" "c")', '"abc"'), ("(string-append)", '""'), ('(string-append "a" \'b)', '"ab"'),
    ('(string-append "a" 1)', DslTypeError), ('(string=? "a" "a" "a")', "#t"), ('(string=? "a" "b")', "#f"),
    ("(string=? 'stop \"stop\")", "#t"), ("(string=? 1 1)", DslTypeError), ("(string=?)", ArityError),
    ('(string=? "a")', ArityError),
    # records
    ("(get-field (list (list 'prompt \"p\") (list \"files\" '(\"f\"))) 'files)", '("f")'),
    ("(get-field (list (list 'a 1)) \"b\")", "nil"), ("(get-field nil 'x)", "nil"), ("(get-field '(1 2) 'x)", "nil"),
    ("(get-field 5 'real)", "5"), ('(get-field "s" \'upper)', DslTypeError),
    ("(get-field 5 '__class__)", DslValueError),
    ("(get-field 5 1)", DslTypeError), ("(get-field 5 'no-such-attribute)", "nil"),
    # call with named arguments, map, loop, log-message
    ("(define (f x y) (- x y)) (call f (y 1) (x 10))", "9"), ("(define (f x y) (- x y)) (call f 10 (y 1))", "9"),
    ("(define (f x) x) (call f (z 1))", ArityError), ("(define (f x y) x) (call f (x 1))", ArityError),
    ("(define (f x) x) (call f 1 (x 1))", ArityError), ("(define (f . x) x) (call f (x 1))", ArityError),
    ("(call car '(1 2))", "1"), ("(call)", DslSyntaxError), ("(call list (a 1) (a 2))", DslSyntaxError),
    ("(map (+ item 1) '(1 2 3))", "(2 3 4)"), ("(map (lambda (x) (* x x)) '(1 2 3))", "(1 4 9)"),
    ("(define (sq x) (* x x)) (map sq '(1 2))", "(1 4)"), ("(map car '((1) (2)))", "(1 2)"),
    ("(map (+ item 1) nil)", "nil"), ("(map (+ item 1) 5)", DslTypeError), ("(map sq)", DslSyntaxError),
    ("(map 5 '(1))", "(5)"),
    ("(loop 3 'x)", "x"), ("(loop 0 'x)", "nil"), ("(define n 0) (loop 4 (set! n (+ n 1))) n", "4"),
    ("(loop -1 1)", DslValueError), ("(loop 1.5 1)", DslValueError), ("(loop 3)", DslSyntaxError),
    ('(log-message "count:" 3 \'sym "x")', '"count: 3 sym x"'), ("(log-message)", DslSyntaxError),
]


@pytest.mark.parametrize(("source", "expected"), CASES, ids=[source for source, _ in CASES])
def test_forms_and_primitives(source, expected):
    if isinstance(expected, str):
        assert to_source(evaluate(source)) == expected
    else:
        with pytest.raises(expected) as caught:
            evaluate(source)
        assert type(caught.value) is expected
        assert caught.value.node is not None, "every DSL error carries its position"


@pytest.mark.parametrize(("source", "rendered"), [
    ("(define (f x)\n  (if x\n      (+ foo 1)))\n(f 1)",
     "program.sexp:3:10: unbound name 'foo'\n          (+ foo 1)))\n             ^"),
    ("(define (area w h) (* w h))\n(area 3)",
     "program.sexp:2:1: procedure 'area' expects 2 arguments, got 1\n    (area 3)\n    ^"),
    ("((lambda (x) x) 1 2)", "program.sexp:1:1: lambda expects 1 argument, got 2\n    ((lambda (x) x) 1 2)\n    ^"),
    ("(define (f a . rest) a)\n(f)",
     "program.sexp:2:1: procedure 'f' expects at least 1 argument, got 0\n    (f)\n    ^"),
    ("(car '(1) 2)", "program.sexp:1:1: 'car' expects 1 argument, got 2\n    (car '(1) 2)\n    ^"),
    ("(define x 1)\n(if)", "program.sexp:2:1: malformed if: expected (if test then [else])\n    (if)\n    ^"),
    ("(let (x) x)", "program.sexp:1:7: a let binding is (name expr), got x\n    (let (x) x)\n          ^"),
    ("(set! counter 1)",
     "program.sexp:1:7: cannot set! 'counter': it is not defined (define it first)\n    (set! counter 1)\n          ^"),
    ("(+ 1 (/ 10 0))", "program.sexp:1:6: division by zero\n    (+ 1 (/ 10 0))\n         ^"),
    ('(+ 1 "a")', "program.sexp:1:1: '+' expects numbers, got \"a\"\n    (+ 1 \"a\")\n    ^"),
    ("(5 1)", "program.sexp:1:1: 5 is not a procedure\n    (5 1)\n    ^"),
    ("(define (if) 1)", "program.sexp:1:10: 'if' is a special form and cannot be used as a name\n"
                        "    (define (if) 1)\n             ^"),
    ("(cond (else 1) (#t 2))",
     "program.sexp:1:7: the else clause must be the last cond clause\n    (cond (else 1) (#t 2))\n          ^"),
])
def test_error_messages_render_exactly(source, rendered):
    with pytest.raises(DslError) as caught:
        Interpreter().eval_source(source, "program.sexp")
    assert str(caught.value) == rendered


def test_a_malformed_form_anywhere_is_reported_before_anything_runs():
    interpreter = Interpreter()
    with pytest.raises(DslSyntaxError):
        interpreter.eval_source("(define ran 1)\n(lambda (x) (if))")
    with pytest.raises(UnboundName):
        interpreter.eval_source("ran")


def test_the_errors_are_one_hierarchy_under_loops_errors():
    for error in (DslSyntaxError, UnboundName, ArityError, DslTypeError, DslValueError):
        assert issubclass(error, DslError) and issubclass(error, LoopsError)
    assert issubclass(UnboundName, NameError) and issubclass(ArityError, TypeError)
    assert issubclass(DslValueError, ValueError) and issubclass(DslSyntaxError, SyntaxError)


def test_definitions_persist_between_inputs_as_a_repl_needs():
    repl = Interpreter()
    repl.eval_source("(define (double x) (* 2 x))")
    repl.eval_source("(bind total (double 21))")
    assert repl.eval_source("total") == 42
    assert repl.eval_source("(set! total (+ total 1)) total") == 43


def test_bindings_are_variables_and_python_values_become_dsl_values():
    assert evaluate("(list n (null? nothing) items (car items))", n=3, nothing=None, items=[1, [2]]) == (
        3, True, (1, (2,)), 1,
    )
    assert evaluate("(f 2 3)", f=lambda a, b: a * b) == 6


def test_a_symbol_is_a_string_for_python_and_prints_as_a_name():
    value = evaluate("'stop")
    assert value == "stop" and isinstance(value, Symbol) and repr(value) == "Symbol('stop')"
    assert evaluate("(list 'continue 5)") == ("continue", 5)


def test_records_print_with_their_keys_and_none_prints_as_nil():
    record = {"out": "x\n", "error": None, "n": [1, 2]}
    assert to_source(evaluate("r", r=record)) == '{out: "x\\n", error: nil, n: (1 2)}'
    assert evaluate("(get-field r 'error)", r={"error": None}) == ()
    assert evaluate("(get-field r \"_private_key\")", r={"_private_key": 1}) == 1


def test_get_field_reads_data_attributes_but_never_private_names_or_code():
    class Result:
        def __init__(self):
            self.status, self._secret = "COMPLETE", "s"

        def method(self):
            raise AssertionError("never called")

    result = Result()
    assert evaluate("(get-field r 'status)", r=result) == "COMPLETE"
    with pytest.raises(DslValueError, match="refuses the private name '_secret'"):
        evaluate("(get-field r '_secret)", r=result)
    with pytest.raises(DslTypeError, match="field 'method' of #<Result> is not data"):
        evaluate("(get-field r 'method)", r=result)


@pytest.mark.parametrize("program", [
    "(define (f) 1) (get-field f 'interpreter)",
    "(define (f) 1) (get-field f 'env)",
    "(get-field (lambda (x) x) 'body)",
    "(get-field system:write_file 'function)",
    "(get-field car 'dsl_name)",
])
def test_get_field_hands_out_nothing_of_the_interpreter(program):
    with pytest.raises(DslTypeError, match="'get-field' reads data, and #<.*> is code: it has no fields"):
        evaluate(program)


def test_get_field_refuses_the_interpreters_own_objects_a_host_object_holds():
    class Holder:
        def __init__(self, scope):
            self.scope, self.name = scope, "holder"

    holder = Holder(Env({}))
    assert evaluate("(get-field h 'name)", h=holder) == "holder"
    with pytest.raises(DslTypeError, match="field 'scope' of #<Holder> is not data"):
        evaluate("(get-field h 'scope)", h=holder)


def test_log_message_collects_into_the_runs_log():
    interpreter = Interpreter()
    interpreter.eval_source('(log-message "a") (log-message "b" 1)')
    assert interpreter.last_run.log == ["a", "b 1"]


def test_printing_procedures_and_python_objects():
    assert to_source(evaluate("(define (f x) x) f")) == "#<procedure f>"
    assert to_source(evaluate("(lambda (x) x)")) == "#<procedure lambda>"
    assert to_source(evaluate("car")) == "#<primitive 'car'>"
    assert to_source(evaluate("system:write_file")) == "#<tool 'system:write_file'>"
    assert to_source(evaluate("o", o=object())) == "#<object>"
    assert to_source(len) == "#<python len>"


def test_printing_a_self_containing_python_list_stops_at_the_cycle():
    cycle = [1]
    cycle.append(cycle)
    assert to_source(cycle) == "(1 ...)"


@pytest.mark.parametrize(("source", "message"), [
    ("(lenght (list 1))", "unbound name 'lenght'; did you mean 'length'?"),
    ("(define total 1) (+ totl 1)", "unbound name 'totl'; did you mean 'total'?"),
    ("(define total 1) (set! totla 2)", "cannot set! 'totla': it is not defined (define it first); did you mean "
                                        "'total'?"),
    ("(define (f count) (+ cuont 1)) (f 1)", "unbound name 'cuont'; did you mean 'count'?"),  # a local name too
    ("(frobnicate 1)", "unbound name 'frobnicate'"),  # nothing near: no guess
])
def test_an_unbound_name_suggests_the_nearest_bound_one(source, message):
    with pytest.raises(UnboundName) as raised:
        Interpreter().eval_source(source)
    assert raised.value.message == message

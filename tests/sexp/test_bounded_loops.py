import time

import pytest

from loops.sexp import DslSyntaxError, DslTypeError, DslValueError, Interpreter, to_source


def run(source, **tools):
    interpreter = Interpreter(tools=tools)
    value = interpreter.eval_source(source, "loops.sexp")
    return value, interpreter.warnings


@pytest.mark.parametrize("limit", [0, 1, 7, 1000])
def test_max_iterations_n_runs_exactly_n_bodies_then_stops_with_a_warning(limit):
    value, warnings = run(f"(define n 0) (while #t :max-iterations {limit} (set! n (+ n 1))) n")
    assert value == limit
    assert warnings == [
        f"loops.sexp:1:14: while stopped at max-iterations {limit} with more to do; its value is the last body's"
    ]


@pytest.mark.parametrize("limit", [0, 1, 5])
def test_a_loop_that_finishes_exactly_at_its_limit_gives_no_warning(limit):
    program = f"""
    (define i 0)
    (list (while (< i {limit}) :max-iterations {limit} (set! i (+ i 1)))
          (for (j 0 {limit}) :max-iterations {limit} j)
          (for-each (x (map (+ item 0) (append (list {" ".join(["1"] * limit)})))) :max-iterations {limit} x)
          i)
    """
    value, warnings = run(program)
    assert value[3] == limit
    assert warnings == []


def test_the_default_and_hard_cap_is_1000_iterations():
    value, warnings = run("(define n 0) (until #f (set! n (+ n 1)))")
    assert value == 1000 and "until stopped at max-iterations 1000" in warnings[0]
    with pytest.raises(DslSyntaxError) as caught:
        run("(while #t :max-iterations 1001 1)")
    assert str(caught.value) == (
        "loops.sexp:1:27: :max-iterations 1001 is over the hard cap of 1000 iterations\n"
        "    (while #t :max-iterations 1001 1)\n"
        "                              ^"
    )
    with pytest.raises(DslValueError, match=":max-iterations 5000 is over the hard cap"):
        run("(define big 5000) (for (i 0 10) :max-iterations big i)")


@pytest.mark.parametrize(("program", "expected"), [
    ("(define i 0) (while (< i 3) (set! i (+ i 1)) (* i 10))", "30"),
    ("(while #f 1)", "nil"),
    ("(define i 0) (until (>= i 4) (set! i (+ i 1)))", "4"),
    ("(until #t 1)", "nil"),
    ("(define i 0) (while (< i 2) (set! i (+ i 1)))", "2"),
    ("(for (i 0 5) i)", "4"),
    ("(for (i 0 10 3) i)", "9"),
    ("(for (i 10 0 -3) i)", "1"),
    ("(for (i 0 0) i)", "nil"),
    ("(for (i 0 1 0.25) i)", "0.75"),
    ("(define total 0) (for (i 1 4) (set! total (+ total i))) total", "6"),
    ("(for-each (x '(a b c)) x)", "c"),
    ("(for-each (x i '(a b c)) (list i x))", "(2 c)"),
    ("(for-each (x nil) x)", "nil"),
    ("(define seen nil) (for-each (x i '(a b)) (set! seen (cons (list i x) seen))) seen", "((1 b) (0 a))"),
    ("(define procs nil) (for (i 0 3) (set! procs (cons (lambda () i) procs))) (map (lambda (p) (p)) procs)",
     "(2 1 0)"),
    ("(define n 4) (for (i 0 10) :max-iterations (- n 1) :timeout 60 :max-context-chars 1000 i)", "2"),
])
def test_loop_values_are_the_last_body_value(program, expected):
    value, warnings = run(program)
    assert to_source(value) == expected
    assert all("max-iterations" in warning for warning in warnings)


def test_a_loop_stops_at_its_context_size_limit_with_its_last_value_and_warns_at_80_percent():
    # Each value prints as 10 characters ("xxxxxxxx" with its quotes).
    value, warnings = run('(for (i 0 100) :max-context-chars 45 "xxxxxxxx")')
    assert value == "xxxxxxxx"
    assert warnings == [
        "loops.sexp:1:1: for values reached 40 chars, 88 % of max-context-chars 45",
        "loops.sexp:1:1: for stopped after 5 iterations: its values reached 50 chars, over max-context-chars 45; "
        "its value is the last body's",
    ]


def test_a_loop_stops_at_its_timeout_with_its_last_value():
    started = time.monotonic()
    program = "(define n 0) (while #t :timeout 0.2 (pause) (set! n (+ n 1)))"
    value, warnings = run(program, pause=lambda: time.sleep(0.02))
    assert time.monotonic() - started < 2
    assert 3 <= value < 20
    assert len(warnings) == 1 and f"while stopped by its timeout of 0.2s after {value} iterations" in warnings[0]


def test_a_program_continues_after_a_loop_stopped_by_a_limit():
    value, warnings = run("(define a (while #t :max-iterations 2 'partial)) (list a 'after)")
    assert to_source(value) == "(partial after)" and len(warnings) == 1


@pytest.mark.parametrize(("program", "error", "message"), [
    ("(while)", DslSyntaxError, "malformed while: expected (while condition [:max-iterations n]"),
    ("(while #t :max-iterations)", DslSyntaxError, "option :max-iterations needs a value"),
    ("(while #t :limit 3 1)", DslSyntaxError,
     "while has no option :limit (its options: :max-iterations :timeout :max-context-chars)"),
    ("(while #t :timeout 1 :timeout 2 1)", DslSyntaxError, "option :timeout is given twice"),
    ("(while #t :max-iterations -1 1)", DslSyntaxError, ":max-iterations must be a non-negative integer, got -1"),
    ("(while #t :max-iterations 2.0 1)", DslSyntaxError, ":max-iterations must be a non-negative integer, got 2.0"),
    ("(while #t :timeout 0 1)", DslSyntaxError, ":timeout must be a positive number of seconds, got 0"),
    ('(while #t :timeout "1" 1)', DslSyntaxError, ':timeout must be a positive number of seconds, got "1"'),
    ("(while #t :max-context-chars 0 1)", DslSyntaxError, ":max-context-chars must be a positive integer, got 0"),
    ("(define t -1) (while #t :timeout t 1)", DslValueError, ":timeout must be a positive number of seconds, got -1"),
    ("(for i 1)", DslSyntaxError, "malformed for: expected (for (name start end [step])"),
    ("(for (i 1) i)", DslSyntaxError, "malformed for: expected (for (name start end [step])"),
    ("(for (1 0 2) 1)", DslSyntaxError, "expected a loop variable name, got 1"),
    ("(for (i 0 5 0) i)", DslValueError, "the step of a for loop must not be 0"),
    ('(for (i 0 "5") i)', DslTypeError, 'the end of a for loop must be a number, got "5"'),
    ("(for-each x 1)", DslSyntaxError, "malformed for-each: expected (for-each (item [index] list)"),
    ("(for-each (x i j '(1)) x)", DslSyntaxError, "malformed for-each"),
    ("(for-each (x x '(1)) x)", DslSyntaxError, "'x' names both the item and the index"),
    ("(for-each (x 5) x)", DslTypeError, "for-each expects a list, got 5"),
])
def test_malformed_loops_and_bad_options_are_errors_at_their_position(program, error, message):
    with pytest.raises(error) as caught:
        run(program)
    assert type(caught.value) is error
    assert caught.value.message.startswith(message)

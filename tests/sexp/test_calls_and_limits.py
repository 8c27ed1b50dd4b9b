import re
import threading
import time

import pytest

from loops import Budget
from loops.errors import ConfigurationError
from loops.sexp import (
    Analyzer,
    ArityError,
    Closure,
    DslError,
    DslSyntaxError,
    Evaluation,
    Interpreter,
    LimitExceeded,
    Limits,
    Tool,
    UnboundName,
    evaluate,
    special_form,
    to_source,
)
from loops.sexp import compile as compile_program
from loops.sexp.evaluator import SPECIAL_FORMS

COUNTDOWN = "(define (countdown n) (if (= n 0) 'done (countdown (- n 1))))"


def test_a_tail_recursive_loop_of_100000_iterations_runs_in_constant_python_stack():
    assert evaluate(COUNTDOWN + "(countdown 100000)") == "done"


@pytest.mark.parametrize("tail_position", [
    "(define (loop-to n acc) (if (= n 0) acc (loop-to (- n 1) (+ acc 1))))",
    "(define (loop-to n acc) (cond ((= n 0) acc) (else (loop-to (- n 1) (+ acc 1)))))",
    "(define (loop-to n acc) (let ((m (- n 1))) (if (< m 0) acc (loop-to m (+ acc 1)))))",
    "(define (loop-to n acc) (begin 0 (if (= n 0) acc (loop-to (- n 1) (+ acc 1)))))",
    "(define (loop-to n acc) (or (and (= n 0) acc) (loop-to (- n 1) (+ acc 1))))",
    "(define (loop-to n acc) (if (= n 0) acc (call loop-to (n (- n 1)) (acc (+ acc 1)))))",
    "(define (loop-to . args) (if (= (car args) 0) (car (cdr args))"
    " (loop-to (- (car args) 1) (+ (car (cdr args)) 1))))",
])
def test_every_tail_position_is_a_proper_tail_call(tail_position):
    # 20,000 nested calls would pass both max_depth and Python's recursion limit.
    assert evaluate(tail_position + "(loop-to 20000 0)") == 20_000


def test_mutual_tail_recursion_does_not_grow_the_stack():
    program = """
    (define (is-even n) (if (= n 0) #t (is-odd (- n 1))))
    (define (is-odd n) (if (= n 0) #f (is-even (- n 1))))
    (is-even 100001)
    """
    assert evaluate(program) is False


def test_deep_non_tail_recursion_ends_in_a_dsl_error_at_the_recursive_call():
    program = "(define (count-up n)\n  (if (= n 0) 0 (+ 1 (count-up (- n 1)))))\n(count-up 100000)"
    with pytest.raises(LimitExceeded) as caught:
        Interpreter().eval_source(program, "deep.sexp")
    assert caught.value.limit == "max_depth"
    assert str(caught.value) == (
        "deep.sexp:2:22: recursion too deep: more than max_depth=2000 nested calls (make the recursive call a "
        "tail call, or raise Limits.max_depth)\n"
        "      (if (= n 0) 0 (+ 1 (count-up (- n 1)))))\n"
        "                         ^"
    )
    assert Interpreter().eval_source(program.replace("100000", "1500")) == 1500


def test_recursion_through_deeply_nested_bodies_becomes_a_dsl_error_never_a_python_recursion_error():
    nested = "(+ 1 " * 40 + "(f (- n 1))" + ")" * 40
    program = f"(define (f n) (if (= n 0) 0 {nested})) (f 1900)"
    with pytest.raises(LimitExceeded, match="recursion too deep for Python's stack"):
        evaluate(program)


def test_a_program_nested_too_deeply_to_analyse_is_a_syntax_error():
    with pytest.raises(DslSyntaxError, match="nested too deeply"):
        evaluate("(list " * 20_000 + ")" * 20_000)


def test_deep_values_print_and_compare_without_python_recursion():
    program = "(define (nest n acc) (if (= n 0) acc (nest (- n 1) (list acc)))) (define deep (nest 20000 nil))"
    interpreter = Interpreter()
    interpreter.eval_source(program)
    assert interpreter.eval_source("(equal? deep (nest 20000 nil))") is True
    assert to_source(interpreter.eval_source("deep")).startswith("((((")


def test_the_step_budget_ends_a_runaway_program_naming_the_form():
    interpreter = Interpreter(limits=Limits(max_steps=1000))
    with pytest.raises(LimitExceeded) as caught:
        interpreter.eval_source("(define (spin n) (spin n))\n(spin 1)", "spin.sexp")
    assert caught.value.limit == "max_steps"
    assert str(caught.value) == "spin.sexp:1:18: step budget exhausted: max_steps=1000\n" \
        "    (define (spin n) (spin n))\n                     ^"
    assert interpreter.last_run.steps == 1001


def test_a_budget_of_n_steps_allows_exactly_n_calls():
    interpreter = Interpreter(limits=Limits(max_steps=5))
    assert interpreter.eval_source("(define (f) 1) (f) (f) (f) (f) (f)") == 1
    with pytest.raises(LimitExceeded):
        interpreter.eval_source("(f) (f) (f) (f) (f) (f)")


def test_loops_and_map_count_against_the_step_budget():
    for program in ("(loop 100 1)", "(map (+ item 1) (list 1 2 3 4 5 6 7 8 9 10 11 12))", "(while #t 1)"):
        with pytest.raises(LimitExceeded, match="max_steps=10"):
            Interpreter(limits=Limits(max_steps=10)).eval_source(program)


def test_the_wall_clock_limit_ends_a_long_program():
    with pytest.raises(LimitExceeded, match="wall-clock limit exceeded: timeout_s=0.2") as caught:
        Interpreter(limits=Limits(timeout_s=0.2)).eval_source("(define (spin n) (spin n)) (spin 1)")
    assert caught.value.limit == "timeout_s"


def test_a_program_without_a_wall_clock_limit_runs_outside_a_loop_run():
    interpreter = Interpreter(limits=Limits(timeout_s=None))
    assert interpreter.eval_source("(define (count n) (if (= n 0) 'done (count (- n 1)))) (count 2000)") == "done"
    assert interpreter.last_run.time_left() is None


@pytest.mark.parametrize(("limits", "message"), [
    ({"max_steps": 0}, "Limits.max_steps must be a positive int, got 0"),
    ({"max_steps": 1.5}, "Limits.max_steps must be a positive int, got 1.5"),
    ({"max_depth": 0}, "Limits.max_depth must be an int from 1 to 10000, got 0"),
    ({"max_depth": 10_001}, "Limits.max_depth must be an int from 1 to 10000, got 10001"),
    ({"timeout_s": 0}, "Limits.timeout_s must be a positive number of seconds or None, got 0"),
    ({"timeout_s": float("inf")}, "Limits.timeout_s must be a positive number of seconds or None, got inf"),
    ({"timeout_s": True}, "Limits.timeout_s must be a positive number of seconds or None, got True"),
])
def test_bad_limits_are_refused(limits, message):
    with pytest.raises(ConfigurationError) as caught:
        Limits(**limits)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(("program", "limit", "message"), [
    ("(define n 3)\n(loop 23 (set! n (* n n)))", "max_int_digits",
     "<string>:2:18: '*' would make an integer of more than 10,000 digits (Limits.max_int_digits)"),
    ("(define n 1)\n(loop 100000 (set! n (+ n n)))", "max_int_digits",
     "<string>:2:22: '+' would make an integer of more than 10,000 digits"),
    ('(define s "ab")\n(loop 34 (set! s (string-append s s)))', "max_string_chars",
     "<string>:2:18: 'string-append' would make a string of more than 10,000,000 characters "
     "(Limits.max_string_chars)"),
    ('(define s "ab")\n(loop 34 (set! s (string-join (list s s) "")))', "max_string_chars",
     "<string>:2:18: 'string-join' would make a string of more than 10,000,000 characters"),
    ("(define l '(1))\n(loop 30 (set! l (append l l)))", "max_list_items",
     "<string>:2:18: 'append' would make a list of more than 1,000,000 items (Limits.max_list_items)"),
])
def test_a_value_over_its_size_cap_is_refused_before_it_is_made(program, limit, message):
    with pytest.raises(LimitExceeded) as caught:
        Interpreter(limits=Limits(timeout_s=60)).eval_source(program)
    assert caught.value.limit == limit
    assert str(caught.value).startswith(message)


def test_the_size_caps_are_the_programs_own_limits():
    small = Interpreter(limits=Limits(max_string_chars=10, max_list_items=3, max_int_digits=20))
    assert small.eval_source('(string-append "abcde" "fghij")') == "abcdefghij"
    for program, limit in (('(string-append "abcde" "fghijk")', "max_string_chars"),
                           ("(cons 0 '(1 2 3))", "max_list_items"),
                           ('(string-split "a b c d")', "max_list_items"),
                           ("(to-string '(1 2 3 4 5 6))", "max_string_chars"),
                           ("(* 99999999999 99999999999)", "max_int_digits")):
        with pytest.raises(LimitExceeded) as caught:
            small.eval_source(program)
        assert caught.value.limit == limit, program


def test_string_split_of_a_large_text_stops_at_the_list_cap_without_splitting_it_all():
    text = "word " * (13 * 2**20)  # 65 MB
    with pytest.raises(LimitExceeded, match="'string-split' would make a list of more than 1,000,000 items"):
        evaluate("(length (string-split text))", text=text)


def test_a_primitive_walking_a_value_that_shares_its_items_stops_at_the_deadline():
    # 2**40 leaves in 40 lists: printing it would never end, nor fit in memory.
    program = "(define l '(1))\n(loop 40 (set! l (list l l)))\n(to-string l)"
    started = time.monotonic()
    with pytest.raises(LimitExceeded, match="wall-clock limit exceeded: timeout_s=0.5") as caught:
        Interpreter(limits=Limits(timeout_s=0.5, max_string_chars=10**9)).eval_source(program)
    assert time.monotonic() - started < 5
    assert str(caught.value).startswith("<string>:3:1: ")


def test_a_compiled_programs_clock_is_the_runs_deadline_when_that_comes_first():
    program = compile_program("(define (spin n) (spin (+ n 1)))\n(spin 0)\n", budget=Budget(timeout_s=0.5))
    started = time.monotonic()
    with pytest.raises(LimitExceeded, match="wall-clock limit exceeded: the run's deadline passed") as caught:
        program()
    assert time.monotonic() - started < 5 and caught.value.limit == "timeout_s"


@pytest.mark.parametrize(("limits", "message"), [
    ({"max_string_chars": 0}, "Limits.max_string_chars must be an int of at least 1, got 0"),
    ({"max_list_items": 2.5}, "Limits.max_list_items must be an int of at least 1, got 2.5"),
    ({"max_int_digits": 19}, "Limits.max_int_digits must be an int of at least 20, got 19"),
])
def test_bad_size_caps_are_refused(limits, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Limits(**limits)


# -- DSL procedures from Python --------------------------------------------------------------------


def test_a_dsl_procedure_is_a_python_callable_that_exposes_its_arity():
    interpreter = Interpreter()
    executor = interpreter.eval_source("(define (executor input iteration) (list input iteration)) executor")
    assert isinstance(executor, Closure)
    assert executor("task", 1) == ("task", 1)
    assert (executor.name, executor.params, executor.rest, executor.variadic) == ("executor", ("input", "iteration"),
                                                                                 None, False)
    assert executor.arity == (2, 2) and executor.accepts(2) and not executor.accepts(3)
    assert executor.node.location == "<string>:1:1"
    variadic = interpreter.eval_source("(lambda (first . more) more)")
    assert variadic.arity == (1, None) and variadic.variadic and variadic.accepts(5) and not variadic.accepts(0)
    assert variadic(1, [2, 3]) == ((2, 3),)
    assert repr(variadic) == "<Closure lambda (first . more)>"


def test_a_dsl_error_inside_a_procedure_called_from_python_keeps_its_position():
    interpreter = Interpreter()
    phase = interpreter.eval_source("(define (phase x)\n  (+ x missing))\nphase", "phases.sexp")
    with pytest.raises(UnboundName) as caught:
        phase(1)
    assert str(caught.value).startswith("phases.sexp:2:8: unbound name 'missing'")
    with pytest.raises(ArityError, match="procedure 'phase' expects 1 argument, got 2"):
        phase(1, 2)


def test_a_procedure_called_by_a_tool_joins_the_run_that_called_the_tool():
    def twice(fn, value):
        return fn(fn(value))

    interpreter = Interpreter(tools={"twice": twice}, limits=Limits(max_steps=50))
    assert interpreter.eval_source("(twice (lambda (x) (* x 3)) 2)") == 18
    assert interpreter.last_run.steps == 2
    with pytest.raises(LimitExceeded):
        interpreter.eval_source("(define (spin n) (spin n)) (twice spin 1)")


def test_a_procedure_called_outside_any_run_gets_a_fresh_run_of_its_interpreter():
    interpreter = Interpreter(limits=Limits(max_steps=100))
    spin = interpreter.eval_source("(define (spin n) (spin n)) spin")
    results = []
    worker = threading.Thread(target=lambda: results.append(pytest.raises(LimitExceeded, spin, 1)))
    worker.start()
    worker.join()
    assert results and results[0].value.limit == "max_steps"


def test_isolated_runs_leave_the_globals_untouched():
    interpreter = Interpreter()
    program = interpreter.analyze("(define result (* x 2)) result")
    assert interpreter.run(program, {"x": 5}, isolated=True).value == 10
    assert interpreter.run(program, {"x": 7}, isolated=True).value == 14
    with pytest.raises(UnboundName):
        interpreter.eval_source("result")


def test_an_analysed_program_runs_many_times_with_a_fresh_run_each_time():
    interpreter = Interpreter()
    program = interpreter.analyze('(log-message "run") (while #t :max-iterations 1 1)')
    first, second = interpreter.run(program), interpreter.run(program)
    assert first is not second and len(first.warnings) == len(second.warnings) == 1
    assert first.log == second.log == ["run"]
    assert interpreter.warnings is second.warnings


# -- extension points ------------------------------------------------------------------------------


@pytest.fixture
def private_form_table():
    """Forms a test registers are gone after it."""
    saved = dict(SPECIAL_FORMS)
    yield
    SPECIAL_FORMS.clear()
    SPECIAL_FORMS.update(saved)


def test_a_module_adds_a_special_form_with_the_decorator(private_form_table):
    @special_form("twice")
    def _twice(analyzer: Analyzer, node, tail):
        items = node.value
        if len(items) != 2:
            raise analyzer.syntax_error("twice needs one expression: (twice expr)", node)
        body = analyzer.analyze(items[1])

        def run(env, ev: Evaluation):
            ev.warn("twice ran", node)
            body(env, ev)
            return body(env, ev)

        return run

    interpreter = Interpreter()
    assert interpreter.eval_source("(define n 0) (twice (set! n (+ n 1)))") == 2
    assert interpreter.warnings == ["<string>:1:14: twice ran"]
    with pytest.raises(DslSyntaxError, match="twice needs one expression"):
        interpreter.eval_source("(twice)")
    with pytest.raises(ConfigurationError, match="special form 'twice' is already defined"):
        special_form("twice")(_twice)
    with pytest.raises(ConfigurationError, match="'twice' is a special form"):
        interpreter.define("twice", 1)


def test_a_special_form_may_keep_its_result_in_tail_position(private_form_table):
    @special_form("tail-if")
    def _tail_if(analyzer, node, tail):
        test, then, otherwise = (analyzer.analyze(item, tail) for item in node.value[1:])
        return lambda env, ev: then(env, ev) if test(env, ev) else otherwise(env, ev)

    assert evaluate("(define (f n) (tail-if (= n 0) 'done (f (- n 1)))) (f 100000)") == "done"


def test_any_callable_flagged_named_arguments_is_called_with_keyword_arguments():
    class Atom:
        named_arguments = True

        def __call__(self, **inputs):
            return {"status": "COMPLETE", "content": inputs}

    interpreter = Interpreter()
    interpreter.define("user:analyze", Atom())
    assert "user:analyze" in interpreter.named_operators
    assert interpreter.eval_source('(get-field (user:analyze (task "x") (n 2)) \'content)') == {"task": "x", "n": 2}
    interpreter.define("user:analyze", len)
    assert "user:analyze" not in interpreter.named_operators


def test_tools_are_only_what_the_host_registers():
    with pytest.raises(UnboundName):
        evaluate("(open \"/etc/passwd\")")
    with pytest.raises(UnboundName):
        evaluate("(__import__ \"os\")")
    assert isinstance(Interpreter(tools={"echo": print}).globals.vars["echo"], Tool)


def test_every_error_escaping_a_program_is_a_dsl_error_with_a_position():
    for program in ("(car)", "(echo)", "(f)", "(/ 1 0)", "(get-field 1 '__class__)"):
        with pytest.raises(DslError) as caught:
            Interpreter(tools={"echo": lambda text: text}).eval_source(program)
        assert caught.value.node is not None

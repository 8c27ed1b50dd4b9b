"""Random programs from a small grammar: whatever they do, only DSL errors escape."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loops.sexp import DslError, Interpreter, Limits, to_source

PRELUDE = """
(define x 3)
(define items '(1 "two" (3) nil))
(define record (list (list 'a 1) (list "b" "c")))
(define (countdown n) (if (< n 1) n (countdown (- n 1))))
(define (grow n) (+ 1 (grow n)))
(define (spin) (spin))
"""

ATOMS = ["0", "1", "-2", "2.5", "1e308", '"s"', '""', "#t", "#f", "nil", "x", "items", "record", "'a", "'(1 2)",
         ":k", "undefined", "countdown", "car", "(lambda (v) v)"]
OPERATORS = ["+", "-", "*", "/", "=", "<", ">=", "car", "cdr", "cons", "list", "null?", "length", "append", "not",
             "eq?", "equal?", "string-append", "string=?", "get-field", "countdown", "grow", "spin", "x", "items",
             "echo", "fail"]


def _form(template, arity):
    def fill(children):
        return st.lists(children, min_size=arity, max_size=arity).map(lambda parts: template.format(*parts))

    return fill


def _expressions():
    atoms = st.sampled_from(ATOMS)

    def extend(children):
        applications = st.tuples(st.sampled_from(OPERATORS), st.lists(children, max_size=3)).map(
            lambda parts: f"({parts[0]} {' '.join(parts[1])})"
        )
        return st.one_of(
            applications,
            _form("(if {} {} {})", 3)(children),
            _form("(let ((x {})) {})", 2)(children),
            _form("((lambda (x . rest) {}) {} {})", 3)(children),
            _form("(cond ({} {}) (else {}))", 3)(children),
            _form("(and {} {})", 2)(children),
            _form("(or {} {})", 2)(children),
            _form("(begin (define y {}) (set! x {}) y)", 2)(children),
            _form("(map (lambda (v) {}) {})", 2)(children),
            _form("(map (list item {}) {})", 2)(children),
            _form("(loop {} {})", 2)(children),
            _form("(while {} :max-iterations 3 {})", 2)(children),
            _form("(for (i {} {}) :max-iterations 4 {})", 3)(children),
            _form("(for-each (v i {}) {})", 2)(children),
            _form("(call echo (value {}))", 1)(children),
            _form("(echo {} (value {}))", 2)(children),
            _form("'{}", 1)(children),
            _form("(iterative-loop (max-iterations {}) (initial-input {}) (test-command \"t\") "
                  "(executor (lambda (input n) {})) (validator (lambda (c n) {})) "
                  "(controller (lambda (r v input n) (if {} (list 'stop r) (list 'continue {})))))", 6)(children),
            _form("(creator-critic-loop (max-iterations 2) (requirements {}) (creator (lambda (r c n) {})) "
                  "(critic (lambda (r d n) {})) (iterator (lambda (r d v n) {})))", 4)(children),
            _form("(director-evaluator-loop (max-iterations 2) (initial-director-input {}) "
                  "(director (lambda (i n) {})) (executor (lambda (p n) p)) (evaluator (lambda (r p n) {})) "
                  "(controller (lambda (f p r n) {})))", 4)(children),
        )

    return st.recursive(atoms, extend, max_leaves=10)


# Hypothesis sets Python's recursion limit to about 2,000 frames above the test while it runs, and
# objects when the code under test changes it; an interpreter raises it to 8 frames per level of
# max_depth plus 1,000, so the programs here get a max_depth that fits.
LIMITS = Limits(max_steps=1_000, timeout_s=5, max_depth=100)


def _tool_fail(*args, **kwargs):
    raise KeyError("broken tool")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_expressions(), min_size=1, max_size=3))
def test_random_programs_raise_nothing_but_dsl_errors(forms):
    interpreter = Interpreter(
        tools={"echo": lambda *args, **kwargs: [args, kwargs], "fail": _tool_fail},
        context=lambda **options: [],
        limits=LIMITS,
    )
    interpreter.eval_source(PRELUDE)
    try:
        value = interpreter.eval_source("\n".join(forms), "random.sexp")
    except DslError as error:
        assert error.node is not None and str(error).startswith(("random.sexp:", "<string>:"))
    else:
        to_source(value)


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from(list("()'\" ;:#abcx12.-+*/<=") + [" car ", " if ", " lambda ", " define ", " loop "]),
                max_size=40).map("".join))
def test_random_text_evaluates_or_raises_a_dsl_error(text):
    interpreter = Interpreter(context=lambda **options: [], limits=LIMITS)
    try:
        value = interpreter.eval_source(text)
    except DslError:
        pass
    else:
        to_source(value)

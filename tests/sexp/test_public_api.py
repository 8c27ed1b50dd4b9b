import loops.sexp
from loops.errors import LoopsError


def test_the_public_api_is_exactly_what_all_lists():
    assert set(loops.sexp.__all__) == {
        "NIL", "AnalysedProgram", "Analyzer", "ArityError", "Closure", "DslError", "DslSyntaxError", "DslTypeError",
        "DslValueError",
        "Env", "Evaluation", "IncompleteInput", "Interpreter", "Keyword", "LimitExceeded", "Limits", "Node",
        "Symbol", "Tool", "ToolError", "UnboundName", "WorkspaceContext", "evaluate", "read",
        "special_form", "to_source", "Atom", "SexpProgram", "compile", "shell_command_tool",
    }
    assert all(hasattr(loops.sexp, name) for name in loops.sexp.__all__)


def test_every_dsl_error_is_a_loops_error():
    names = ["ArityError", "DslSyntaxError", "DslTypeError", "DslValueError", "IncompleteInput", "LimitExceeded",
             "ToolError", "UnboundName"]
    errors = [getattr(loops.sexp, name) for name in names]
    assert all(issubclass(error, loops.sexp.DslError) and issubclass(error, LoopsError) for error in errors)


def test_the_package_docstring_example_runs():
    assert loops.sexp.evaluate("(define (sq x) (* x x)) (map sq (list 1 2 3))") == (1, 4, 9)
    repl = loops.sexp.Interpreter(tools={"math:add": lambda x, y: x + y})
    assert repl.eval_source("(bind total (math:add (x 10) (y 5)))") == 15
    assert repl.eval_source("(while (< total 20) :max-iterations 2 (set! total (+ total 1)))") == 17
    assert repl.warnings == ["<string>:1:1: while stopped at max-iterations 2 with more to do; its value is the last "
                             "body's"]

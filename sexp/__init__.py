"""`loops.sexp`: the S-expression language of loops.

Programs in the seeds' S-expression syntax, read with positions, analysed once into closures and run
with lexical scopes, proper tail calls, a step budget and a wall clock::

    >>> from loops.sexp import Interpreter, evaluate
    >>> evaluate("(define (sq x) (* x x)) (map sq (list 1 2 3))")
    (1, 4, 9)
    >>> repl = Interpreter(tools={"math:add": lambda x, y: x + y})
    >>> repl.eval_source("(bind total (math:add (x 10) (y 5)))")
    15
    >>> repl.eval_source("(while (< total 20) :max-iterations 2 (set! total (+ total 1)))")
    17
    >>> repl.warnings
    ["<string>:1:1: while stopped at max-iterations 2 with more to do; its value is the last body's"]

- values (`loops.sexp.values`): DSL lists are tuples, nil is `()` (`NIL`), records are dicts,
  symbols are `Symbol` (a `str`); `to_source` prints a value as the REPL shows it.
- reading (`loops.sexp.reader`), errors with positions (`loops.sexp.errors`), the evaluator and its
  extension points (`loops.sexp.evaluator`), the core forms (`loops.sexp.forms`), the bounded loops
  (`loops.sexp.bounded_loops`), primitives (`loops.sexp.primitives`), tools and the context provider
  (`loops.sexp.host`; the shell tool, `shell_command_tool`, only where the host grants it).
- the loop forms on the library's three modules (`loops.sexp.loop_forms`), `defatom` LLM tasks as
  predictors (`loops.sexp.atoms`), and `compile`, a program as a `dspy.Module` (`loops.sexp.program`).
"""

from typing import Any

from loops.sexp.atoms import Atom
from loops.sexp.errors import (
    ArityError,
    DslError,
    DslSyntaxError,
    DslTypeError,
    DslValueError,
    IncompleteInput,
    LimitExceeded,
    ToolError,
    UnboundName,
)
from loops.sexp.evaluator import Analyzer, Closure, Env, Evaluation, Limits, special_form
from loops.sexp.host import Tool, WorkspaceContext, shell_command_tool
from loops.sexp.interpreter import AnalysedProgram, Interpreter
from loops.sexp.program import SexpProgram, compile
from loops.sexp.reader import Node, read
from loops.sexp.values import NIL, Keyword, Symbol, to_source

__all__ = [
    "AnalysedProgram",
    "NIL",
    "Analyzer",
    "ArityError",
    "Atom",
    "Closure",
    "DslError",
    "DslSyntaxError",
    "DslTypeError",
    "DslValueError",
    "Env",
    "Evaluation",
    "IncompleteInput",
    "Interpreter",
    "Keyword",
    "LimitExceeded",
    "Limits",
    "Node",
    "SexpProgram",
    "Symbol",
    "Tool",
    "ToolError",
    "UnboundName",
    "WorkspaceContext",
    "compile",
    "evaluate",
    "read",
    "shell_command_tool",
    "special_form",
    "to_source",
]


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext loops.sexp` in IPython or Jupyter: the `%%sexp` cell magic (`loops.sexp.magic`)."""
    from loops.sexp.magic import load_ipython_extension as load

    load(shell)


def evaluate(source: str, /, **bindings: Any) -> Any:
    """The value of the last form of `source`, run by a fresh `Interpreter` with `bindings` defined."""
    return Interpreter().eval_source(source, bindings=bindings)

"""`%%sexp`: DSL programs in Jupyter cells, run in the kernel, with definitions kept between cells.

    %load_ext loops.sexp

    %%sexp --in topic --out line --run poem_run
    (defatom user:poem (params (topic string)) (instructions "One line about {{topic}}.") (returns (line string)))
    (get-field (user:poem (topic topic)) "line")

Options:

- ``--model MODEL``: the LM the cell's atoms call: ``local`` (the embedded model), a LiteLLM model
  string, or the name of a variable holding a `dspy.LM`. Default: the LM configured in the kernel
  (`dspy.configure`), else ``local``.
- ``--in NAME [NAME ...]``: Python variables the program reads, defined in the DSL under the same names.
- ``--out NAME``: store the value of the cell's last form in the Python variable NAME (DSL lists arrive as
  tuples) instead of showing it.
- ``--run NAME``: store the cell's run in NAME, a `loops.running.runtime.LoopResult`: the trace of every atom and
  loop-form call, the roles' histories, LM calls and warnings.
- ``--reset``: forget every definition of earlier cells first.

The kernel has one DSL session (`interpreter()`), like `loops repl`: what a cell defines, later cells
see. Each cell is one run of the loop runtime, so its atom calls are traced, retried and counted. A DSL
error shows its position, the source line and a caret, and fails the cell.
"""

from __future__ import annotations

from typing import Any

import dspy
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from loops.errors import ConfigurationError, LoopsError, MissingDependencyError
from loops.running.module import LoopModule
from loops.running.runtime import RoleCalls, Run
from loops.sexp.errors import DslError
from loops.sexp.interpreter import AnalysedProgram, Interpreter
from loops.sexp.loop_forms import ProgramOutcome, program_outcome
from loops.sexp.values import NIL
from loops.vocabulary.contracts import contracts

__all__ = ["DslErrorView", "SexpMagics", "interpreter", "load_ipython_extension"]

_magics: SexpMagics | None = None  # the kernel's one session, made when the extension loads


def interpreter() -> Interpreter:
    """The kernel's DSL session, e.g. to give the cells a tool called with named arguments:
    ``interpreter().define("math:add", loops.sexp.Tool("math:add", lambda x, y: x + y))``."""
    if _magics is None:
        raise ConfigurationError("the %%sexp magic is not loaded: run %load_ext loops.sexp first")
    return _magics.interpreter


class DslErrorView:
    """A DSL error as a notebook shows it: HTML with the source line and a caret; the same as text."""

    def __init__(self, error: DslError):
        self.error = error

    def _repr_html_(self) -> str:
        from loops.vocabulary.display import dsl_error_html

        return dsl_error_html(self.error)

    def __repr__(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


class _Cell(LoopModule):
    """One cell as one run of the loop runtime: the program is its only phase, run in the session's
    interpreter (so definitions persist), its atom calls and loop forms the run's role calls."""

    contracts = contracts(program=(("bindings",), "the value of the cell's last form"))

    def __init__(self, session: Interpreter):
        super().__init__(max_iterations=1)
        self._session = session

    def forward(self, program: AnalysedProgram, bindings: dict[str, Any]) -> dspy.Prediction:
        return self._forward({}, program=program, bindings=bindings)

    def _loop(self, run: Run, program: AnalysedProgram, bindings: dict[str, Any]) -> RoleCalls:
        run.next_iteration()
        outcome = yield from run.call_phase("program", lambda bindings: self._evaluate(run, program, bindings),
                                            bindings=bindings)
        return run.finish(outcome.stop_reason, final=outcome.value, success=outcome.success)

    def _evaluate(self, run: Run, program: AnalysedProgram, bindings: dict[str, Any]) -> ProgramOutcome:
        try:
            return program_outcome(self._session.run(program, bindings))
        finally:
            if self._session.last_run is not None:
                run.warnings.extend(self._session.last_run.warnings)


@magics_class
class SexpMagics(Magics):
    """The `%%sexp` cell magic; see the module docstring."""

    def __init__(self, shell: Any):
        super().__init__(shell)
        self.interpreter = Interpreter()
        self.cells = 0
        self._lms: dict[str, Any] = {}

    @magic_arguments()
    @argument("--model", default=None, help="local, a LiteLLM model string, or a variable holding a dspy.LM")
    @argument("--in", dest="inputs", nargs="+", default=[], metavar="NAME",
              help="Python variables to define in the DSL")
    @argument("--out", default=None, metavar="NAME", help="store the last form's value in this variable")
    @argument("--run", default=None, metavar="NAME", help="store the cell's run (trace, histories) here")
    @argument("--reset", action="store_true", help="forget the definitions of earlier cells first")
    @cell_magic
    def sexp(self, line: str, cell: str) -> Any:
        options = parse_argstring(self.sexp, line)
        if options.reset:
            self.interpreter = Interpreter()
        namespace = self.shell.user_ns
        missing = [name for name in options.inputs if name not in namespace]
        if missing:
            raise _shown(ConfigurationError(f"--in {' '.join(missing)}: no such variable in the notebook; assign it "
                                            "in a Python cell first, or drop it from --in"))
        bindings = {name: namespace[name] for name in options.inputs}
        self.cells += 1
        try:
            program = self.interpreter.analyze(cell, f"<cell {self.cells}>")
            with dspy.context(lm=self._lm(options.model)):
                result = _Cell(self.interpreter)(program=program, bindings=bindings)
        except DslError as error:
            display(DslErrorView(error))
            raise _shown(error) from None
        except LoopsError as error:
            raise _shown(error) from None
        evaluation = self.interpreter.last_run
        for message in evaluation.log if evaluation is not None else ():
            print(f"log: {message}")
        for warning in result.warnings:
            print(f"warning: {warning}")
        if options.run:
            namespace[options.run] = result
        if options.out:
            namespace[options.out] = result.final
            return None
        return None if result.final is NIL else result.final

    def _lm(self, model: str | None) -> Any:
        """The cell's LM: `model` (a variable's LM, or resolved once per spelling), else the kernel's
        configured LM, else the embedded model when it is installed (a cell without atoms needs none)."""
        if model is None:
            if dspy.settings.lm is not None:
                return dspy.settings.lm
            try:
                return self._resolved("local")
            except MissingDependencyError:
                return None
        value = self.shell.user_ns.get(model)
        if isinstance(value, dspy.BaseLM):
            return value
        try:
            return self._resolved(model)
        except LoopsError as error:
            raise _shown(error) from None

    def _resolved(self, model: str) -> Any:
        if model not in self._lms:
            from loops.lm import resolve  # the embedded model's dependencies are checked only when asked for

            self._lms[model] = resolve(model)
        return self._lms[model]


def _shown(error: BaseException) -> BaseException:
    """The error with a one-line traceback in IPython: the position and caret are its message (or were just
    displayed), and the interpreter's Python frames would only bury them."""
    error._render_traceback_ = lambda: [f"{type(error).__name__}: {str(error).splitlines()[0]}"]
    return error


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext loops.sexp`: register `%%sexp` with one DSL session for this kernel."""
    global _magics
    _magics = SexpMagics(shell)
    shell.register_magics(_magics)

"""`Interpreter`: globals, tools and limits, and the read -> analyse -> run pipeline of a program."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

# Imported for their side effect: they fill the special-form table.
import loops.sexp.atoms
import loops.sexp.bounded_loops
import loops.sexp.forms
import loops.sexp.loop_forms  # noqa: F401
from loops.errors import ConfigurationError
from loops.sexp.errors import DslSyntaxError, LimitExceeded
from loops.sexp.evaluator import SPECIAL_FORMS, Analyzer, Env, Evaluation, Exec, Limits, out_of_memory
from loops.sexp.host import WITHHELD_TOOLS, Tool, WorkspaceContext, write_file_tool
from loops.sexp.primitives import PRIMITIVES
from loops.sexp.reader import Node, read
from loops.sexp.values import to_dsl

__all__ = ["AnalysedProgram", "Interpreter"]

# Python frames one DSL call may use (application, trampoline, body, nested argument applications):
# the interpreter makes sure Python's recursion limit leaves room for `Limits.max_depth` such calls.
_PYTHON_FRAMES_PER_CALL = 8


class AnalysedProgram:
    """A read and analysed program: its top-level nodes and their closures, ready to run many times, and
    the people its loop forms ask (`(human)` phases)."""

    def __init__(self, nodes: list[Node], execs: list[Exec], people: list[Any] | None = None):
        self.nodes = nodes
        self.execs = execs
        self.people = people or []


class Interpreter:
    """Evaluates DSL programs; definitions persist between calls, as a REPL needs.

    - `tools`: names (``"echo"``, ``"math:add"``) to Python callables taking keyword arguments; each is
      wrapped in a `Tool`. `system:write_file` is always there; `system:execute_shell_command` only when
      given here (`loops.sexp.shell_command_tool()`): a program that names it otherwise is refused when
      it is analysed, with an error saying how to grant it.
    - `context`: the `get_context` provider, a callable taking `query`, `inputs` and
      `matching_strategy` keyword arguments and returning a list of paths; by default a
      `WorkspaceContext` over `workspace`.
    - `workspace`: the directory the shell tool and the default context provider work in (the current
      directory at call time when None).
    - `limits`: the step budget, wall clock and recursion depth of each run.
    - `schemas`: names to pydantic models that `defatom`'s `(output_format ((type "json") (schema
      "NAME")))` may name, besides the built-in ones (`loops.sexp.atoms.SCHEMAS`).
    - `atom_model`: the LM every atom runs on, over its own `(model ...)` clause (a `dspy.LM` or a model string
      for `loops.lm.resolve`, e.g. "local"): a program written for a hosted model runs offline unchanged.
    """

    def __init__(
        self,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        context: Callable[..., Any] | None = None,
        *,
        workspace: str | os.PathLike[str] | None = None,
        limits: Limits | None = None,
        schemas: Mapping[str, type[BaseModel]] | None = None,
        atom_model: Any = None,
    ):
        if context is not None and not callable(context):
            raise ConfigurationError(f"the context provider must be a callable, got {context!r}")
        if atom_model is not None:
            from loops.lm import resolve

            atom_model = resolve(atom_model)
        self.atom_model = atom_model
        self.limits = limits if limits is not None else Limits()
        self.workspace = workspace
        self.context = context if context is not None else WorkspaceContext(workspace)
        self.named_operators: set[str] = set()
        self.atoms: dict[str, Any] = {}  # by name, as `defatom` forms are analysed
        self.schemas = _checked_schemas(schemas)
        self.globals = Env(dict(PRIMITIVES))
        self.last_run: Evaluation | None = None
        # The tools the host has not granted: naming one is an error of the program, found before it runs.
        self.withheld = dict(WITHHELD_TOOLS)
        self.define("system:write_file", write_file_tool(workspace))
        for name, function in (tools or {}).items():
            self.define(name, function if isinstance(function, Tool) else Tool(name, function))

    def define(self, name: str, value: Any) -> None:
        """Bind `name` in the globals; a named-argument operator (e.g. a `Tool`) is registered as one."""
        name = str(name)
        if name in SPECIAL_FORMS:
            raise ConfigurationError(f"{name!r} is a special form of the DSL; choose another name")
        self.globals.vars[name] = to_dsl(value)
        self.withheld.pop(name, None)
        if getattr(value, "named_arguments", False):
            self.named_operators.add(name)
        else:
            self.named_operators.discard(name)

    @property
    def warnings(self) -> list[str]:
        """The warnings of the most recent run."""
        return self.last_run.warnings if self.last_run is not None else []

    def start_evaluation(self, limits: Limits | None = None) -> Evaluation:
        """A fresh run: its own step budget, deadline, warnings and log."""
        limits = limits if limits is not None else self.limits
        _make_room_for(limits)
        return Evaluation(self, limits)

    def analyze(self, source: str, filename: str = "<string>") -> AnalysedProgram:
        """Read and analyse `source`; every syntax error is raised here, before anything runs."""
        nodes = read(source, filename)
        _make_room_for(self.limits)
        analyzer = Analyzer(self)
        execs = []
        for node in nodes:
            try:
                execs.append(analyzer.analyze(node))
            except RecursionError:
                raise DslSyntaxError("expression nested too deeply to analyse", node) from None
        return AnalysedProgram(nodes, execs, analyzer.people)

    def run(
        self,
        program: AnalysedProgram,
        bindings: Mapping[str, Any] | None = None,
        *,
        isolated: bool = False,
        limits: Limits | None = None,
    ) -> Evaluation:
        """Run an analysed program; returns its `Evaluation` (`value`, `warnings`, `log`).

        `bindings` are defined before the program runs. With `isolated=True` they and the program's
        top-level definitions go into a fresh scope under the globals, which stay untouched, so several
        such runs of one program may proceed concurrently.
        """
        ev = self.start_evaluation(limits)
        self.last_run = ev
        env = Env({}, self.globals) if isolated else self.globals
        for name, value in (bindings or {}).items():
            if name in SPECIAL_FORMS:
                raise ConfigurationError(f"cannot bind {name!r}: it is a special form of the DSL")
            env.vars[str(name)] = to_dsl(value)
        with ev.active():
            for node, run in zip(program.nodes, program.execs, strict=True):
                try:
                    ev.value = run(env, ev)
                except RecursionError:
                    raise LimitExceeded("recursion too deep for Python's stack", node, limit="max_depth") from None
                except MemoryError:
                    raise out_of_memory(node) from None
        return ev

    def eval_source(self, source: str, filename: str = "<string>", bindings: Mapping[str, Any] | None = None) -> Any:
        """Read, analyse and run `source`; returns the value of its last form (nil when it has none)."""
        return self.run(self.analyze(source, filename), bindings).value


def _checked_schemas(schemas: Mapping[str, type[BaseModel]] | None) -> dict[str, type[BaseModel]]:
    if schemas is None:
        return {}
    if not isinstance(schemas, Mapping):
        raise ConfigurationError(f"schemas must map names to pydantic models, got {schemas!r:.100}")
    for name, model in schemas.items():
        if not (isinstance(name, str) and isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigurationError(f"schemas must map names (str) to pydantic model classes; {name!r} maps to "
                                     f"{model!r:.100}")
    return dict(schemas)


def _make_room_for(limits: Limits) -> None:
    """Raise Python's recursion limit when it is too low for `limits.max_depth` nested DSL calls.

    The limit is process-wide, so it is only ever raised. Nested DSL calls and nested forms use Python
    frames only (no C stack), so a higher limit is safe.
    """
    needed = limits.max_depth * _PYTHON_FRAMES_PER_CALL + 1_000
    if sys.getrecursionlimit() < needed:
        sys.setrecursionlimit(needed)


"""`compile`: a DSL program as a `dspy.Module` that optimizers tune like any other.

    >>> program = loops.sexp.compile('''
    ...     (defatom user:slogan (params (product string)) (instructions "A slogan for {{product}}."))
    ...     (get-field (user:slogan (product name)) "content")''')
    >>> program.named_predictors()          # [('user:slogan', Predict(UserSloganSignature(...)))]
    >>> program(name="a water bottle").result

The program is read and analysed once, when compiled (every syntax error is raised then). Each call
runs it in a fresh scope under the interpreter's globals, with the keyword inputs bound as variables
(except `budget`, `checkpoint` and `run_id`, which are the call's options as for every loop module;
with `checkpoint` and `run_id` the program's atom calls and its loops are recorded, and a resumed run
replays them without calling the LM again),
as one run of the loop runtime: atoms called anywhere in it are role calls of that run (traced,
budget-checked, retried), and a loop form's run folds into it. The prediction has `result` (the value
of the last form) with the runtime's result fields (`final` is `result`; `success` and `stop_reason` by
`loops.sexp.loop_forms.program_outcome`: the program's own verdict, else its last loop form's, else
"completed" and True; a spent budget stops it gracefully, with the warnings and trace so far). A DSL error
raises, with its position.

Top-level `defatom`s are the module's predictors, named by their DSL names, so `save()`/`load()` and
every teleprompter see them before the program runs.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dspy
from pydantic import BaseModel

from loops.errors import ConfigurationError
from loops.recording.checkpoint import stable_hash
from loops.running.module import LoopModule
from loops.running.person import human, nobody_to_answer
from loops.running.runtime import RoleCalls, Run
from loops.sexp.atoms import atom_predictors
from loops.sexp.errors import LimitExceeded
from loops.sexp.evaluator import Env, Limits, out_of_memory
from loops.sexp.interpreter import Interpreter
from loops.sexp.loop_forms import ProgramOutcome, program_outcome
from loops.sexp.values import to_dsl
from loops.vocabulary.context import current_run
from loops.vocabulary.contracts import InputContract, contracts

__all__ = ["SexpProgram", "compile", "read_program"]


class SexpProgram(LoopModule):
    """A compiled DSL program; see the module docstring. Build it with `loops.sexp.compile`."""

    contracts = contracts(program=(("bindings",), "the value of the program's last form"))
    input_contract = InputContract(open=True)  # its inputs are the variables it is called with
    aliases = {"result": "final"}

    def __init__(self, source: str, filename: str = "<string>", *,
                 tools: Mapping[str, Callable[..., Any]] | None = None, context: Callable[..., Any] | None = None,
                 workspace: str | os.PathLike[str] | None = None, limits: Limits | None = None,
                 schemas: Mapping[str, type[BaseModel]] | None = None, atom_model: Any = None, **options: Any):
        options.setdefault("max_iterations", 1)
        super().__init__(**options)
        self.source = source
        self.filename = filename
        self._interpreter = Interpreter(tools, context, workspace=workspace, limits=limits, schemas=schemas,
                                        atom_model=atom_model)
        self._program = self._interpreter.analyze(source, filename)
        top_level = {node.value[1].symbol for node in self._program.nodes
                     if node.is_list and len(node.value) > 1 and node.value[0].symbol == "defatom"}
        self._atom_names = tuple(name for name in self._interpreter.atoms if name in top_level)
        for name in self._atom_names:
            if name in vars(self) or hasattr(type(self), name):
                raise ConfigurationError(f"the atom name {name!r} is taken by the program module's own attribute; "
                                         "rename the atom (e.g. with a user: prefix)")
            setattr(self, name, self._interpreter.atoms[name].predictor)
            self._llm_roles.append(name)

    @property
    def atom_models(self) -> dict[str, str]:
        """The top-level atoms that name their own model (`(model ...)`), with the model string they name."""
        atoms = self._interpreter.atoms
        return {name: atoms[name].model for name in self._atom_names if atoms[name].model is not None}

    def forward(self, **inputs: Any) -> dspy.Prediction:
        options, bindings = _call_options(inputs)
        return self._forward(options, bindings=self._checked_inputs(options, bindings))

    async def aforward(self, **inputs: Any) -> dspy.Prediction:
        options, bindings = _call_options(inputs)
        return await self._aforward(options, bindings=self._checked_inputs(options, bindings))

    def _call_options(self) -> tuple[str, ...]:
        return CALL_OPTIONS  # a limit's name is a variable like any other: the program's limits are its budget's

    def fingerprint(self) -> str:
        """The atoms' prompts and the program's text: a checkpoint of another program does not replay."""
        identity, space, roles = super().fingerprint().partition(" ")
        return f"{identity}:{stable_hash(self.source)}{space}{roles}"

    def _check_people_can_answer(self) -> None:
        """A program whose loop forms ask a person `(human)` needs someone to answer here, or a checkpoint."""
        if self._program.people and not human().can_answer():
            raise nobody_to_answer(["(human) phase of the program"])

    def _loop(self, run: Run, bindings: dict[str, Any]) -> RoleCalls:
        run.next_iteration()
        # The program's own phase, whose arguments need no contract's reading (`Run.call_phase`'s, per call).
        outcome = yield from run.invoke("program", self._evaluate, {"bindings": bindings}, args=(bindings,))
        return run.finish(outcome.stop_reason, final=outcome.value, success=outcome.success)

    def _evaluate(self, bindings: dict[str, Any]) -> ProgramOutcome:
        interpreter = self._interpreter
        ev = interpreter.start_evaluation()
        # The run's own copy of the globals: a `set!` of a primitive's or a tool's name stays in this run.
        run_globals = Env(dict(interpreter.globals.vars))
        env = Env({str(name): to_dsl(value) for name, value in bindings.items()}, run_globals)
        token = atom_predictors.set({name: getattr(self, name) for name in self._atom_names})
        try:
            with ev.active():
                for node, run_form in zip(self._program.nodes, self._program.execs, strict=True):
                    try:
                        ev.value = run_form(env, ev)
                    except RecursionError:  # a DSL error, not a failed phase for the runtime to retry
                        raise LimitExceeded("recursion too deep for Python's stack", node, limit="max_depth") from None
                    except MemoryError:
                        raise out_of_memory(node) from None
            return program_outcome(ev)
        finally:
            atom_predictors.reset(token)
            run = current_run()
            if run is not None:
                run.warnings.extend(ev.warnings)

    def __deepcopy__(self, memo: dict[int, Any]) -> SexpProgram:
        """The analysed program is shared (it holds no run state); the atoms' predictors are copied."""
        twin = copy.copy(self)
        twin.__dict__ = dict(self.__dict__)
        twin._llm_roles = list(self._llm_roles)
        for name in self._atom_names:
            setattr(twin, name, copy.deepcopy(getattr(self, name), memo))
        return twin


CALL_OPTIONS = ("budget", "checkpoint", "run_id")


def _call_options(inputs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A call's own options (`budget=`, `checkpoint=`, `run_id=`), and the rest: the program's inputs."""
    options = {name: inputs.pop(name) for name in CALL_OPTIONS if name in inputs}
    return options, inputs


def read_program(path: Path) -> str:
    """The text of the DSL program at `path`; a file that cannot be read, or that is not UTF-8 text, is a
    one-line `ConfigurationError` naming the file and the position of the first bad byte."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the DSL program {str(path)!r}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        column = len(data[line_start:exc.start].decode("utf-8", "replace")) + 1
        raise ConfigurationError(f"{path}:{line}:{column}: the DSL program is not UTF-8 text (byte "
                                 f"0x{data[exc.start]:02x} cannot be read); save it as UTF-8") from None


def compile(source_or_path: str | os.PathLike[str], tools: Mapping[str, Callable[..., Any]] | None = None,
            context: Callable[..., Any] | None = None, **options: Any) -> SexpProgram:
    """Read and analyse a DSL program (its text, or the path of a `.sexp` file) into a `SexpProgram`.

    `tools` maps names (`"echo"`, `"math:add"`) to Python callables taking keyword arguments;
    `context` answers `get_context` (a callable taking `query`, `inputs` and `matching_strategy`
    keyword arguments, returning a list of paths). Other options: `workspace` (where the shell tool
    and the default context provider work), `limits` (`loops.sexp.Limits`: steps, wall clock, depth),
    `schemas` (names to pydantic models for defatom's `output_format`), `atom_model` (the LM every atom runs
    on, over its own `(model ...)`: an LM or a model string such as "local") and the loop module's own
    (`budget`, `retry`, `strict`, `history_window`, `checkpoint`, ...).
    """
    if isinstance(source_or_path, os.PathLike) or (
            isinstance(source_or_path, str) and source_or_path.endswith(".sexp") and "\n" not in source_or_path):
        path = Path(source_or_path)
        return SexpProgram(read_program(path), str(path), tools=tools, context=context, **options)
    if not isinstance(source_or_path, str):
        raise ConfigurationError(f"compile takes DSL source text or a path, got {type(source_or_path).__name__}")
    return SexpProgram(source_or_path, tools=tools, context=context, **options)

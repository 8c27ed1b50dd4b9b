"""The DSL's read-eval-print loop: definitions kept between inputs, multi-line input until the forms
balance, errors shown with their position and a caret.

`Session` is the terminal-free core (tested directly); `main` wires it to `prompt_toolkit` (line
editing, history in ``~/.loops_repl_history``) for `loops repl` at a terminal, and reads plain lines,
with no prompts, from a pipe or a file (`loops repl < program.sexp`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from loops.errors import LoopsError
from loops.sexp.errors import DslError, IncompleteInput
from loops.sexp.interpreter import Interpreter
from loops.sexp.values import to_source

__all__ = ["Session", "main"]

PROMPT, CONTINUATION = "sexp> ", "  ... "
EXIT_FORMS = frozenset({"(exit)", "(quit)", ",exit", ",quit"})


class Session:
    """One REPL session: `feed` takes a line and returns what to print (None while the input is
    incomplete); the interpreter's state persists between inputs."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]] | None = None, interpreter: Interpreter | None = None):
        self.interpreter = interpreter if interpreter is not None else Interpreter(tools)
        self.pending: list[str] = []
        self.inputs = 0

    @property
    def continuing(self) -> bool:
        return bool(self.pending)

    def feed(self, line: str) -> str | None:
        self.pending.append(line)
        source = "\n".join(self.pending)
        if not source.strip():
            self.pending.clear()
            return ""
        try:
            value = self.interpreter.eval_source(source, filename=f"<input {self.inputs + 1}>")
        except IncompleteInput:
            return None
        except DslError as error:
            output = str(error)
        except LoopsError as error:  # e.g. no LM for an atom: say what to fix, keep the session
            output = f"error: {error}"
        else:
            run = self.interpreter.last_run
            lines = [f"log: {message}" for message in (run.log if run is not None else ())]
            lines += [f"warning: {warning}" for warning in self.interpreter.warnings]
            output = "\n".join([*lines, to_source(value)])
        self.pending.clear()
        self.inputs += 1
        return output

    def run(self, lines: Iterable[str], write: Callable[[str], None]) -> None:
        """Feed `lines` until they run out or an exit form; write every output."""
        for line in lines:
            if not self.pending and line.strip() in EXIT_FORMS:
                return
            output = self.feed(line)
            if output:
                write(output)


def main(model: Any = None, history_file: Path | None = None, *, terminal_input: Any = None,
         terminal_output: Any = None) -> None:
    """`loops repl`: prompt_toolkit's line editor around a `Session`, with `model` as the atoms' LM.

    History goes to `history_file` (default ``~/.loops_repl_history``), or stays in memory when that
    cannot be written. `terminal_input`/`terminal_output` are prompt_toolkit's `Input`/`Output` (the
    terminal when None; a pipe input and a `DummyOutput` in tests). When stdin is no terminal (a pipe, a file)
    and no input is given, its lines are read as they are: no line editor, no prompts, no banner, only the
    outputs.
    """
    import dspy

    session = Session()
    if terminal_input is None and not sys.stdin.isatty():
        with dspy.context(lm=model) if model is not None else contextlib.nullcontext():
            session.run((line.rstrip("\n") for line in sys.stdin), print)
        return
    from prompt_toolkit import PromptSession

    prompt = PromptSession(history=_history(history_file), input=terminal_input, output=terminal_output)

    def lines() -> Iterable[str]:
        while True:
            try:
                yield prompt.prompt(CONTINUATION if session.continuing else PROMPT)
            except KeyboardInterrupt:  # drop the input being typed, as shells do
                session.pending.clear()
            except EOFError:
                return

    print("loops S-expression REPL: definitions persist; (exit) or Ctrl-D leaves.")
    with dspy.context(lm=model) if model is not None else contextlib.nullcontext():
        session.run(lines(), print)


def _history(history_file: Path | None) -> Any:
    """A history kept in `history_file` (default ``~/.loops_repl_history``), or in memory when there is
    no home directory or the file cannot be written: a read-only home must not stop the REPL."""
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    try:
        path = history_file if history_file is not None else Path.home() / ".loops_repl_history"
        with path.open("a", encoding="utf-8"):
            pass
    except (OSError, RuntimeError):  # RuntimeError: Path.home() without a home directory
        return InMemoryHistory()
    return FileHistory(str(path))

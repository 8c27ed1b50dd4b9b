"""What the host lends the DSL: tools (Python callables called with named arguments), the built-in
`system:write_file` tool, the `system:execute_shell_command` tool a host may grant, and the default
`get_context` provider."""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from loops.errors import ConfigurationError
from loops.sexp.errors import DslTypeError, DslValueError, LimitExceeded
from loops.sexp.evaluator import current_evaluation
from loops.sexp.values import is_list
from loops.tools.validators import ShellValidator, Workspace
from loops.vocabulary import context as run_context

__all__ = ["SHELL_TOOL", "WITHHELD_TOOLS", "Tool", "WorkspaceContext", "shell_command_tool", "write_file_tool"]

SHELL_TOOL = "system:execute_shell_command"
# The tools a program gets only when the host grants them, and what an ungranted program is told.
WITHHELD_TOOLS: Mapping[str, str] = {
    SHELL_TOOL: f"the shell tool '{SHELL_TOOL}' is not granted to this program: it runs any command as you. "
                "Grant it with `loops run --allow-shell` (any executable) or `--allow-executable NAME` (only those), "
                f"or in Python with compile(..., tools={{'{SHELL_TOOL}': loops.sexp.shell_command_tool()}})",
}


class Tool:
    """A Python callable registered by name and called with named arguments: with the tool `echo`,
    ``(echo "a" (text "hi"))`` calls ``function("a", text="hi")``. Its result is a DSL value (None
    becomes nil, lists become tuples); an exception it raises becomes a `ToolError` at the call."""

    named_arguments = True

    def __init__(self, name: str, function: Callable[..., Any]):
        if not callable(function):
            raise ConfigurationError(f"tool {name!r} must be a callable, got {function!r}")
        self.name = name
        self.function = function

    @property
    def dsl_label(self) -> str:
        return f"tool '{self.name}'"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, {self.function!r})"


def shell_command_tool(workspace: str | os.PathLike[str] | None = None, *,
                       executables: Iterable[str] | None = None) -> Tool:
    """`system:execute_shell_command`, for a host to grant: ``compile(..., tools={"system:execute_shell_command":
    shell_command_tool()})`` (what ``loops run --allow-shell`` does). It runs a command through
    `ShellValidator` (no shell: the command is split like a POSIX shell would, but `;`, `|` and `$VAR`
    are plain arguments) in `workspace` (by default the running program's, else the current directory),
    with a timeout, capped output and a minimal environment (`loops.tools.validators.SAFE_ENVIRONMENT`: no
    keys). With `executables`, only a command whose first word is one of them, exactly as written, runs.

    What a program granted it can do: anything the user can. ``sh -c``, ``python3 -c`` or ``cp`` reach
    every file the user may read or write; the allowlist restricts which executable starts, not what it
    then does.

    ``(system:execute_shell_command (command "pytest -q") (timeout 60) (max_output_chars 20000))``
    returns a record with `stdout`, `stderr`, `exit_code`, `error` (nil unless the run itself went
    wrong, e.g. a timeout), `timed_out` and `escaped` (processes that left the command's process group,
    killed when it ended; each also a warning). The timeout is capped to the time the program has left;
    a command stopped by that cap ends the program with `LimitExceeded`. A command that cannot run (a missing
    executable, a quote left open) raises `DslValueError` at the call, with the cause chained.
    """
    allowed = None if executables is None else frozenset(executables)
    if allowed is not None and (not allowed or not all(isinstance(name, str) and name.strip() for name in allowed)):
        raise ConfigurationError(f"executables must be names of executables (e.g. ['pytest', 'git']), got "
                                 f"{executables!r:.100}; pass None to allow any")

    def execute_shell_command(command: str, timeout: float = 60.0, max_output_chars: int = 20_000) -> dict[str, Any]:
        if not isinstance(command, str):
            raise DslTypeError(f"the command must be a string, got {command!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise DslValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if type(max_output_chars) is not int or max_output_chars < 0:
            raise DslValueError(f"max_output_chars must be a non-negative integer, got {max_output_chars!r}")
        if allowed is not None:
            _check_allowed(command, allowed)
        ev = current_evaluation()
        left = ev.time_left() if ev is not None else run_context.time_left()
        if left is not None and left <= 0 and ev is not None:
            ev.check_clock()
        capped = left is not None and left < timeout
        where = workspace if workspace is not None else ev.interpreter.workspace if ev is not None else None
        validator = ShellValidator(workspace=where, timeout_s=timeout, max_output_chars=max_output_chars,
                                   clean_env=True, what="command")
        try:
            result = validator.run(command, timeout_s=max(left, 0.001) if capped else None)
        except ConfigurationError as exc:  # the program's command: an error at its call, positioned as every DSL error
            raise DslValueError(f"{SHELL_TOOL}: {exc}") from exc
        if result.timed_out and capped:
            clock = ev.clock if ev is not None else "the run's deadline passed"
            raise LimitExceeded(f"wall-clock limit exceeded while {SHELL_TOOL} ran {command!r:.80}: {clock}",
                                limit="timeout_s")
        if result.escaped and ev is not None:
            ev.warn(f"{SHELL_TOOL} {command!r:.80} started processes that left its process group; they were "
                    f"killed when it ended: {'; '.join(result.escaped)}")
        return {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
            "error": result.error,
            "timed_out": result.timed_out,
            "escaped": tuple(result.escaped),
        }

    return Tool(SHELL_TOOL, execute_shell_command)


def _check_allowed(command: str, allowed: frozenset[str]) -> None:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise DslValueError(f"cannot split the command {command!r:.80}: {exc}") from None
    if not argv or argv[0] not in allowed:
        raise DslValueError(f"the shell tool may run only {', '.join(sorted(allowed))}; "
                            f"{(argv or [''])[0]!r} is not among them (loops run --allow-executable NAME grants one)")


def write_file_tool(workspace: str | os.PathLike[str] | None = None) -> Tool:
    """`system:write_file`: writes text to a file of `workspace` (the current directory when None), so
    an atom's code can reach the tests that the shell tool runs.

    ``(system:write_file (path "pkg/greet.py") (content code))`` creates missing directories, replaces
    the file and returns a record with the relative `path` and the `chars` written. The path must be
    relative, name a file (not `.` nor `dir/`) and stay inside the workspace (no `..` out of it, no symlink
    leading out): the program writes where its tests run, nowhere else. The file is replaced at once
    (written beside it, then moved), as `Workspace.write` does.
    """

    def write_file(path: str, content: str) -> dict[str, Any]:
        if not isinstance(path, str) or not path.strip():
            raise DslTypeError(f"the path must be a non-empty string, got {path!r}")
        if not isinstance(content, str):
            raise DslTypeError(f"the content must be a string, got {content!r:.80}")
        root = Path(workspace if workspace is not None else os.getcwd()).resolve()
        try:
            [target] = Workspace(root).write({path: content})
        except ConfigurationError as error:
            raise DslValueError(str(error)) from None
        return {"path": target.relative_to(root).as_posix(), "chars": len(content)}

    return Tool("system:write_file", write_file)


_WORD = re.compile(r"[a-z0-9_]{3,}")
_SKIPPED_DIRECTORIES = {"__pycache__", "node_modules"}
MATCHING_STRATEGIES = ("content", "metadata")


class WorkspaceContext:
    """The default `get_context` provider: the files under `root` (the current directory at call time
    when None) whose relative path or, with ``matching_strategy="content"`` (the default), whose text
    mentions words of the query (and of the string values of `inputs`). Words are runs of three or
    more letters, digits or underscores, compared case-insensitively.

    Returns relative paths, most matching words first, then alphabetically. Hidden directories,
    `__pycache__`, `node_modules`, binary files, files over `max_file_bytes` and symlinks that lead out
    of the root are skipped (directories reached through a symlink are not entered); at most `max_files`
    files are looked at.
    """

    dsl_label = "context provider"

    def __init__(
        self, root: str | os.PathLike[str] | None = None, *, max_files: int = 10_000, max_file_bytes: int = 1_000_000
    ):
        self.root = root
        self.max_files = max_files
        self.max_file_bytes = max_file_bytes

    def __call__(self, query: str = "", inputs: Any = None, matching_strategy: str = "content") -> list[str]:
        if matching_strategy not in MATCHING_STRATEGIES:
            raise DslValueError(
                f"matching_strategy must be one of {', '.join(map(repr, MATCHING_STRATEGIES))}, "
                f"got {matching_strategy!r}"
            )
        if not isinstance(query, str):
            raise DslTypeError(f"query must be a string, got {query!r}")
        words = set(_WORD.findall(query.lower())) | set(_WORD.findall(" ".join(_input_texts(inputs)).lower()))
        if not words:
            return []
        root = Path(self.root if self.root is not None else os.getcwd()).resolve()
        scored = []
        for path in self._files(root):
            relative = path.relative_to(root).as_posix()
            haystack = relative.lower()
            if matching_strategy == "content":
                haystack += "\n" + self._text(path)
            score = sum(1 for word in words if word in haystack)
            if score:
                scored.append((-score, relative))
        return [relative for _, relative in sorted(scored)]

    def _files(self, root: Path) -> Iterator[Path]:
        seen = 0
        for directory, subdirectories, files in os.walk(root):
            subdirectories[:] = sorted(
                name for name in subdirectories if not name.startswith(".") and name not in _SKIPPED_DIRECTORIES
            )
            for name in sorted(files):
                if seen >= self.max_files:
                    return
                seen += 1
                path = Path(directory, name)
                if not path.is_symlink() or path.resolve().is_relative_to(root):  # a link out is not the workspace's
                    yield path

    def _text(self, path: Path) -> str:
        try:
            if path.stat().st_size > self.max_file_bytes:
                return ""
            data = path.read_bytes()
        except OSError:
            return ""
        if b"\0" in data[:1024]:
            return ""
        return data.decode("utf-8", errors="replace").lower()


def _input_texts(inputs: Any) -> list[str]:
    """The string values of `inputs`, given as a record or as an association list."""
    if isinstance(inputs, Mapping):
        values = list(inputs.values())
    elif is_list(inputs):
        values = [entry[1] for entry in inputs if is_list(entry) and len(entry) == 2]
    else:
        values = []
    return [value for value in values if isinstance(value, str)]

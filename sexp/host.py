"""What the host lends the DSL: tools (Python callables called with named arguments), the built-in
`system:execute_shell_command` and `system:write_file` tools, and the default `get_context` provider."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from loops.errors import ConfigurationError
from loops.sexp.errors import DslTypeError, DslValueError
from loops.sexp.values import is_list
from loops.validators import ShellValidator

__all__ = ["Tool", "WorkspaceContext", "shell_command_tool", "write_file_tool"]


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


def shell_command_tool(workspace: str | os.PathLike[str] | None = None) -> Tool:
    """`system:execute_shell_command`: runs a command through `ShellValidator` (no shell: the command is
    split like a POSIX shell would, but `;`, `|` and `$VAR` are plain arguments) in `workspace` (the
    current directory when None), with a timeout and capped output.

    ``(system:execute_shell_command (command "pytest -q") (timeout 60) (max_output_chars 20000))``
    returns a record with `stdout`, `stderr`, `exit_code`, `error` (nil unless the run itself went
    wrong, e.g. a timeout) and `timed_out`. A missing executable raises `CommandNotFoundError`.
    """

    def execute_shell_command(command: str, timeout: float = 60.0, max_output_chars: int = 20_000) -> dict[str, Any]:
        if not isinstance(command, str):
            raise DslTypeError(f"the command must be a string, got {command!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise DslValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if type(max_output_chars) is not int or max_output_chars < 0:
            raise DslValueError(f"max_output_chars must be a non-negative integer, got {max_output_chars!r}")
        validator = ShellValidator(workspace=workspace, timeout_s=timeout, max_output_chars=max_output_chars)
        result = validator.run(command)
        return {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
            "error": result.error,
            "timed_out": result.timed_out,
        }

    return Tool("system:execute_shell_command", execute_shell_command)


def write_file_tool(workspace: str | os.PathLike[str] | None = None) -> Tool:
    """`system:write_file`: writes text to a file of `workspace` (the current directory when None), so
    an atom's code can reach the tests that the shell tool runs.

    ``(system:write_file (path "pkg/greet.py") (content code))`` creates missing directories, replaces
    the file and returns a record with the relative `path` and the `chars` written. The path must be
    relative and stay inside the workspace (no `..` out of it, no symlink leading out): the program
    writes where its tests run, nowhere else.
    """

    def write_file(path: str, content: str) -> dict[str, Any]:
        if not isinstance(path, str) or not path.strip():
            raise DslTypeError(f"the path must be a non-empty string, got {path!r}")
        if not isinstance(content, str):
            raise DslTypeError(f"the content must be a string, got {content!r:.80}")
        root = Path(workspace if workspace is not None else os.getcwd()).resolve()
        if Path(path).is_absolute():
            raise DslValueError(f"the path must be relative to the workspace, got {path!r}")
        target = (root / path).resolve()
        if target == root or not target.is_relative_to(root):
            raise DslValueError(f"the path {path!r} leads out of the workspace {str(root)!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
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
    `__pycache__`, `node_modules`, binary files and files over `max_file_bytes` are skipped; at most
    `max_files` files are looked at.
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
        root = Path(self.root if self.root is not None else os.getcwd())
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
                yield Path(directory, name)

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

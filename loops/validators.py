"""Programmatic validation for the Execute–Validate–Controller loop.

A validator is any callable ``validator(test_command: str, iteration: int) -> ValidationResult``.
This module provides the usual ones:

- `ShellValidator` runs a command in a `Workspace` with a hard timeout and capped output;
- `PytestValidator` does the same and also reports pytest's passed/failed counts;
- `CallableValidator` adapts a plain Python function.

They are synchronous; the loop runtime decides whether to run them in a thread.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from loops.errors import CommandNotFoundError, ConfigurationError
from signatures.results import ValidationResult

__all__ = [
    "CallableValidator",
    "PytestValidator",
    "ShellValidator",
    "Validator",
    "Workspace",
]

Validator = Callable[[str, int], ValidationResult]

# How long to wait for the output pipes to drain once the command is over. Only a process that
# escaped the process group (setsid/daemonised) and still holds a pipe can make us wait this long.
_PIPE_DRAIN_GRACE_S = 5.0
_READ_CHUNK = 64 * 1024


class Workspace:
    """A directory where an executor's files are written and where validators run.

    ``Workspace()`` creates a fresh temporary directory that `close()` (or leaving the ``with``
    block, or garbage collection) removes. ``Workspace(path)`` uses the caller's directory, creating
    it if needed, and never deletes it.

    Paths given to `write` and `read` are relative to the root; absolute paths and paths that
    escape the root (``..``, or a symlink pointing outside) raise `ConfigurationError`.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None):
        if path is None:
            self.path = Path(tempfile.mkdtemp(prefix="loops-ws-")).resolve()
            self.is_temporary = True
            # Removes the directory even if the owner forgets close(); silent, unlike
            # TemporaryDirectory's ResourceWarning.
            self._finalizer: weakref.finalize | None = weakref.finalize(
                self, shutil.rmtree, str(self.path), ignore_errors=True
            )
        else:
            self.path = Path(path).expanduser().resolve()
            if self.path.exists() and not self.path.is_dir():
                raise ConfigurationError(f"workspace path {str(self.path)!r} exists and is not a directory")
            self.path.mkdir(parents=True, exist_ok=True)
            self.is_temporary = False
            self._finalizer = None
        self.closed = False

    def resolve(self, relative: str | os.PathLike[str]) -> Path:
        """The absolute path of `relative` inside the workspace; raises if it would leave it."""
        text = os.fspath(relative)
        if not text or not text.strip():
            raise ConfigurationError("workspace file path is empty")
        if Path(text).is_absolute():
            raise ConfigurationError(
                f"workspace file path {text!r} is absolute; give a path relative to the workspace root"
            )
        target = (self.path / text).resolve()
        if target == self.path or not target.is_relative_to(self.path):
            raise ConfigurationError(
                f"workspace file path {text!r} escapes the workspace root {str(self.path)!r}"
            )
        return target

    def write(self, files: Mapping[str, str]) -> list[Path]:
        """Write each ``relative path -> text`` (UTF-8), creating parent directories.

        All paths are checked before anything is written, so a bad path writes nothing.
        Returns the absolute paths written, in the order given.
        """
        self._check_open()
        targets = [(self.resolve(rel), text) for rel, text in files.items()]
        for target, text in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            if target.suffix == ".py":
                # Python trusts a .pyc whose source has the same size and whole-second mtime, so a
                # file rewritten within a second could run its previous version's bytecode.
                for stale in target.parent.glob(f"__pycache__/{target.stem}.*.pyc"):
                    stale.unlink(missing_ok=True)
        return [target for target, _ in targets]

    def read(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> dict[str, str]:
        """Read the given relative paths; returns ``relative path -> text``.

        Missing files (and directories) are skipped rather than raising, because callers typically
        ask for the files an LM *says* it created, and some of them may not exist. Escaping paths
        still raise. Undecodable bytes are replaced, not fatal.
        """
        self._check_open()
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        found: dict[str, str] = {}
        for rel in paths:
            target = self.resolve(rel)
            if target.is_file():
                found[os.fspath(rel)] = target.read_text(encoding="utf-8", errors="replace")
        return found

    def close(self) -> None:
        """Remove the directory if it is temporary; a user directory is left alone. Idempotent."""
        self.closed = True
        if self._finalizer is not None:
            self._finalizer()

    def _check_open(self) -> None:
        if self.closed and self.is_temporary:
            raise ConfigurationError(f"workspace {str(self.path)!r} was closed and its directory removed")

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        kind = "temporary" if self.is_temporary else "user"
        return f"Workspace({str(self.path)!r}, {kind}{', closed' if self.closed else ''})"


class _CappedCapture:
    """Reads a pipe to the end, keeping only the first and last characters.

    The pipe is always drained, so a chatty command never blocks on a full pipe, and memory stays
    bounded by the cap whatever the command prints.
    """

    def __init__(self, stream: IO[bytes], max_chars: int):
        self._stream = stream
        # The tail gets the larger share: test runners print the failures and the summary last.
        self._head_limit = max_chars // 4
        self._tail_limit = max_chars - self._head_limit
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self.total_chars = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="loops-capture")
        self.thread.start()

    def _run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with self._stream:
            while chunk := self._stream.read1(_READ_CHUNK):
                self._add(decoder.decode(chunk))
            self._add(decoder.decode(b"", final=True))

    def _add(self, text: str) -> None:
        if not text:
            return
        self.total_chars += len(text)
        if self._head_len < self._head_limit:
            take = text[: self._head_limit - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            text = text[len(take) :]
        if text:
            self._tail += text
            # Trim only when well over the limit, so a stream of tiny chunks is not quadratic.
            if len(self._tail) > 2 * self._tail_limit:
                self._tail = self._tail[len(self._tail) - self._tail_limit :]

    def text(self) -> str:
        head = "".join(self._head)
        tail = (
            self._tail[len(self._tail) - self._tail_limit :]
            if len(self._tail) > self._tail_limit
            else self._tail
        )
        cut = self.total_chars - len(head) - len(tail)
        if cut <= 0:
            return head + tail
        return f"{head}\n[... {cut} chars cut by loops (max_output_chars) ...]\n{tail}"


class ShellValidator:
    """Runs the test command in a workspace directory and reports how it went.

    - ``workspace``: a `Workspace`, a directory path, or None for the current working directory at
      call time.
    - ``shell=False`` splits the command with `shlex.split` and runs it directly, so ``;``, ``|``
      and ``$VAR`` are plain arguments; ``shell=True`` runs it with ``/bin/sh -c``. With a shell, a
      missing command is the shell's exit code 127 (reported in ``error``), not an exception,
      because the command may be a pipeline or a builtin.
    - The command runs in its own process group. At ``timeout_s`` the whole group (children too)
      gets SIGKILL and the result has ``timed_out=True``, ``exit_code=-9`` (subprocess's convention
      for "killed by signal 9") and ``error="timed out after Ns"``. Processes the command leaves
      running in its group after it exits are killed too, so nothing leaks across iterations.
    - stdout and stderr are each capped to ``max_output_chars``: the first quarter and the last
      three quarters are kept around a marker line saying how many chars were cut.
    - ``clean_env=True`` gives the command only PATH, HOME and LANG (plus ``env``); otherwise ``env``
      is added on top of this process's environment.

    The ``iteration`` argument is accepted for the validator protocol and otherwise unused.
    Raises `CommandNotFoundError` when the executable does not exist (``shell=False``).
    """

    def __init__(
        self,
        *,
        workspace: Workspace | str | os.PathLike[str] | None = None,
        timeout_s: float = 60.0,
        max_output_chars: int = 20_000,
        shell: bool = False,
        clean_env: bool = False,
        env: Mapping[str, str] | None = None,
    ):
        if timeout_s is None or timeout_s <= 0:
            raise ConfigurationError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if max_output_chars < 0:
            raise ConfigurationError(f"max_output_chars must be >= 0, got {max_output_chars!r}")
        if workspace is not None and not isinstance(workspace, Workspace):
            workspace = Workspace(workspace)
        self.workspace: Workspace | None = workspace
        self.timeout_s = float(timeout_s)
        self.max_output_chars = int(max_output_chars)
        self.shell = shell
        self.clean_env = clean_env
        self.env = dict(env or {})

    @property
    def cwd(self) -> Path:
        return self.workspace.path if self.workspace is not None else Path.cwd()

    def __call__(self, test_command: str, iteration: int = 0) -> ValidationResult:
        return self.run(test_command)

    def run(self, command: str) -> ValidationResult:
        """Run `command` and return its `ValidationResult` (see the class docstring)."""
        argv = self._argv(command)
        cwd = self.cwd
        if not cwd.is_dir():
            raise ConfigurationError(f"validator working directory {str(cwd)!r} does not exist")
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise CommandNotFoundError(
                f"executable {argv[0]!r} not found (command: {command!r}); "
                "check the spelling, PATH, or give a full path"
            ) from exc
        except PermissionError as exc:
            raise ConfigurationError(
                f"executable {argv[0]!r} is not executable (command: {command!r})"
            ) from exc

        stdout = _CappedCapture(proc.stdout, self.max_output_chars)  # type: ignore[arg-type]
        stderr = _CappedCapture(proc.stderr, self.max_output_chars)  # type: ignore[arg-type]
        timed_out = False
        try:
            proc.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # Also reached on KeyboardInterrupt: never leave the command's process tree behind.
            _kill_group(proc.pid)
            proc.wait()
        seconds = time.monotonic() - started

        undrained = []
        for name, capture in (("stdout", stdout), ("stderr", stderr)):
            capture.thread.join(_PIPE_DRAIN_GRACE_S)
            if capture.thread.is_alive():
                undrained.append(name)

        error = None
        if timed_out:
            error = f"timed out after {self.timeout_s:g}s"
        elif self.shell and proc.returncode == 127:
            error = "the shell reported exit code 127: command not found"
        elif undrained:
            error = (
                f"{' and '.join(undrained)} still open after the command exited "
                "(a process escaped its process group); output may be incomplete"
            )
        return ValidationResult(
            stdout=stdout.text(),
            stderr=stderr.text(),
            exit_code=proc.returncode,
            error=error,
            timed_out=timed_out,
            seconds=round(seconds, 3),
        )

    def _argv(self, command: str) -> list[str]:
        if command is None or not str(command).strip():
            raise ConfigurationError("test command is empty; give the command the validator should run")
        if self.shell:
            return ["/bin/sh", "-c", command]
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ConfigurationError(f"cannot split test command {command!r}: {exc}") from exc
        return argv

    def _environment(self) -> dict[str, str]:
        if not self.clean_env:
            return {**os.environ, **self.env}
        base = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
        base.setdefault("PATH", os.defpath)
        return {**base, **self.env}


def _kill_group(pgid: int) -> None:
    # ProcessLookupError: the group is already gone; PermissionError is what macOS reports for a
    # group whose only member is a zombie leader.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


_PYTEST_SUMMARY = re.compile(
    r"\b(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)|no tests ran)\b"
    r".*\bin [\d.]+s"
)
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_pytest_counts(output: str) -> tuple[int | None, int | None]:
    """(passed, failed) from pytest's final summary line; (None, None) when there is none.

    Errors (e.g. collection errors) count as failed: for the loop they are tests that do not pass.
    """
    for line in reversed(_ANSI.sub("", output).splitlines()):
        if _PYTEST_SUMMARY.search(line):
            passed = failed = 0
            for number, word in _PYTEST_COUNT.findall(line):
                if word == "passed":
                    passed += int(number)
                else:
                    failed += int(number)
            return passed, failed
    return None, None


class PytestValidator(ShellValidator):
    """A `ShellValidator` that also fills ``passed``/``failed`` from pytest's summary line.

    An empty or None test command runs ``<this python> -m pytest -q`` in the workspace. Counts stay
    None when no summary line is found (e.g. pytest crashed or the command was not pytest).
    """

    def run(self, command: str | None) -> ValidationResult:
        if command is None or not command.strip():
            command = shlex.join([sys.executable, "-m", "pytest", "-q"])
        result = super().run(command)
        passed, failed = parse_pytest_counts(result.stdout)
        return result.model_copy(update={"passed": passed, "failed": failed})


class CallableValidator:
    """Adapts ``fn(test_command, iteration)`` returning a `ValidationResult`, a bool (True means exit
    code 0, False exit code 1) or an int exit code.

    An exception raised by ``fn`` propagates on purpose: the loop runtime records it as a failed
    phase and stops gracefully with stop_reason "error", which is more honest than dressing a bug in
    the validator up as a failing test the executor would then try to fix.
    """

    def __init__(self, fn: Callable[[str, int], Any]):
        if not callable(fn):
            raise ConfigurationError(f"CallableValidator needs a callable, got {fn!r}")
        self.fn = fn

    def __call__(self, test_command: str, iteration: int = 0) -> ValidationResult:
        started = time.monotonic()
        outcome = self.fn(test_command, iteration)
        seconds = round(time.monotonic() - started, 3)
        if isinstance(outcome, ValidationResult):
            return outcome if outcome.seconds is not None else outcome.model_copy(update={"seconds": seconds})
        if isinstance(outcome, bool):
            return ValidationResult(exit_code=0 if outcome else 1, seconds=seconds)
        if isinstance(outcome, int):
            return ValidationResult(exit_code=outcome, seconds=seconds)
        raise ConfigurationError(
            f"validator {getattr(self.fn, '__name__', self.fn)!r} returned {outcome!r:.200}; "
            "expected a ValidationResult, a bool or an int exit code"
        )

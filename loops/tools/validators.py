"""Programmatic validation for the Execute–Validate–Controller loop.

A validator is any callable ``validator(test_command: str, iteration: int) -> ValidationResult``.
This module provides the usual ones:

- `ShellValidator` runs a command in a `Workspace` with a hard timeout and capped output;
- `PytestValidator` does the same and also reports pytest's passed/failed counts;
- `CallableValidator` adapts a plain Python function.

They are synchronous; the loop runtime decides whether to run them in a thread. The directory they run in is
`loops.tools.workspace`'s, and what they read of pytest is `loops.tools.pytest_reading`'s; both are re-exported here.
"""

from __future__ import annotations

import codecs
import contextlib
import inspect
import json
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import IO, Any

from loops.errors import CommandNotFoundError, ConfigurationError
from loops.signatures.results import ValidationResult
from loops.tools import reaper
from loops.tools.pytest_reading import (
    PYTEST_FILES,
    missing_tests,
    parse_pytest_counts,
    pytest_arguments,
    ran_no_tests,
    test_files,
)
from loops.tools.workspace import Workspace, workspace_path
from loops.vocabulary import context

__all__ = [
    "SAFE_ENVIRONMENT",
    "PYTEST_FILES",
    "CallableValidator",
    "PytestValidator",
    "ShellValidator",
    "Validator",
    "Workspace",
    "missing_tests",
    "pytest_arguments",
    "ran_no_tests",
    "test_files",
    "workspace_path",
]

Validator = Callable[[str, int], ValidationResult]

# How long the output pipes may stay open once the command is over and its process group killed.
# Only a process that escaped the group (setsid, a daemon) and still holds a pipe makes us wait,
# and for this long at most, in all: its later output is lost, which the result's `error` says.
_PIPE_DRAIN_GRACE_S = 0.25
# While the command runs and prints nothing, how often to look whether it has exited: its pipes
# alone cannot tell us, since a process that escaped its group may keep them open.
_EXIT_POLL_S = 0.05
_READ_CHUNK = 64 * 1024
# How long the reaper may take to kill the command and what escaped it once asked to stop; past this the
# validator kills the reaper's group itself (what escaped is then left to init).
_STOP_GRACE_S = 2.0
# The variables a command run with `clean_env=True` keeps from this process's environment: where programs
# are, the user, the locale, the temporary directory, the terminal; no keys, tokens or configuration.
SAFE_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
                    "TERM")


class _CappedCapture:
    """Collects a stream's text, keeping only the first and last characters.

    Memory stays bounded by the cap whatever the command prints.
    """

    def __init__(self, max_chars: int):
        # The tail gets the larger share: test runners print the failures and the summary last.
        self._head_limit = max_chars // 4
        self._tail_limit = max_chars - self._head_limit
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self.total_chars = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> None:
        self._add(self._decoder.decode(data))

    def finish(self) -> None:
        self._add(self._decoder.decode(b"", final=True))

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
    - On Linux the command runs under `loops.tools.reaper`, a child subreaper: a descendant that left the
      group (``setsid``, ``nohup setsid``, a daemon's double fork) is found and killed as well when
      the command ends or times out, and listed in the result's ``escaped``. Elsewhere such a
      process keeps running; if it holds an output pipe it delays the result by a fraction of a
      second at most, and ``error`` then says the output may be incomplete.
    - stdout and stderr are each capped to ``max_output_chars``: the first quarter and the last
      three quarters are kept around a marker line saying how many chars were cut.
    - ``clean_env=True`` gives the command only the variables of `SAFE_ENVIRONMENT` (PATH, HOME,
      the user, the locale, TMPDIR, ...; no keys), plus ``env``; otherwise ``env`` is added on top
      of this process's environment.
    - ``what`` is what its errors call the command ("test command"; the DSL's shell tool: "command").

    The ``iteration`` argument is accepted for the validator protocol and otherwise unused.
    Raises `CommandNotFoundError` when the executable does not exist (``shell=False``); `check`
    tells that without running the command.
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
        what: str = "test command",
    ):
        if not _is_seconds(timeout_s) or timeout_s == float("inf"):
            # NaN included: it compares false with everything, so it would never time out nor cap the run's time.
            raise ConfigurationError(f"timeout_s must be a positive, finite number of seconds, got {timeout_s!r}")
        if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int) or max_output_chars < 0:
            raise ConfigurationError(f"max_output_chars must be >= 0, got {max_output_chars!r}")
        if workspace is not None and not isinstance(workspace, Workspace):
            workspace = Workspace(workspace)
        self.workspace: Workspace | None = workspace
        self.timeout_s = float(timeout_s)
        self.max_output_chars = int(max_output_chars)
        self.shell = shell
        self.clean_env = clean_env
        self.env = dict(env or {})
        self.what = what

    @property
    def cwd(self) -> Path:
        return self.workspace.path if self.workspace is not None else Path.cwd()

    def __call__(self, test_command: str, iteration: int = 0) -> ValidationResult:
        return self.run(test_command)

    def check(self, command: str) -> None:
        """Raise `CommandNotFoundError` if `command`'s executable cannot be found, without running it.

        Loops call this before their first LM call. With ``shell=True`` only an empty command is
        caught: the shell itself reports a missing command (exit code 127).
        """
        argv = self._argv(command)
        if self.shell:
            return
        executable = argv[0]
        if os.sep in executable or (os.altsep and os.altsep in executable):
            # A relative path runs from the workspace, as Popen's cwd= makes it.
            path = self.cwd / Path(executable).expanduser()
            if not path.is_file():
                raise CommandNotFoundError(
                    f"executable {executable!r} does not exist (looked for {str(path)!r}; command: {command!r}); "
                    "fix the path (a relative one starts at the workspace)")
            if not os.access(path, os.X_OK):
                raise CommandNotFoundError(
                    f"executable {executable!r} is not executable (command: {command!r}); "
                    f"chmod +x it or run it through its interpreter")
        elif shutil.which(executable, path=self._environment().get("PATH", os.defpath)) is None:
            raise CommandNotFoundError(
                f"executable {executable!r} not found on PATH (command: {command!r}); "
                "install it, check the spelling, or give its full path")

    def run(self, command: str, timeout_s: float | None = None) -> ValidationResult:
        """Run `command` and return its `ValidationResult` (see the class docstring).

        ``timeout_s`` can only shorten the configured timeout for this call (a loop caps it to the
        time its run has left).
        """
        if timeout_s is not None and not _is_seconds(timeout_s):
            raise ConfigurationError(f"timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
        limit = self.timeout_s if timeout_s is None else min(self.timeout_s, float(timeout_s))
        argv = self._argv(command)
        cwd = self.cwd
        if not cwd.is_dir():
            raise ConfigurationError(f"validator working directory {str(cwd)!r} does not exist")
        observers = context.observers()
        if not observers:
            return self._run(command, argv, cwd, limit)
        # Its observers hear of it (`loops.observers.tracing`'s execute_tool span), however it ends.
        info = context.CommandInfo(command, str(cwd), limit)
        context.notify("command_started", info, to=observers)
        try:
            result = self._run(command, argv, cwd, limit)
        except BaseException as exc:
            context.notify("command_finished", info, None, exc, to=observers)
            raise
        context.notify("command_finished", info, result, None, to=observers)
        return result

    def _run(self, command: str, argv: list[str], cwd: Path, limit: float) -> ValidationResult:
        started = time.monotonic()
        with _Started(argv, cwd, self._environment(), command) as started_command:
            proc = started_command.proc
            stdout = _CappedCapture(self.max_output_chars)
            stderr = _CappedCapture(self.max_output_chars)
            timed_out, undrained = _communicate(proc, {proc.stdout: stdout, proc.stderr: stderr},  # type: ignore[dict-item]
                                                started + limit, started_command.stop)
        seconds = time.monotonic() - started
        exit_code, escaped = started_command.outcome()

        problems = []
        if timed_out:
            problems.append(f"timed out after {limit:g}s")
        elif self.shell and exit_code == 127:
            problems.append("the shell reported exit code 127: command not found")
        if undrained:
            problems.append(
                f"{' and '.join(undrained)} still open after the command "
                f"{'was killed' if timed_out else 'exited'}: "
                "a process escaped its process group; output may be incomplete"
            )
        return ValidationResult(
            stdout=stdout.text(),
            stderr=stderr.text(),
            exit_code=exit_code,
            error="; ".join(problems) or None,
            timed_out=timed_out,
            seconds=round(seconds, 3),
            escaped=escaped,
        )

    def _argv(self, command: str) -> list[str]:
        what = self.what
        if command is None:
            raise ConfigurationError(f"the {what} is empty (None); give the command to run")
        if not isinstance(command, str):
            raise ConfigurationError(f"the {what} must be a string, got {command!r:.80} "
                                     f"({type(command).__name__}); e.g. 'python -m pytest -q'")
        if not command.strip():
            raise ConfigurationError(f"the {what} is empty; give the command to run")
        if "\0" in command:  # no command line can carry one: the OS would refuse it when the command starts
            raise ConfigurationError(f"the {what} {command!r:.80} holds a NUL character (\\x00), which no command "
                                     "line can carry; remove it")
        if self.shell:
            return ["/bin/sh", "-c", command]
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ConfigurationError(f"cannot split the {what} {command!r}: {exc}") from exc
        return argv

    def _environment(self) -> dict[str, str]:
        if not self.clean_env:
            return {**os.environ, **self.env}
        base = {key: os.environ[key] for key in SAFE_ENVIRONMENT if key in os.environ}
        base.setdefault("PATH", os.defpath)
        return {**base, **self.env}


def _is_seconds(value: Any) -> bool:
    """A positive number of seconds (NaN is not one: it would never expire)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _reaper_argv() -> list[str] | None:
    """How to start `loops.tools.reaper` (Linux, with a Python interpreter to run it), else None."""
    if not sys.platform.startswith("linux") or not sys.executable or not os.path.isdir("/proc"):
        return None
    return [sys.executable, "-I", "-S", reaper.__file__]


class _Started:
    """A command started in its own process group, under `loops.tools.reaper` where there is one: `stop()` ends
    it (and, with the reaper, every process that escaped it), leaving the `with` block always does, and
    `outcome()` then gives its exit code and what escaped."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], command: str):
        self.argv, self.cwd, self.env, self.command = argv, cwd, env, command
        self.report: dict[str, Any] = {}
        self._report_fd: int | None = None

    def __enter__(self) -> _Started:
        reaper_argv, pass_fds = _reaper_argv(), ()
        argv = self.argv
        if reaper_argv is not None:
            self._report_fd, write_fd = os.pipe()
            argv, pass_fds = [*reaper_argv, str(write_fd), str(os.getpid()), *self.argv], (write_fd,)
        try:
            self.proc = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                         pass_fds=pass_fds)
        except OSError as exc:
            self._close_report()
            raise _start_error(self.argv[0], self.command, type(exc).__name__) from exc
        finally:
            for fd in pass_fds:
                os.close(fd)
        return self

    def stop(self) -> None:
        """Ask the reaper to end the command and what escaped it; without one, kill the command's group."""
        if self._report_fd is None:
            _kill_group(self.proc.pid)
        elif self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def __exit__(self, *exc_info: object) -> None:
        # Also reached on KeyboardInterrupt: never leave the command's process tree behind.
        try:
            if self.proc.poll() is None:
                self.stop()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=_STOP_GRACE_S)
            _kill_group(self.proc.pid)
            self.proc.wait()
            if self._report_fd is not None:
                self.report = _read_report(self._report_fd)
        finally:
            self._close_report()
            for stream in (self.proc.stdout, self.proc.stderr):
                stream.close()  # type: ignore[union-attr]

    def _close_report(self) -> None:
        if self._report_fd is not None:
            os.close(self._report_fd)
            self._report_fd = None

    def outcome(self) -> tuple[int, list[str]]:
        """The command's exit code and the processes that escaped it; raises when it could not start."""
        if "spawn_error" in self.report:
            kind, _, _ = self.report["spawn_error"]
            raise _start_error(self.argv[0], self.command, kind)
        escaped = list(self.report.get("escaped", []))
        more = self.report.get("escaped_count", 0) - len(escaped)
        if more > 0:
            escaped.append(f"... and {more} more")
        code = self.report.get("returncode")
        return (self.proc.returncode if code is None else code), escaped


def _read_report(fd: int) -> dict[str, Any]:
    chunks = []
    while chunk := os.read(fd, _READ_CHUNK):
        chunks.append(chunk)
    try:
        report = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}


def _start_error(executable: str, command: str, kind: str) -> ConfigurationError:
    if kind == "FileNotFoundError":
        return CommandNotFoundError(f"executable {executable!r} not found (command: {command!r}); "
                                    "check the spelling, PATH, or give a full path")
    if kind == "PermissionError":
        return ConfigurationError(f"executable {executable!r} is not executable (command: {command!r})")
    return ConfigurationError(f"cannot start {executable!r} ({kind}; command: {command!r})")


def _communicate(
    proc: subprocess.Popen[bytes], captures: dict[IO[bytes], _CappedCapture], deadline: float,
    stop: Callable[[], None],
) -> tuple[bool, list[str]]:
    """Read the command's pipes into `captures` until it exits or `deadline` passes (then `stop()` ends
    it), and after that for `_PIPE_DRAIN_GRACE_S` at most.

    Returns whether it timed out and the names of the pipes still open when reading stopped.
    """
    names = {proc.stdout: "stdout", proc.stderr: "stderr"}
    timed_out = False
    drain_until: float | None = None
    with selectors.DefaultSelector() as selector:
        for stream in captures:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if drain_until is None:
                if not timed_out and proc.poll() is None and now >= deadline:
                    timed_out = True
                    stop()
                if timed_out and proc.poll() is None and now >= deadline + _STOP_GRACE_S:
                    _kill_group(proc.pid)
                if proc.poll() is not None:
                    # Kills what the command left running in its group, which closes their pipes.
                    _kill_group(proc.pid)
                    drain_until = now + _PIPE_DRAIN_GRACE_S
            if drain_until is None:
                wait = _EXIT_POLL_S if timed_out else min(_EXIT_POLL_S, max(0.0, deadline - now))
            elif now < drain_until:
                wait = drain_until - now
            else:
                break
            for key, _ in selector.select(wait):
                data = os.read(key.fd, _READ_CHUNK)
                if data:
                    captures[key.fileobj].feed(data)  # type: ignore[index]
                else:
                    selector.unregister(key.fileobj)
        undrained = [names[key.fileobj] for key in selector.get_map().values()]
    for capture in captures.values():
        capture.finish()
    if not timed_out and proc.poll() is None:
        # Both pipes closed early (the command closed them itself): wait for the command as such.
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    return timed_out, undrained


def _kill_group(pgid: int) -> None:
    # ProcessLookupError: the group is already gone; PermissionError is what macOS reports for a
    # group whose only member is a zombie leader.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class PytestValidator(ShellValidator):
    """A `ShellValidator` that also fills ``passed``/``failed`` from pytest's summary line.

    An empty or None test command runs ``<this python> -m pytest -q`` in the workspace. Counts stay
    None when no summary line is found (e.g. pytest crashed or the command was not pytest).
    """

    def check(self, command: str | None) -> None:
        super().check(_pytest_command(command))

    def run(self, command: str | None, timeout_s: float | None = None) -> ValidationResult:
        return super().run(_pytest_command(command), timeout_s)

    def _run(self, command: str, argv: list[str], cwd: Path, limit: float) -> ValidationResult:
        result = super()._run(command, argv, cwd, limit)
        passed, failed = parse_pytest_counts(result.stdout)
        return result.model_copy(update={"passed": passed, "failed": failed})


def _pytest_command(command: str | None) -> str:
    if command is None or (isinstance(command, str) and not command.strip()):
        return shlex.join([sys.executable, "-m", "pytest", "-q"])
    return command


class CallableValidator:
    """Adapts ``fn(test_command, iteration)`` returning a `ValidationResult`, a bool (True means exit
    code 0, False exit code 1) or an int exit code. ``fn`` may be async: calling the validator then
    returns a coroutine (the loop runtime awaits it, under `forward` as under `aforward`).

    An exception raised by ``fn`` propagates on purpose: the loop runtime records it as a failed
    phase and stops gracefully with stop_reason "error", which is more honest than dressing a bug in
    the validator up as a failing test the executor would then try to fix. A return value of any
    other type raises `ConfigurationError`.
    """

    def __init__(self, fn: Callable[[str, int], Any]):
        if not callable(fn):
            raise ConfigurationError(f"CallableValidator needs a callable, got {fn!r}")
        self.fn = fn

    def __call__(
        self, test_command: str, iteration: int = 0
    ) -> ValidationResult | Coroutine[Any, Any, ValidationResult]:
        started = time.monotonic()
        outcome = self.fn(test_command, iteration)
        if inspect.isawaitable(outcome):
            return self._finish(outcome, started)
        return self._coerce(outcome, started)

    async def _finish(self, outcome: Awaitable[Any], started: float) -> ValidationResult:
        return self._coerce(await outcome, started)

    def _coerce(self, outcome: Any, started: float) -> ValidationResult:
        seconds = round(time.monotonic() - started, 3)
        if isinstance(outcome, ValidationResult):
            return outcome if outcome.seconds is not None else outcome.model_copy(update={"seconds": seconds})
        if isinstance(outcome, bool):
            return ValidationResult(exit_code=0 if outcome else 1, seconds=seconds)
        if isinstance(outcome, int):
            return ValidationResult(exit_code=outcome, seconds=seconds)
        raise ConfigurationError(
            f"validator {getattr(self.fn, '__name__', self.fn)!r} returned {outcome!r:.200} "
            f"({type(outcome).__name__}); return a ValidationResult, a bool (passed) or an int exit code"
        )

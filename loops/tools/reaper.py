"""Runs one command so that nothing it starts outlives it: the reaper `ShellValidator` puts between
itself and a test command on Linux.

    python -I -S reaper.py REPORT_FD PARENT_PID COMMAND...

A process that leaves its process group (`setsid`, a daemon's double fork) escapes a kill of the
group, and when its parent exits it is handed to init, out of anyone's reach. The reaper is a child
subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`): every descendant of the command that loses its parent is
handed to the reaper instead, so it can find them. When the command exits, or when the reaper gets
SIGTERM (the validator's timeout, or its parent's death through `PR_SET_PDEATHSIG`), it kills what is
left of the command's process group and every process that was handed to it, until none is left, and
writes one JSON report to REPORT_FD: the command's `returncode` (subprocess's convention: -9 for a
kill by SIGKILL), `escaped` (up to `MAX_LISTED` of the processes that had left the group, as
"pid N: command line"), `escaped_count`, and `spawn_error` (the `OSError` that prevented the command
from starting, as its class name, errno and message) instead when it could not start.

It runs in a fresh interpreter without `site` and imports only the standard library, so it starts in
a few milliseconds; it writes nothing to stdout or stderr, which belong to the command.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

__all__ = ["MAX_LISTED", "main"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
MAX_LISTED = 20
# How long the reaper keeps killing what appears (a child that forks while it is being killed) before it
# reports what it has: the processes it meets are killed with SIGKILL, so this is only reached by a fork bomb.
_CLEAN_UP_S = 2.0
_DESCRIPTION_CHARS = 200


class _Stop(Exception):
    """SIGTERM arrived: stop the command and clean up."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Stop


def _processes() -> list[tuple[int, int, int, str]]:
    """(pid, parent pid, process group, state) of every process this user can see."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:  # gone since listdir
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        found.append((int(name), int(fields[1]), int(fields[2]), fields[0]))
    return found


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        command = "?"
    text = f"pid {pid}: {command}"
    return text if len(text) <= _DESCRIPTION_CHARS else text[: _DESCRIPTION_CHARS - 3] + "..."


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


class _Reaper:
    def __init__(self, command_pid: int):
        self.me, self.group, self.command_pid = os.getpid(), os.getpgrp(), command_pid
        self.returncode: int | None = None
        self.escaped: dict[int, str] = {}

    def reap(self, block: bool = False) -> None:
        """Collect the exit status of every child that has ended, keeping the command's."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.command_pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                if block:
                    return

    def clean_up(self) -> None:
        """Kill the command's group and whatever was handed to the reaper, until nothing is left."""
        until = time.monotonic() + _CLEAN_UP_S
        while True:
            alive = False
            for pid, parent, group, state in _processes():
                if pid == self.me or state in ("Z", "X"):
                    continue
                if group == self.group:
                    _kill(pid)
                    alive = True
                elif parent == self.me:
                    self.escaped.setdefault(pid, _describe(pid))
                    _kill(pid)
                    alive = True
            self.reap()
            if not alive or time.monotonic() > until:
                return
            time.sleep(0.002)


def _report(fd: int, report: dict[str, object]) -> None:
    with contextlib.suppress(OSError), os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(report, handle)


def main(argv: list[str]) -> int:
    report_fd, parent, command = int(argv[1]), int(argv[2]), argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # SIGTERM stays blocked until the command has started (a stop before that would leave it running),
    # and is unblocked in the command itself, which must not inherit the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.signal(signal.SIGTERM, _on_sigterm)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    try:
        proc = subprocess.Popen(command, preexec_fn=_unblock_sigterm)
    except OSError as exc:
        _report(report_fd, {"spawn_error": [type(exc).__name__, exc.errno, exc.strerror]})
        return 1
    reaper = _Reaper(proc.pid)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        while reaper.returncode is None:
            reaper.reap(block=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except _Stop:  # the handler has ignored further SIGTERMs: the clean-up below runs to its end
        pass
    reaper.clean_up()
    listed = list(reaper.escaped.values())
    _report(report_fd, {"returncode": reaper.returncode, "escaped": listed[:MAX_LISTED],
                        "escaped_count": len(listed)})
    return 0


def _unblock_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Finding the processes a test started, by a marker in their command line (Linux's /proc), to check that
none is left running, and to kill any that is: a test never leaves one behind."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def unique_marker() -> str:
    """A duration for `sleep` that no other process uses: `sleep {marker}` is found by it."""
    return f"{600 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (killed, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_with(marker: str) -> list[int]:
    """The live processes whose command line holds `marker`."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes() and alive(int(name)):
                found.append(int(name))
    return found


def killed(marker: str) -> list[int]:
    """The live processes whose command line holds `marker`, killed."""
    found = processes_with(marker)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found

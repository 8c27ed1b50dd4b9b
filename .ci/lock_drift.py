"""What the newest releases change and break: `make test-latest`'s report (not part of CI's gate).

Run by the throwaway environment's Python, after it installed loops without the lock: it prints every
package whose installed version differs from the lock (and those the lock does not hold), then runs the
test command and prints its failures, and exits with the tests' exit code.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shlex
import subprocess
import sys
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(lock: Path) -> dict[str, str]:
    return {canonical(name): version for name, version in _PIN.findall(lock.read_text())}


def installed() -> dict[str, str]:
    return {canonical(dist.metadata["Name"]): dist.version for dist in importlib.metadata.distributions()}


def drift(pins: dict[str, str], now: dict[str, str]) -> list[str]:
    lines = []
    for name in sorted(pins.keys() | now.keys()):
        old, new = pins.get(name), now.get(name)
        if name == "loops" or old == new:
            continue
        if old is None:
            lines.append(f"  + {name} {new} (not in the lock)")
        elif new is None:
            lines.append(f"  - {name} {old} (no longer installed)")
        else:
            lines.append(f"  {name} {old} -> {new}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--tests", required=True, help="the test command to run")
    args = parser.parse_args(argv)

    changes = drift(locked(args.lock), installed())
    print(f"Newest releases against {args.lock}: {len(changes)} change(s)")
    print("\n".join(changes) or "  none: the lock is current")
    print(f"\nRunning: {args.tests}", flush=True)
    failures = []
    with subprocess.Popen(shlex.split(args.tests), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as tests:
        for line in tests.stdout:
            sys.stdout.write(line)
            if line.startswith(("FAILED ", "ERROR ")):
                failures.append(line.rstrip())
    verdict = "green: `make lock` would take these releases safely" if tests.returncode == 0 else (
        f"red (exit {tests.returncode}): {len(failures)} failure(s) under the newest releases")
    print(f"\nmake test-latest: {verdict}")
    print("\n".join(f"  {line}" for line in failures))
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())

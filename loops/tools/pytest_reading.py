"""What the loop reads of pytest without running it and after it ran: whether a command runs pytest itself
(`pytest_arguments`), whether it would find no test to run (`missing_tests`, `test_files`, `PYTEST_FILES`),
its summary line's counts (`parse_pytest_counts`), and whether a run found no test (`ran_no_tests`).

Its own room because it follows pytest's command line and output, which change with pytest, never with how a
command is run (`loops.tools.validators`, which re-exports every name here).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from loops.signatures.results import ValidationResult

__all__ = ["PYTEST_FILES", "missing_tests", "parse_pytest_counts", "pytest_arguments", "ran_no_tests", "test_files"]

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


# pytest's own defaults: the files it collects tests from (`python_files`), and the files that can change what it
# collects or where from (a configuration, a conftest), with which nothing can be told without running it.
PYTEST_FILES = ("test_*.py", "*_test.py")
_PYTEST_SETTINGS = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", "conftest.py")
# Options that take no value: the word after one of them is a file or directory, as every other word pytest
# does not read as an option's value. After any other option, the next word may be its value (`-k name`).
_PYTEST_FLAGS = re.compile(r"-[qvxsl]+|--(quiet|verbose|exitfirst|lf|last-failed|ff|failed-first|sw|stepwise|"
                           r"nf|new-first|co|collect-only|strict-markers|no-header|no-summary|disable-warnings|"
                           r"showlocals)")
_SKIPPED_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", "site-packages"})


def pytest_arguments(command: str | None) -> list[str] | None:
    """The words after `pytest` in a command that runs pytest itself (`pytest ...`, `py.test ...`,
    `python -m pytest ...`); None for any other command (a shell line, `make test`, `python -c ...`)."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    if words and os.path.basename(words[0]) in ("pytest", "py.test"):
        return words[1:]
    if len(words) >= 3 and os.path.basename(words[0]).startswith("python") and words[1:3] == ["-m", "pytest"]:
        return words[3:]
    return None


def missing_tests(command: str, cwd: Path, written: Iterable[str] = ()) -> str | None:
    """Why pytest, run as `command` in `cwd`, would find no test to run, told without running it: a file or
    directory it names that does not exist (pytest's exit code 4), or, when it names none, no test file in
    `cwd` at all (exit code 5; `written`, the files the loop will write, are counted as there). None when it
    may find tests, when a configuration of pytest's could change what it collects, and for a command that
    does not run pytest itself (`ran_no_tests` tells after the run)."""
    arguments = pytest_arguments(command)
    if arguments is None or {"--pyargs", "-c", "-o", "--override-ini", "--rootdir"} & {
            argument.partition("=")[0] for argument in arguments}:
        return None
    paths = [argument for before, argument in zip(["-q", *arguments], arguments, strict=False)
             if not argument.startswith("-") and (not before.startswith("-") or _PYTEST_FLAGS.fullmatch(before))]
    for path in paths:
        if not (cwd / path.split("::")[0]).exists():
            return f"it names {path!r}, which is not in {str(cwd)!r} (pytest: file or directory not found)"
    if any(fnmatch.fnmatch(Path(name).name, pattern) for name in written for pattern in PYTEST_FILES):
        return None
    if paths or any((cwd / name).exists() for name in _PYTEST_SETTINGS) or test_files(cwd):
        return None
    held = "holds no files" if not any(cwd.iterdir()) else f"holds no test file ({' or '.join(PYTEST_FILES)})"
    return f"the workspace {str(cwd)!r} {held} (pytest: no tests ran)"


def test_files(directory: Path) -> list[Path]:
    """The files pytest collects tests from in `directory` by default (`PYTEST_FILES`), in order, leaving out
    hidden, virtual-environment and cache directories."""
    found = []
    for path in sorted(directory.rglob("*.py")) if directory.is_dir() else ():
        relative = path.relative_to(directory)
        if any(part in _SKIPPED_DIRS or part.startswith(".") for part in relative.parts[:-1]):
            continue
        if any(fnmatch.fnmatch(path.name, pattern) for pattern in PYTEST_FILES):
            found.append(path)
    return found


_PYTEST_NOT_FOUND = re.compile(r"^ERROR: (file or directory not found|module or package not found|not found|usage)"
                               r".*$", re.MULTILINE)


def ran_no_tests(result: ValidationResult) -> str | None:
    """What pytest said when a test run found no test to run: its exit code 5 (no tests collected) or its
    exit code 4 with its own error line (a file or directory not found, a usage error); None for any other
    run, a failing one included."""
    output = _ANSI.sub("", f"{result.stdout}\n{result.stderr}")
    if result.exit_code == 5 and re.search(r"\bno tests ran\b", output):
        return "pytest collected no tests (no tests ran, exit code 5)"
    found = _PYTEST_NOT_FOUND.search(output) if result.exit_code == 4 else None
    return f"pytest said {found.group(0).strip()!r} (exit code 4)" if found else None

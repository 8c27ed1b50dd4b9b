"""Datasets as `dspy.Example`s for the loop modules: the inputs a module's `forward` takes, and for code
tasks a per-example workspace (its tests travel in the input, so examples run in any order, in
parallel, each in a fresh temporary workspace).

`mbpp(path, split)` reads the MBPP JSON lines (the sanitized dataset's fields: `task_id`, `prompt`,
`test_list`, `test_imports`, `code`, `split`) that the user has; nothing is downloaded. Each example
is `ExecuteValidateController`'s input: `initial_input` (the MBPP paper's prompt, and the test file
as `workspace_files`) and `test_command` (pytest on that file), with the reference solution kept as
`reference` (not an input) and the `task_id`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import textwrap
from typing import Any

import dspy

from loops.errors import ConfigurationError

__all__ = ["MBPP_TEST_COMMAND", "MBPP_TEST_FILE", "mbpp", "mbpp_prompt", "mbpp_test_file"]

MBPP_TEST_FILE = "test_solution.py"
MBPP_TEST_COMMAND = shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", MBPP_TEST_FILE])
_SPLITS = ("prompt", "validation", "train", "test", "all")


def mbpp_prompt(task: dict[str, Any]) -> str:
    """The MBPP paper's prompt: the task text and the asserts the code must pass."""
    tests = "\n".join(task["test_list"])
    return (f"You are an expert Python programmer, and here is your task: {task['prompt']} "
            f"Your code should pass these tests:\n\n{tests}")


def mbpp_test_file(task: dict[str, Any]) -> str:
    """A pytest file with one test per assert, importing the solution from `solution.py`."""
    lines = ["from solution import *", *task.get("test_imports", []), ""]
    for number, assertion in enumerate(task["test_list"], 1):
        lines += ["", f"def test_{number}():", textwrap.indent(assertion.strip(), "    "), ""]
    return "\n".join(lines)


def mbpp(path: str | os.PathLike[str], split: str = "validation", limit: int | None = None) -> list[dspy.Example]:
    """The tasks of `split` (`prompt`, `validation`, `train`, `test` or `all`) in the JSON-lines file
    at `path`, in file order, as examples with inputs `initial_input` and `test_command`."""
    if split not in _SPLITS:
        raise ConfigurationError(f"split must be one of {', '.join(_SPLITS)}, got {split!r}")
    try:
        with open(path, encoding="utf-8") as handle:
            tasks = [json.loads(line) for line in handle if line.strip()]
    except OSError as exc:
        raise ConfigurationError(f"cannot read the MBPP file {os.fspath(path)!r}: {exc.strerror or exc}; give the "
                                 "path of the sanitized MBPP JSON lines you have (nothing is downloaded)") from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{os.fspath(path)!r} is not JSON lines: {exc}") from None
    missing = [field for field in ("task_id", "prompt", "test_list") if tasks and field not in tasks[0]]
    if missing:
        raise ConfigurationError(f"{os.fspath(path)!r} does not look like MBPP: its records lack {missing}")
    chosen = [task for task in tasks if split == "all" or task.get("split") == split]
    examples = [
        dspy.Example(
            initial_input={"prompt": mbpp_prompt(task), "workspace_files": {MBPP_TEST_FILE: mbpp_test_file(task)}},
            test_command=MBPP_TEST_COMMAND,
            reference=task.get("code", ""),
            task_id=task["task_id"],
        ).with_inputs("initial_input", "test_command")
        for task in chosen
    ]
    return examples[:limit] if limit else examples

"""Datasets as `dspy.Example`s for the loop modules: the inputs a module's `forward` takes, and for code
tasks a per-example workspace (its tests travel in the input, so examples run in any order, in
parallel, each in a fresh temporary workspace).

`jsonl(path, inputs)` reads any JSON-lines file of examples (one object per line; `inputs` names the
keys a program takes); `builtin(name)` returns one of the small sets written for this project
(`writing` for Creator–Critic, `goals` for the Director, `code` for Execute–Validate: tasks that carry
their tests), for tests, notebooks and a first optimization run without any data at hand.

`mbpp(path, split)` reads the MBPP JSON lines (the sanitized dataset's fields: `task_id`, `prompt`,
`test_list`, `test_imports`, `code`, `split`) that the user has; nothing is downloaded. Each example
is `ExecuteValidateController`'s input: `initial_input` (the MBPP paper's prompt, and the test file
as `workspace_files`) and `test_command` (pytest on that file), with the reference solution kept as
`reference` (not an input) and the `task_id`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import dspy

from loops.errors import ConfigurationError

__all__ = ["BUILTIN", "MBPP_TEST_COMMAND", "MBPP_TEST_FILE", "Rows", "builtin", "has_splits",
           "is_mbpp", "jsonl", "jsonl_rows", "mbpp", "mbpp_prompt", "mbpp_test_file"]

MBPP_TEST_FILE = "test_solution.py"


def _without_plugins() -> list[str]:
    """pytest's `--disable-plugin-autoload` where it has it (8.4 on): an MBPP test file needs no plugin, and an
    environment's can cost more than the test run (the development one's: 1.15 s a run against 0.35 s without,
    as nbmake imports jsonschema, whose rfc3987-syntax builds a grammar on import)."""
    try:
        major, minor = (int(part) for part in importlib.metadata.version("pytest").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return []
    return ["--disable-plugin-autoload"] if (major, minor) >= (8, 4) else []


MBPP_TEST_COMMAND = shlex.join([sys.executable, "-m", "pytest", "-q", *_without_plugins(), "-p", "no:cacheprovider",
                                MBPP_TEST_FILE])
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


def _lines(path: str | os.PathLike[str], what: str) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """The JSON objects of a JSON-lines file, each with the number of its line (blank lines are none), and every
    line that is not one, with what is wrong with it."""
    name = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            lines = handle.read().split(b"\n")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the {what} file {name!r}: {exc.strerror or exc}; give the "
                                 "path of a JSON-lines file you have (nothing is downloaded)") from None
    records, bad = [], []
    for number, line in enumerate(lines, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad.append((number, f"not UTF-8 text (byte {line[exc.start]:#04x} at column {exc.start + 1}); save the "
                                "file as UTF-8"))
            continue
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            bad.append((number, f"not JSON ({exc.msg}, column {exc.colno})"))
            continue
        if not isinstance(record, dict):
            bad.append((number, f"a JSON {type(record).__name__}, not an object"))
            continue
        records.append((number, record))
    return records, bad


def _records(path: str | os.PathLike[str], what: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one per non-blank line; every line that is not one is named, with
    its fix, in one `ConfigurationError`."""
    records, bad = _lines(path, what)
    if bad:
        raise ConfigurationError(_bad_lines_message(os.fspath(path), bad))
    return [record for _, record in records]


def _bad_lines_message(name: str, bad: list[tuple[int, str]], shown: int = 10) -> str:
    """One line naming the lines of file `name` that are no JSON object (`bad`: line numbers and what is wrong)."""
    listed = "; ".join(f"line {number}: {problem}" for number, problem in bad[:shown])
    more = f"; and {len(bad) - shown} more lines" if len(bad) > shown else ""
    return f"{name!r}, {listed}{more} (each line must be one JSON object)"


def has_splits(path: str | os.PathLike[str]) -> bool:
    """Whether the records of the JSON-lines file at `path` say which split they are in (a `split` field)."""
    return any("split" in record for _, record in _lines(path, "data")[0])


def is_mbpp(path: str | os.PathLike[str]) -> bool:
    """Whether the JSON-lines file at `path` holds MBPP tasks (`task_id`, `prompt`, `test_list`)."""
    records = _lines(path, "data")[0]
    return bool(records) and all(field in records[0][1] for field in ("task_id", "prompt", "test_list"))


@dataclass(frozen=True)
class Rows:
    """A JSON-lines file of examples, read whole so that a caller can report every bad line at once: its
    examples (as `jsonl` makes them), the number of each one's line, and each line that is no JSON object
    with what is wrong with it."""

    examples: list[dspy.Example]
    lines: list[int]
    bad_lines: list[tuple[int, str]]


def jsonl_rows(path: str | os.PathLike[str], split: str | None = None) -> Rows:
    """`jsonl(path, split=split)` with the line of each example, and the lines that are not examples, instead of
    an error at the first of them."""
    records, bad = _lines(path, "data")
    chosen = [(number, record) for number, record in records if split is None or record.get("split") == split]
    return Rows([_example(record, None) for _, record in chosen], [number for number, _ in chosen], bad)


def _example(record: dict[str, Any], inputs: tuple[str, ...] | list[str] | None) -> dspy.Example:
    """A record as an example whose inputs are `inputs` (default: every key but `split`, `id` and `reference`)."""
    keys = list(inputs) if inputs is not None else [key for key in record if key not in ("split", "id", "reference")]
    return dspy.Example(**{key: value for key, value in record.items() if key != "split"}).with_inputs(*keys)


def jsonl(path: str | os.PathLike[str], inputs: tuple[str, ...] | list[str] | None = None, split: str | None = None,
          limit: int | None = None) -> list[dspy.Example]:
    """The JSON objects of the file at `path` as examples whose inputs are `inputs` (default: every key
    but `split`, `id` and `reference`). With `split`, only the records whose `split` field equals it."""
    records = _records(path, "data")
    if split is not None:
        records = [record for record in records if record.get("split") == split]
    examples = []
    for number, record in enumerate(records, 1):
        missing = [key for key in inputs or () if key not in record]
        if missing:
            raise ConfigurationError(f"{os.fspath(path)!r}, record {number}: no {', '.join(map(repr, missing))}; each "
                                     f"line needs {', '.join(map(repr, inputs))}")
        examples.append(_example(record, inputs))
    return examples[:limit] if limit else examples


def mbpp(path: str | os.PathLike[str], split: str = "validation", limit: int | None = None) -> list[dspy.Example]:
    """The tasks of `split` (`prompt`, `validation`, `train`, `test` or `all`) in the JSON-lines file
    at `path`, in file order, as examples with inputs `initial_input` and `test_command`."""
    if split not in _SPLITS:
        raise ConfigurationError(f"split must be one of {', '.join(_SPLITS)}, got {split!r}")
    tasks = _records(path, "MBPP")
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


def _code_task(prompt: str, tests: list[str]) -> dict[str, Any]:
    return {"task_id": prompt, "prompt": prompt, "test_list": tests}


_WRITING = [
    "A two-sentence product description for a reusable water bottle.",
    "A haiku about autumn rain.",
    "A one-line slogan for a bicycle repair shop.",
    "A polite two-sentence email declining a meeting invitation.",
    "A tweet announcing a library's new opening hours (9 to 5).",
    "A three-item packing list for a day hike, one line each.",
    "A short thank-you note to a neighbour who watered the plants.",
    "A one-paragraph summary of why sleep matters for students.",
]
_GOALS = [
    "A limerick about a cat who learns to code.",
    "Three tips for writing clear commit messages.",
    "A short recipe for a cheese sandwich, as numbered steps.",
    "A two-sentence explanation of what a loop is in programming.",
    "A packing list for a weekend camping trip (five items).",
    "A friendly reminder that the team meeting moved to Friday.",
]
_CODE = [
    _code_task("Write a function add(a, b) that returns the sum of a and b.",
               ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]),
    _code_task("Write a function is_even(n) that returns True when n is even.",
               ["assert is_even(4) is True", "assert is_even(7) is False"]),
    _code_task("Write a function reverse_string(s) that returns s reversed.",
               ["assert reverse_string('abc') == 'cba'", "assert reverse_string('') == ''"]),
    _code_task("Write a function square(x) that returns x squared.",
               ["assert square(3) == 9", "assert square(-2) == 4"]),
    _code_task("Write a function maximum(xs) that returns the largest number of a list.",
               ["assert maximum([1, 5, 2]) == 5", "assert maximum([-3, -1]) == -1"]),
    _code_task("Write a function count_vowels(s) that returns how many vowels (aeiou) s has.",
               ["assert count_vowels('hello') == 2", "assert count_vowels('xyz') == 0"]),
    _code_task("Write a function first(xs) that returns the first item of a list, or None if it is empty.",
               ["assert first([4, 5]) == 4", "assert first([]) is None"]),
    _code_task("Write a function word_count(s) that returns the number of words in s.",
               ["assert word_count('a b c') == 3", "assert word_count('') == 0"]),
]
BUILTIN = {"writing": "Creator–Critic tasks (requirements)", "goals": "Director goals (initial_input)",
           "code": "small Python tasks with their tests (Execute–Validate)"}


def builtin(name: str) -> list[dspy.Example]:
    """One of the small sets written for this project (see `BUILTIN`), as examples."""
    if name == "writing":
        return [dspy.Example(requirements=text, context="").with_inputs("requirements", "context") for text in _WRITING]
    if name == "goals":
        return [dspy.Example(initial_input=text).with_inputs("initial_input") for text in _GOALS]
    if name == "code":
        return [dspy.Example(initial_input={"prompt": mbpp_prompt(task),
                                            "workspace_files": {MBPP_TEST_FILE: mbpp_test_file(task)}},
                             test_command=MBPP_TEST_COMMAND, task_id=task["task_id"]
                             ).with_inputs("initial_input", "test_command") for task in _CODE]
    raise ConfigurationError(f"no built-in set {name!r}: choose one of {', '.join(BUILTIN)}")

"""What a batch reads and writes: its examples, each checked against the program's inputs before anything runs
(`bad_examples`, `BadExample`), the record of each example as a JSON line (its inputs cut to `INPUT_CHARS`,
its outcome or its error), and the results file, read once so that a resumed batch skips what it holds and
its damaged or cut-short lines are run again.

Its own room because the examples' and the results file's format change with what users feed a batch and read
from it, never with how the loops run (`loops.batch`: asyncio or Ray), which re-exports the public names here.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from loops.errors import ConfigurationError

__all__ = ["INPUT_CHARS", "BadExample", "bad_examples"]

INPUT_CHARS = 200  # of each input, in a result line: enough to tell the examples apart
_log = logging.getLogger("loops.batch")
Record = dict[str, Any]


@dataclass(frozen=True)
class BadExample:
    """An example the batch's program would refuse (`bad_examples`): its position among the examples (1-based),
    its id (None when it is not an example at all) and every reason, each saying what to fix."""

    position: int
    id: str | None
    problems: tuple[str, ...]

    def __str__(self) -> str:
        named = f" (id {self.id!r})" if self.id is not None else ""
        return f"example {self.position}{named}: {'; '.join(self.problems)}"


def bad_examples(program: dspy.Module, examples: Iterable[dspy.Example | dict[str, Any]]) -> list[BadExample]:
    """Every example of `examples` that `program` would refuse, each with all its reasons, found without any
    LM call: what `run` checks before the first example runs. An example holds the program's inputs only (its
    limits are the program's, the same for every example): a limit among them is refused. The reasons come from
    the program's input contract (`LoopModule.input_problems`), or for any other module from its `forward`'s
    parameters."""
    return _examples(program, examples)[1]


def _examples(program: dspy.Module, examples: Iterable[dspy.Example | dict[str, Any]]) -> tuple[
        list[tuple[str, dict[str, Any]]], list[BadExample]]:
    """The examples as (id, inputs), and those the program would refuse."""
    items, bad, seen = [], [], set()
    for position, example in enumerate(examples, 1):
        if isinstance(example, dspy.Example):
            inputs = dict(example.inputs()) if example._input_keys else {
                key: value for key, value in example.items() if key not in ("id", "task_id")}
            key = example.get("id", example.get("task_id", position - 1))
        elif isinstance(example, dict):
            inputs = {name: value for name, value in example.items() if name != "id"}
            key = example.get("id", position - 1)
        else:
            bad.append(BadExample(position, None, (f"a {type(example).__name__}: give dspy.Examples or dicts of the "
                                                   "program's inputs",)))
            continue
        key = str(key)
        problems = _input_problems(program, inputs)
        if key in seen:
            problems.insert(0, f"another example has the id {key!r} too: ids must be unique, as a resumed batch skips "
                               "the ids it finds in out")
        seen.add(key)
        if problems:
            bad.append(BadExample(position, key, tuple(problems)))
        items.append((key, inputs))
    return items, bad


def _input_problems(program: dspy.Module, inputs: dict[str, Any]) -> list[str]:
    check = getattr(program, "input_problems", None)
    if callable(check):
        return list(check(inputs))
    own = type(program).aforward if "aforward" in vars(type(program)) else type(program).forward
    try:
        inspect.signature(own).bind(program, **inputs)
    except TypeError as mismatch:
        return [f"{mismatch}: {type(program).__name__}.{own.__name__} takes {inspect.signature(own)}"]
    return []


def _record(key: str, inputs: dict[str, Any], prediction: Any, seconds: float,
            metric: Callable[..., Any] | None) -> Record:
    final = prediction.get("final")
    record = {"id": key, "inputs": _short(inputs), "success": bool(prediction.get("success")),
              "stop_reason": prediction.get("stop_reason"), "final": _jsonable(getattr(final, "content", final)),
              "iterations": prediction.get("iterations"), "lm_calls": prediction.get("lm_calls"),
              "tokens": prediction.get("tokens"), "seconds": round(seconds, 3),
              "warnings": list(prediction.get("warnings") or [])}
    if metric is not None:
        example = dspy.Example(**inputs).with_inputs(*inputs)
        try:
            record["score"] = float(metric(example, prediction))
        except Exception as exc:
            record["score_error"] = f"{type(exc).__name__}: {exc}"
    return record


def _failure(key: str, inputs: dict[str, Any], exc: BaseException, seconds: float) -> Record:
    return {"id": key, "inputs": _short(inputs), "success": False, "stop_reason": None,
            "error": f"{type(exc).__name__}: {exc}", "seconds": round(seconds, 3)}


def _short(inputs: dict[str, Any]) -> dict[str, str]:
    """Each input as text of at most INPUT_CHARS characters (and an ellipsis where it was cut)."""
    shown = {}
    for name, value in inputs.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        shown[name] = text if len(text) <= INPUT_CHARS else text[:INPUT_CHARS] + "…"
    return shown


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class _Output:
    """The results file: what it holds, read once (`results`: id -> success, None for a failure), then
    appended to. Every problem with the file is found here, before any LM call."""

    def __init__(self, path: Path, retry_failed: bool):
        self.path = path
        if path.is_dir():
            raise ConfigurationError(f"out {str(path)!r} is a directory: give a file, to which results are appended "
                                     "as JSON lines")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes() if path.is_file() else b""  # not a device's endless bytes
            self.handle = path.open("ab")
        except OSError as exc:
            raise ConfigurationError(f"cannot use out {str(path)!r}: {exc.strerror or exc}; give a file you can "
                                     "read and write") from None
        self.results: dict[str, bool | None] = {}
        self._take_stock(data, retry_failed)

    def _take_stock(self, data: bytes, retry_failed: bool) -> None:
        """Read the records `data` holds; warn of the lines that are none; leave the file ready to append to."""
        lines = data.split(b"\n")
        last = lines.pop()  # b"" when the file ends a line; else a record that lost its newline, or was cut short
        damaged = [number for number, line in enumerate(lines, 1) if line.strip() and not self._read(line)]
        if damaged:
            numbers = ", ".join(map(str, damaged[:10])) + (", ..." if len(damaged) > 10 else "")
            _log.warning("%s: %s not a result record (damaged?): skipped, and %s again", self.path,
                         *(("line " + numbers + " is", "its example runs") if len(damaged) == 1 else
                           ("lines " + numbers + " are", "their examples run")))
        whole = bool(last) and self._read(last)
        if last.strip() and not whole:
            _log.warning("%s: its last line was cut short (the batch was killed while writing it): removed, and its "
                         "example runs again", self.path)
        failed = {key for key, success in self.results.items() if success is None} if retry_failed else set()
        if failed:  # one line per example: the failures' lines go, in one replace of the file
            kept = [line + b"\n" for line in [*lines, *([last] if whole else [])] if _record_id(line) not in failed]
            self._replace(b"".join(kept))
            for key in failed:
                del self.results[key]
        elif whole:
            self.handle.write(b"\n")
        elif last:
            self.handle.truncate(len(data) - len(last))

    def _read(self, line: bytes) -> bool:
        record = _parsed(line)
        if record is not None:
            self.results[str(record["id"])] = None if "error" in record else bool(record.get("success"))
        return record is not None

    def _replace(self, content: bytes) -> None:
        self.handle.close()
        temporary = self.path.with_name(self.path.name + ".retrying")
        temporary.write_bytes(content)
        os.replace(temporary, self.path)
        self.handle = self.path.open("ab")

    def append(self, record: Record) -> None:
        self.handle.write(json.dumps(record, default=str).encode() + b"\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def _parsed(line: bytes) -> Record | None:
    """A line of `out` as its record; None for a line that is not one (cut short, damaged)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        return None
    return record if isinstance(record, dict) and "id" in record else None


def _record_id(line: bytes) -> str | None:
    record = _parsed(line)
    return None if record is None else str(record["id"])

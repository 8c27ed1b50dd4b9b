"""Checkpoint and resume by replay.

With a store and a `run_id`, every role or phase call of a run is recorded as it finishes. Calling
the loop again with the same `run_id` after a crash re-runs the loop's own code, but each call it
makes is answered from the record — no LM request, no validator run — until the record ends; then
the run goes on live. The loop's own side effects (the files an executor's attempt writes) happen
again, exactly as the first time. A replay whose program, inputs or order of calls differ from the
record stops with `ReplayDivergence`, never a silent mix of two runs.

Stores: `SQLiteStore(path)` (the standard library's sqlite3, one row per call, committed as it
finishes, so a killed process loses at most the call in flight) and `MemoryStore()` (tests). A
record holds pickled Python values: open only checkpoint files you trust, as you would code.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import dspy

from loops.errors import ConfigurationError, ReplayDivergence

__all__ = ["CallRecord", "CheckpointStore", "MemoryStore", "Replay", "RunRecord", "SQLiteStore", "open_store",
           "stable_hash", "unpack"]


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    program: str
    inputs: str
    created: float
    calls: int
    stop_reason: str | None


@dataclass(frozen=True)
class CallRecord:
    """One finished call: `nested` when a phase made it (a DSL atom inside a loop phase), `payload`
    the pickled (result, step, warnings, turn); `inputs_hash` the `stable_hash` of its inputs."""

    seq: int
    role: str
    inputs_hash: str
    nested: bool
    payload: bytes


class CheckpointStore(Protocol):
    def begin(self, run_id: str, program: str, inputs: str) -> list[CallRecord]:
        """Open `run_id` (creating it), checking it was recorded for this program and these inputs;
        returns its recorded calls in order."""

    def record(self, run_id: str, call: CallRecord) -> None: ...

    def finish(self, run_id: str, stop_reason: str) -> None: ...

    def runs(self) -> list[RunRecord]: ...

    def calls(self, run_id: str) -> list[CallRecord]: ...


def _check_run(run_id: str, found: tuple[str, str] | None, program: str, inputs: str) -> None:
    if not isinstance(run_id, str) or not run_id.strip():
        raise ConfigurationError(f"run_id must be a non-empty str, got {run_id!r}")
    if found is None:
        return
    if found[0] != program:
        raise ReplayDivergence(f"run {run_id!r} was recorded for another program ({found[0]}), not {program}: "
                               "give this run a new run_id")
    if found[1] != inputs:
        raise ReplayDivergence(f"run {run_id!r} was recorded with other inputs: give this run a new run_id")


class MemoryStore:
    """A store in this process's memory (for tests): nothing survives the process."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._calls: dict[str, list[CallRecord]] = {}
        self._lock = threading.Lock()

    def begin(self, run_id: str, program: str, inputs: str) -> list[CallRecord]:
        with self._lock:
            known = self._runs.get(run_id)
            _check_run(run_id, (known.program, known.inputs) if known else None, program, inputs)
            if known is None:
                self._runs[run_id] = RunRecord(run_id, program, inputs, time.time(), 0, None)
                self._calls[run_id] = []
            return list(self._calls[run_id])

    def record(self, run_id: str, call: CallRecord) -> None:
        with self._lock:
            self._calls[run_id].append(call)

    def finish(self, run_id: str, stop_reason: str) -> None:
        with self._lock:
            known = self._runs[run_id]
            self._runs[run_id] = RunRecord(run_id, known.program, known.inputs, known.created, 0, stop_reason)

    def runs(self) -> list[RunRecord]:
        with self._lock:
            return [RunRecord(r.run_id, r.program, r.inputs, r.created, len(self._calls[r.run_id]), r.stop_reason)
                    for r in self._runs.values()]

    def calls(self, run_id: str) -> list[CallRecord]:
        with self._lock:
            return list(self._calls.get(run_id, ()))


class SQLiteStore:
    """Runs and their calls in one SQLite file; each call is committed as it finishes."""

    # A call's `inputs_hash` is stored in the column `digest`, its first name, so that older files resume.
    _SCHEMA = """
        CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, program TEXT NOT NULL, inputs TEXT NOT NULL,
                                         created REAL NOT NULL, stop_reason TEXT);
        CREATE TABLE IF NOT EXISTS calls (run_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
                                          digest TEXT NOT NULL, nested INTEGER NOT NULL, payload BLOB NOT NULL,
                                          PRIMARY KEY (run_id, seq));
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # Each commit reaches the OS before the call returns: a killed process loses nothing; only a
            # power cut can lose the last calls, which a resume then makes again.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(self._SCHEMA)
        except sqlite3.Error as exc:
            raise ConfigurationError(f"cannot use {str(self.path)!r} as a checkpoint file: {exc}") from exc
        self._lock = threading.Lock()

    def begin(self, run_id: str, program: str, inputs: str) -> list[CallRecord]:
        with self._lock:
            found = self._db.execute("SELECT program, inputs FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            _check_run(run_id, found, program, inputs)
            if found is None:
                self._db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, NULL)", (run_id, program, inputs, time.time()))
            return self._calls(run_id)

    def record(self, run_id: str, call: CallRecord) -> None:
        with self._lock:
            self._db.execute("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?)",
                             (run_id, call.seq, call.role, call.inputs_hash, int(call.nested), call.payload))

    def finish(self, run_id: str, stop_reason: str) -> None:
        with self._lock:
            self._db.execute("UPDATE runs SET stop_reason = ? WHERE run_id = ?", (stop_reason, run_id))

    def runs(self) -> list[RunRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT r.run_id, r.program, r.inputs, r.created, COUNT(c.seq), r.stop_reason FROM runs r "
                "LEFT JOIN calls c ON c.run_id = r.run_id GROUP BY r.run_id ORDER BY r.created").fetchall()
        return [RunRecord(*row) for row in rows]

    def calls(self, run_id: str) -> list[CallRecord]:
        with self._lock:
            return self._calls(run_id)

    def _calls(self, run_id: str) -> list[CallRecord]:
        rows = self._db.execute("SELECT seq, role, digest, nested, payload FROM calls WHERE run_id = ? ORDER BY seq",
                                (run_id,)).fetchall()
        return [CallRecord(seq, role, inputs_hash, bool(nested), payload)
                for seq, role, inputs_hash, nested, payload in rows]

    def close(self) -> None:
        self._db.close()


def open_store(checkpoint: str | os.PathLike[str] | CheckpointStore) -> CheckpointStore:
    """A store from a path (SQLite) or a store object."""
    if isinstance(checkpoint, str | os.PathLike):
        return SQLiteStore(checkpoint)
    if all(hasattr(checkpoint, name) for name in ("begin", "record", "finish")):
        return checkpoint
    raise ConfigurationError(f"checkpoint must be a file path or a checkpoint store, got {checkpoint!r:.100}")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_hash(value: Any) -> str:
    """A hash of a value (a call's inputs, a program) that is the same in every process (no memory addresses)."""
    return hashlib.sha256(_ADDRESS.sub("", repr(value)).encode("utf-8", "replace")).hexdigest()[:20]


class Replay:
    """A run's record being replayed: hands out the recorded calls in order, then records new ones."""

    def __init__(self, store: CheckpointStore, run_id: str, program: str, inputs: str):
        self.store, self.run_id = store, run_id
        self.recorded = store.begin(run_id, program, inputs)
        self.position = 0
        self.next_seq = len(self.recorded)

    def take(self, role: str, inputs_hash: str, nested: bool) -> tuple[list[CallRecord], CallRecord] | None:
        """The record answering this call, with the nested calls recorded inside it; None when the call
        must run live. A phase the record has not finished runs live, and the calls it makes are
        answered by the nested records it did finish."""
        end = self.position
        if not nested:
            while end < len(self.recorded) and self.recorded[end].nested:
                end += 1
        if end == len(self.recorded) or self.recorded[end].nested != nested:
            return None
        call = self.recorded[end]
        if (call.role, call.inputs_hash) != (role, inputs_hash):
            what = "another role" if call.role != role else "other inputs"
            raise ReplayDivergence(
                f"run {self.run_id!r} diverged from its record at call {call.seq + 1}: the record has {call.role}, "
                f"the program now calls {role} with {what}; resume it with the program that recorded it, or give "
                "this run a new run_id")
        inner = self.recorded[self.position:end]
        self.position = end + 1
        return inner, call

    def save(self, role: str, inputs_hash: str, nested: bool, result: Any, *details: Any) -> None:
        # A prediction holds its signature class, which may be built at run time: keep its fields only.
        portable = _Fields(dict(result.items())) if isinstance(result, dspy.Prediction) else result
        payload = pickle.dumps((portable, *details), protocol=pickle.HIGHEST_PROTOCOL)
        self.store.record(self.run_id, CallRecord(self.next_seq, role, inputs_hash, nested, payload))
        self.next_seq += 1


@dataclass(frozen=True)
class _Fields:
    values: dict[str, Any]


def unpack(call: CallRecord) -> tuple[Any, ...]:
    result, *details = pickle.loads(call.payload)
    return (dspy.Prediction(**result.values) if isinstance(result, _Fields) else result, *details)

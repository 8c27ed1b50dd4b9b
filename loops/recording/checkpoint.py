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

A run id is worked on by one run at a time: a run claims it when it starts and gives it up when it ends
(`claim`, `release`). A second run on it, in this process or another, is refused before any LM call; a
claim whose process has died (killed, crashed) is taken over, so a killed run always resumes.

A run that pauses for a person (`loops.running.person`, stop reason "awaiting_input") leaves its question in the
store, one per run id (`ask`); a person's answer is recorded beside it (`record_answer`, `loops runs answer`),
and the resumed run takes it (`Replay.answer_for`) and clears it (`settle`) once the call is recorded.

A store that cannot be read when a run starts (a damaged or unreadable file, a damaged page anywhere in it, a
damaged record) is a `ConfigurationError` naming the file; one that fails while the run goes on (a full disk)
ends the run gracefully with its work so far, stop reason "error" and the cause on `error` (a `RunError`).

A SQLite file is whole on its own once a run ends: the run folds SQLite's write-ahead log into it, a store it
opened from a path is closed, and every store still open is closed when the process exits. A file this process
cannot write is read as it is: its runs are listed, shown and replayed, and a run that would record anything is
refused before any LM call. `delete_runs` and `prune_runs` (by age, stop reason and number) delete runs and
compact the file (`loops runs delete/prune`).

The records and the store protocol live in `loops.recording.checkpoint_records`, the SQLite store in
`loops.recording.checkpoint_store`; this module is the replay, and every name a user imports from
`loops.recording.checkpoint`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import dspy

from loops.errors import ConfigurationError, ReplayDivergence, RunError
from loops.recording.checkpoint_records import (
    _STORAGE_ERRORS,
    CallRecord,
    CheckpointStore,
    MemoryStore,
    QuestionRecord,
    RunRecord,
    program_difference,
    program_name,
    unknown_run,
)
from loops.recording.checkpoint_store import Removal, SQLiteStore, delete_runs, open_store, opened, prune_runs

__all__ = ["CallRecord", "CheckpointStore", "MemoryStore", "QuestionRecord", "Removal", "Replay", "RunRecord",
           "SQLiteStore", "delete_runs", "open_store", "opened", "program_difference", "program_name", "prune_runs",
           "stable_hash", "unknown_run", "unpack"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_hash(value: Any) -> str:
    """A hash of a value (a call's inputs, a program) that is the same in every process (no memory addresses)."""
    return hashlib.sha256(_ADDRESS.sub("", repr(value)).encode("utf-8", "replace")).hexdigest()[:20]


class Replay:
    """A run's record being replayed: hands out the recorded calls in order, then records new ones. It claims
    the run id when it starts (`release` gives the claim up), and checks that every record can be read.

    `checkpoint` is a path, whose store the replay opens and closes when the run ends, or a store object, left
    open for its owner and checkpointed when the run ends: either way the file then holds the whole run."""

    def __init__(self, checkpoint: str | os.PathLike[str] | CheckpointStore, run_id: str, program: str,
                 inputs: str):
        self.store, self.run_id = open_store(checkpoint), run_id
        self._owns_store = self.store is not checkpoint
        self.owner = uuid.uuid4().hex
        self._claimed = False
        try:
            self.recorded = self.store.begin(run_id, program, inputs)
            claim = getattr(self.store, "claim", None)
            if claim is not None:
                claim(run_id, self.owner)
                self._claimed = True
            # Every record is read now, once: a damaged one is found before any LM call, not halfway through.
            self._unpacked = {call.seq: unpack(call) for call in self.recorded}
        except BaseException:
            self.release()
            raise
        self.position = 0
        self.next_seq = len(self.recorded)

    def unpacked(self, call: CallRecord) -> tuple[Any, ...]:
        """A recorded call's (result, step, warnings, turn), as read when the replay started (`unpack`)."""
        return self._unpacked[call.seq]

    def take(self, role: str, inputs_hash: str, nested: bool) -> tuple[list[CallRecord], CallRecord] | None:
        """The record answering this call, with the nested calls recorded inside it; None when the call
        must run live. A phase the record has not finished runs live, and the calls it makes are
        answered by the nested records it did finish."""
        end = self.position
        if not nested:
            while end < len(self.recorded) and self.recorded[end].nested:
                end += 1
        if end == len(self.recorded) or self.recorded[end].nested != nested:
            read_only = getattr(self.store, "read_only", None)
            if read_only:
                raise ConfigurationError(
                    f"run {self.run_id!r} goes on past its record ({len(self.recorded)} calls) and would record new "
                    f"calls, but {str(self.store.path)!r} is read-only here ({read_only}): give a writable copy of it")
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
        """Record a finished call; a store that fails (a full disk, a damaged file) raises `RunError`, which
        ends the run gracefully with its work so far."""
        # A prediction holds its signature class, which may be built at run time: keep its fields only.
        portable = _Fields(dict(result.items())) if isinstance(result, dspy.Prediction) else result
        payload = pickle.dumps((portable, *details), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.store.record(self.run_id, CallRecord(self.next_seq, role, inputs_hash, nested, payload))
        except _STORAGE_ERRORS as exc:
            raise RunError(f"the checkpoint could not record call {self.next_seq + 1} of run {self.run_id!r} "
                           f"({type(exc).__name__}: {exc}); the run stopped with its work so far and resumes from "
                           "its last recorded call once the storage works again") from exc
        self.next_seq += 1

    def ask(self, role: str, inputs_hash: str, question: Any) -> None:
        """Keep the question the run pauses on, asked by its next call; `RunError` when the store cannot."""
        if not hasattr(self.store, "ask"):
            raise ConfigurationError(f"the checkpoint store {type(self.store).__name__} cannot hold a run that waits "
                                     "for a person (it has no `ask`): use a SQLiteStore (checkpoint='runs.db')")
        record = QuestionRecord(self.run_id, self.next_seq, role, inputs_hash,
                                pickle.dumps(question, protocol=pickle.HIGHEST_PROTOCOL), None, time.time())
        try:
            self.store.ask(record)
        except _STORAGE_ERRORS as exc:
            raise RunError(f"the checkpoint could not keep the question run {self.run_id!r} waits on "
                           f"({type(exc).__name__}: {exc})") from exc

    def answer_for(self, role: str, inputs_hash: str) -> dict[str, Any] | None:
        """A person's answer recorded for the question this run paused on, when this call (`role`, with
        inputs of hash `inputs_hash`) is the one that asked it; None when there is none yet."""
        questions = getattr(self.store, "questions", None)
        record = next((found for found in questions(self.run_id) if found.run_id == self.run_id), None) if (
            questions is not None) else None
        if record is None or record.answer is None:
            return None
        if (record.role, record.inputs_hash, record.seq) != (role, inputs_hash, self.next_seq):
            raise ReplayDivergence(
                f"run {self.run_id!r} waits on the {record.role}'s answer at call {record.seq + 1}, but the program "
                f"now calls {role} at call {self.next_seq + 1}: resume it with the program that asked, or give this "
                "run a new run_id")
        return json.loads(record.answer)

    def settle(self) -> None:
        """The question's answer is recorded as its call's: forget the question."""
        with contextlib.suppress(*_STORAGE_ERRORS):  # a question left behind is answered by the call's record
            self.store.settle(self.run_id)

    def finish(self, stop_reason: str) -> str | None:
        """Record how the run ended; a warning when the store failed to (the run's result stands)."""
        try:
            self.store.finish(self.run_id, stop_reason)
        except _STORAGE_ERRORS as exc:
            return f"the checkpoint could not record how run {self.run_id!r} ended ({type(exc).__name__}: {exc})"
        return None

    def release(self) -> None:
        """At the end of the run, however it ended: give the claim on the run id up, and close the store (one
        opened from a path) or checkpoint it (a store object), so that its file alone holds the run."""
        release = getattr(self.store, "release", None)
        if self._claimed and release is not None:
            with contextlib.suppress(*_STORAGE_ERRORS):  # a stale claim is taken over by the next run anyway
                release(self.run_id, self.owner)
            self._claimed = False
        end = "close" if self._owns_store else "checkpoint"
        if hasattr(self.store, end):
            with contextlib.suppress(*_STORAGE_ERRORS):
                getattr(self.store, end)()


@dataclass(frozen=True)
class _Fields:
    values: dict[str, Any]


def unpack(call: CallRecord) -> tuple[Any, ...]:
    """A record's (result, step, warnings, turn); a damaged record is a `ConfigurationError`."""
    try:
        result, step, *details = pickle.loads(call.payload)
    except Exception as exc:  # pickle raises many kinds on damaged bytes
        raise ConfigurationError(f"the record of call {call.seq + 1} ({call.role}) is damaged and cannot be "
                                 f"replayed ({type(exc).__name__}: {exc}); give this run a new run_id") from exc
    if dataclasses.is_dataclass(step):  # a step recorded before a field was added: that field's default
        for field in dataclasses.fields(step):
            if not hasattr(step, field.name) and field.default is not dataclasses.MISSING:
                object.__setattr__(step, field.name, field.default)
    return (dspy.Prediction(**result.values) if isinstance(result, _Fields) else result, step, *details)

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

A run that pauses for a person (`loops.person`, stop reason "awaiting_input") leaves its question in the
store, one per run id (`ask`); a person's answer is recorded beside it (`record_answer`, `loops runs answer`),
and the resumed run takes it (`Replay.answer_for`) and clears it (`settle`) once the call is recorded.

A store that cannot be read when a run starts (a damaged or unreadable file, a damaged record) is a
`ConfigurationError` naming the file; one that fails while the run goes on (a full disk) ends the run
gracefully with its work so far, stop reason "error" and the cause on `error` (a `RunError`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
import re
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import dspy

from loops.errors import ConfigurationError, ReplayDivergence, RunError

__all__ = ["CallRecord", "CheckpointStore", "MemoryStore", "QuestionRecord", "Replay", "RunRecord", "SQLiteStore",
           "open_store", "program_difference", "stable_hash", "unpack"]

# What a store may raise when its storage fails: SQLite's errors, the file system's.
_STORAGE_ERRORS = (sqlite3.Error, OSError)


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


@dataclass(frozen=True)
class QuestionRecord:
    """The question run `run_id` paused on, asked by call `seq` (`role`, with inputs of hash `inputs_hash`):
    `question` the pickled `loops.person.Question`, `answer` a person's answer as JSON once given."""

    run_id: str
    seq: int
    role: str
    inputs_hash: str
    question: bytes
    answer: str | None
    asked: float

    def unpack(self) -> Any:
        """The `loops.person.Question`; a damaged record is a `ConfigurationError`."""
        try:
            return pickle.loads(self.question)
        except Exception as exc:  # pickle raises many kinds on damaged bytes
            raise ConfigurationError(f"the question run {self.run_id!r} waits on is damaged and cannot be read "
                                     f"({type(exc).__name__}: {exc})") from exc


def _nested_in(run_id: str, candidate: str) -> bool:
    """Whether `candidate` is `run_id` or a run nested in it (a DSL loop form's run is `RUN_ID/line:col#n`)."""
    return candidate == run_id or candidate.startswith(run_id + "/")


class CheckpointStore(Protocol):
    def begin(self, run_id: str, program: str, inputs: str) -> list[CallRecord]:
        """Open `run_id` (creating it), checking it was recorded for this program and these inputs;
        returns its recorded calls in order."""

    def claim(self, run_id: str, owner: str) -> None:
        """Make `owner` the one run working on `run_id`; `ConfigurationError` while another live one is.
        Optional: a store without it lets any number of runs work on one id."""

    def release(self, run_id: str, owner: str) -> None:
        """Give `owner`'s claim on `run_id` up (optional, as `claim`)."""

    def record(self, run_id: str, call: CallRecord) -> None: ...

    def finish(self, run_id: str, stop_reason: str) -> None: ...

    def runs(self) -> list[RunRecord]: ...

    def calls(self, run_id: str) -> list[CallRecord]: ...

    def ask(self, record: QuestionRecord) -> None:
        """Keep the question a run paused on (replacing any earlier one of that run). Optional, with the three
        below: a store without them cannot hold a run that waits for a person."""

    def questions(self, run_id: str) -> list[QuestionRecord]:
        """The questions of `run_id` and of the runs nested in it."""

    def record_answer(self, run_id: str, answer: str) -> None: ...

    def settle(self, run_id: str) -> None:
        """Forget the question of `run_id`: its answer is recorded as the call's."""


def _check_run(run_id: str, found: tuple[str, str] | None, program: str, inputs: str) -> None:
    if not isinstance(run_id, str) or not run_id.strip():
        raise ConfigurationError(f"run_id must be a non-empty str, got {run_id!r}")
    if found is None:
        return
    difference = program_difference(found[0], program)
    if difference is not None:
        raise ReplayDivergence(f"run {run_id!r} was recorded for another program: {difference}; resume it with the "
                               "program that recorded it (the same roles, the same --human), or give this run a new "
                               "run_id")
    if found[1] != inputs:
        raise ReplayDivergence(f"run {run_id!r} was recorded with other inputs: give this run a new run_id")


def program_difference(recorded: str, program: str) -> str | None:
    """What differs between the program a run was recorded for and `program` (their fingerprints,
    `LoopModule.fingerprint`), in words: the class, or who plays which role; None when they are the same
    program. A fingerprint recorded before roles were described in it is compared by its identity alone."""
    (identity, _, roles), (then_identity, _, then_roles) = program.partition(" "), recorded.partition(" ")
    if identity == then_identity:
        return None
    kind, then_kind = identity.split(":")[0], then_identity.split(":")[0]
    if kind != then_kind or not roles or not then_roles:
        return f"{then_kind} then, {kind} now" if kind != then_kind else "its roles differ"
    now, then = (dict(item.split("=", 1) for item in played.split(",")) for played in (roles, then_roles))
    changed = [_role_change(role, then.get(role), now.get(role)) for role in sorted({*now, *then})
               if now.get(role) != then.get(role)]
    return "; ".join(changed) or "the program's text differs"


def _role_change(role: str, then: str | None, now: str | None) -> str:
    if then and now and then.startswith("llm:") and now.startswith("llm:"):
        return f"the {role}'s prompt (its instructions or fields) differs"
    return f"the {role} was {_played(then)} then and is {_played(now)} now"


def _played(player: str | None) -> str:
    kind, _, name = (player or "").partition(":")
    return {"": "not there", "person": "a person", "llm": "the built-in LLM role"}.get(kind, f"the phase {name}")


class MemoryStore:
    """A store in this process's memory (for tests): nothing survives the process."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._calls: dict[str, list[CallRecord]] = {}
        self._claims: dict[str, str] = {}
        self._questions: dict[str, QuestionRecord] = {}
        self._lock = threading.Lock()

    def claim(self, run_id: str, owner: str) -> None:
        with self._lock:
            if self._claims.setdefault(run_id, owner) != owner:
                raise _in_progress(run_id, "in this process")

    def release(self, run_id: str, owner: str) -> None:
        with self._lock:
            if self._claims.get(run_id) == owner:
                del self._claims[run_id]

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

    def ask(self, record: QuestionRecord) -> None:
        with self._lock:
            self._questions[record.run_id] = record

    def questions(self, run_id: str) -> list[QuestionRecord]:
        with self._lock:
            return [record for key, record in self._questions.items() if _nested_in(run_id, key)]

    def record_answer(self, run_id: str, answer: str) -> None:
        with self._lock:
            self._questions[run_id] = dataclasses.replace(self._questions[run_id], answer=answer)

    def settle(self, run_id: str) -> None:
        with self._lock:
            self._questions.pop(run_id, None)


class SQLiteStore:
    """Runs and their calls in one SQLite file; each call is committed as it finishes."""

    # A call's `inputs_hash` is stored in the column `digest`, its first name, so that older files resume.
    _SCHEMA = """
        CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, program TEXT NOT NULL, inputs TEXT NOT NULL,
                                         created REAL NOT NULL, stop_reason TEXT);
        CREATE TABLE IF NOT EXISTS calls (run_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
                                          digest TEXT NOT NULL, nested INTEGER NOT NULL, payload BLOB NOT NULL,
                                          PRIMARY KEY (run_id, seq));
        CREATE TABLE IF NOT EXISTS claims (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, process TEXT NOT NULL,
                                           claimed REAL NOT NULL);
        CREATE TABLE IF NOT EXISTS questions (run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, role TEXT NOT NULL,
                                              digest TEXT NOT NULL, question BLOB NOT NULL, answer TEXT,
                                              asked REAL NOT NULL);
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
        with self._lock, self._reading():
            found = self._db.execute("SELECT program, inputs FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            _check_run(run_id, found, program, inputs)
            if found is None:
                self._db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, NULL)", (run_id, program, inputs, time.time()))
            return self._calls(run_id)

    def claim(self, run_id: str, owner: str) -> None:
        """Claim `run_id` for `owner` in one transaction: a claim of a live process (this one included) is
        refused, one whose process is gone (SIGKILLed, crashed) is taken over."""
        with self._lock, self._reading():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                held = self._db.execute("SELECT owner, process FROM claims WHERE run_id = ?", (run_id,)).fetchone()
                if held is not None and held[0] != owner and _alive(held[1]):
                    raise _in_progress(run_id, _describe_process(held[1]))
                self._db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                                 (run_id, owner, _this_process(), time.time()))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def release(self, run_id: str, owner: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM claims WHERE run_id = ? AND owner = ?", (run_id, owner))

    def record(self, run_id: str, call: CallRecord) -> None:
        with self._lock:
            self._db.execute("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?)",
                             (run_id, call.seq, call.role, call.inputs_hash, int(call.nested), call.payload))

    def finish(self, run_id: str, stop_reason: str) -> None:
        with self._lock:
            self._db.execute("UPDATE runs SET stop_reason = ? WHERE run_id = ?", (stop_reason, run_id))

    def runs(self) -> list[RunRecord]:
        with self._lock, self._reading():
            rows = self._db.execute(
                "SELECT r.run_id, r.program, r.inputs, r.created, COUNT(c.seq), r.stop_reason FROM runs r "
                "LEFT JOIN calls c ON c.run_id = r.run_id GROUP BY r.run_id ORDER BY r.created").fetchall()
        return [RunRecord(*row) for row in rows]

    def calls(self, run_id: str) -> list[CallRecord]:
        with self._lock, self._reading():
            return self._calls(run_id)

    def ask(self, record: QuestionRecord) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO questions VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (record.run_id, record.seq, record.role, record.inputs_hash, record.question,
                              record.answer, record.asked))

    def questions(self, run_id: str) -> list[QuestionRecord]:
        with self._lock, self._reading():
            rows = self._db.execute("SELECT run_id, seq, role, digest, question, answer, asked FROM questions WHERE "
                                    "run_id = ? OR substr(run_id, 1, ?) = ?",
                                    (run_id, len(run_id) + 1, run_id + "/")).fetchall()
        return [QuestionRecord(*row) for row in rows]

    def record_answer(self, run_id: str, answer: str) -> None:
        with self._lock:
            self._db.execute("UPDATE questions SET answer = ? WHERE run_id = ?", (answer, run_id))

    def settle(self, run_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM questions WHERE run_id = ?", (run_id,))

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A storage failure while the file is read (a damaged file, one that cannot be read) as the one-line
        configuration error of a file that cannot be used."""
        try:
            yield
        except sqlite3.Error as exc:
            raise ConfigurationError(f"cannot use {str(self.path)!r} as a checkpoint file: {exc}") from exc

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
    """A run's record being replayed: hands out the recorded calls in order, then records new ones. It claims
    the run id when it starts (`release` gives the claim up), and checks that every record can be read."""

    def __init__(self, store: CheckpointStore, run_id: str, program: str, inputs: str):
        self.store, self.run_id = store, run_id
        self.owner = uuid.uuid4().hex
        self.recorded = store.begin(run_id, program, inputs)
        claim = getattr(store, "claim", None)
        if claim is not None:
            claim(run_id, self.owner)
        try:
            # Every record is read now, once: a damaged one is found before any LM call, not halfway through.
            self._unpacked = {call.seq: unpack(call) for call in self.recorded}
        except ConfigurationError:
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
        """Give the claim on the run id up (at the end of the run, however it ended)."""
        release = getattr(self.store, "release", None)
        if release is not None:
            with contextlib.suppress(*_STORAGE_ERRORS):  # a stale claim is taken over by the next run anyway
                release(self.run_id, self.owner)


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


def _in_progress(run_id: str, where: str) -> ConfigurationError:
    return ConfigurationError(f"run {run_id!r} is in progress {where}: wait for it to end, or give this run "
                              "another run_id")


def _this_process() -> str:
    """This process, as a claim records it: host, pid and the pid's start time (a reused pid is not alive)."""
    return f"{socket.gethostname()}|{os.getpid()}|{_started(os.getpid())}"


def _started(pid: int) -> str:
    """When process `pid` started (Linux: its start time in clock ticks after boot), '' where unknown; 'gone'
    for a process that no longer exists or has exited (a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone" if Path("/proc/self").exists() else ""
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return "gone" if fields[0] in ("Z", "X") else fields[19]


def _alive(process: str) -> bool:
    """Whether the process a claim records still runs; a process on another host is taken to."""
    host, pid, started = process.split("|")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = _started(int(pid))
    return now != "gone" and (not started or not now or now == started)


def _describe_process(process: str) -> str:
    host, pid, _ = process.split("|")
    return f"in process {pid}" + ("" if host == socket.gethostname() else f" on {host}")

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

A store that cannot be read when a run starts (a damaged or unreadable file, a damaged page anywhere in it, a
damaged record) is a `ConfigurationError` naming the file; one that fails while the run goes on (a full disk)
ends the run gracefully with its work so far, stop reason "error" and the cause on `error` (a `RunError`).

A SQLite file is whole on its own once a run ends: the run folds SQLite's write-ahead log into it, a store it
opened from a path is closed, and every store still open is closed when the process exits. A file this process
cannot write is read as it is: its runs are listed, shown and replayed, and a run that would record anything is
refused before any LM call. `delete_runs` and `prune_runs` (by age, stop reason and number) delete runs and
compact the file (`loops runs delete/prune`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import difflib
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
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import dspy

from loops.errors import ConfigurationError, ReplayDivergence, RunError

__all__ = ["CallRecord", "CheckpointStore", "MemoryStore", "QuestionRecord", "Removal", "Replay", "RunRecord",
           "SQLiteStore", "delete_runs", "open_store", "opened", "program_difference", "program_name", "prune_runs",
           "stable_hash", "unknown_run", "unpack"]

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


def _within(candidate: str, run_ids: set[str] | frozenset[str]) -> bool:
    """Whether `candidate` is one of `run_ids` or a run nested in one of them."""
    return candidate in run_ids or _nested_in_any(candidate, run_ids)


def _nested_in_any(candidate: str, run_ids: set[str] | frozenset[str]) -> bool:
    """Whether `candidate` is a run nested in one of `run_ids`."""
    return any(candidate[:at] in run_ids for at, char in enumerate(candidate) if char == "/")


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
    difference, recorded, now = program_difference(found[0], program), program_name(found[0]), program_name(program)
    if difference is not None and recorded != now:
        raise ReplayDivergence(f"run {run_id!r} was recorded by another program ({recorded}, not {now}): resume it "
                               "with the command or program that recorded it, or give this run a new run_id")
    if difference is not None:
        raise ReplayDivergence(f"run {run_id!r} was recorded by another program, a {now} whose roles differ from "
                               f"this one's: {difference}; resume it with the options it was recorded with (the same "
                               "roles, the same --human), or give this run a new run_id")
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
    if kind != then_kind:
        return f"{then_kind} then, {kind} now"
    if not roles or not then_roles:
        return ("a role's instructions or fields, or who answers it (an LM, a person as with --human, a custom "
                "phase)")
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


def program_name(fingerprint: str) -> str:
    """The class a program's fingerprint (a run's `program`) names, e.g. CreatorCriticIterator."""
    return fingerprint.partition(":")[0].rsplit(".", 1)[-1]


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
    """Runs and their calls in one SQLite file; each call is committed as it finishes.

    The file is checked (SQLite's `quick_check`) the first time a process opens it, so a damaged file is a
    `ConfigurationError` before any LM call. A file this process cannot write (a read-only file, directory or
    file system) is opened read-only (`read_only` says why): its runs can be listed, shown and replayed, and
    a run that would record anything is refused. `close()` folds the write-ahead log into the file, so that
    the file alone holds every run; a run opened from a path closes its store when it ends, and every store
    still open is closed when the process exits."""

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

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False):
        self.path = Path(path)
        #: Why this store only reads its file (None when it writes it).
        self.read_only: str | None = "opened read-only" if read_only else None
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._db = self._connect_read_only() if read_only else self._connect()
        except sqlite3.Error as exc:
            raise self._unusable(exc) from exc
        try:
            self._check_integrity()
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, sqlite3.Error):
                raise self._unusable(exc) from exc
            raise
        _OPEN_STORES.add(self)

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def begin(self, run_id: str, program: str, inputs: str) -> list[CallRecord]:
        with self._lock, self._reading():
            found = self._db.execute("SELECT program, inputs FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            _check_run(run_id, found, program, inputs)
            if found is None:
                self._refuse_writing(f"start the new run {run_id!r}, whose calls it would record")
                self._db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, NULL)", (run_id, program, inputs, time.time()))
            return self._calls(run_id)

    def claim(self, run_id: str, owner: str) -> None:
        """Claim `run_id` for `owner` in one transaction: a claim of a live process (this one included) is
        refused, one whose process is gone (SIGKILLed, crashed) is taken over. A read-only file cannot be
        claimed, nor written by this process: the run only replays it."""
        if self.read_only:
            return
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
        if self.read_only:
            return
        with self._lock:
            self._db.execute("DELETE FROM claims WHERE run_id = ? AND owner = ?", (run_id, owner))

    def record(self, run_id: str, call: CallRecord) -> None:
        with self._lock:
            self._db.execute("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?)",
                             (run_id, call.seq, call.role, call.inputs_hash, int(call.nested), call.payload))

    def finish(self, run_id: str, stop_reason: str) -> None:
        with self._lock:
            if self.read_only:  # a replay of a finished run ends as it was recorded; anything else is refused earlier
                return
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
        self._refuse_writing(f"record an answer for run {run_id!r}")
        with self._lock, self._reading():
            self._db.execute("UPDATE questions SET answer = ? WHERE run_id = ?", (answer, run_id))

    def settle(self, run_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM questions WHERE run_id = ?", (run_id,))

    def delete(self, run_ids: Iterable[str]) -> list[str]:
        """Delete runs, with their calls, questions and claims and the runs nested in them (a DSL loop form's),
        in one transaction; returns every run id deleted. `ConfigurationError`, with nothing deleted, when one
        is not in the file or is in progress in a live process."""
        run_ids = list(dict.fromkeys(run_ids))
        self._refuse_writing("delete runs")
        with self._lock, self._reading():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                known = [row[0] for row in self._db.execute("SELECT run_id FROM runs ORDER BY created")]
                missing = set(run_ids).difference(known)
                if missing:
                    raise unknown_run(next(run_id for run_id in run_ids if run_id in missing), known, self.path)
                roots = frozenset(run_ids)
                doomed = [run_id for run_id in known if _within(run_id, roots)]
                for run_id, process in self._db.execute("SELECT run_id, process FROM claims").fetchall():
                    if run_id in doomed and _alive(process):
                        raise _in_progress(run_id, _describe_process(process), "wait for it to end before deleting it")
                for table in ("calls", "questions", "claims", "runs"):
                    self._db.executemany(f"DELETE FROM {table} WHERE run_id = ?", [(run_id,) for run_id in doomed])
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return doomed

    def in_progress(self) -> set[str]:
        """The runs a live process works on now (their claims)."""
        with self._lock, self._reading():
            claims = self._db.execute("SELECT run_id, process FROM claims").fetchall()
        return {run_id for run_id, process in claims if _alive(process)}

    def compact(self) -> int:
        """Give the space of deleted runs back to the file system (SQLite's VACUUM, then the write-ahead log
        folded in and emptied); returns the bytes the store takes now (`size`)."""
        self._refuse_writing("compact it")
        with self._lock, self._reading():
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return self.size()

    def size(self) -> int:
        """The bytes the store takes on disk: the file and its write-ahead log."""
        return sum(path.stat().st_size for path in (self.path, Path(f"{self.path}-wal")) if path.exists())

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the file as far as no reader in another process holds it back (SQLite's
        passive checkpoint): the runs finished so far are then in the file itself, should it be copied alone."""
        with self._lock:
            self._checkpoint()

    def close(self) -> None:
        """Close the file, its write-ahead log folded in first (`checkpoint`; the last connection to the file
        removes the log too), so that the file alone holds every run. A closed store raises
        `sqlite3.ProgrammingError` when used; closing it again does nothing."""
        with self._lock:
            if not self._closed:
                self._checkpoint()
                self._db.close()
                self._closed = True
                _left_as_seen(self.path)
        _OPEN_STORES.discard(self)

    def _checkpoint(self) -> None:
        if not self.read_only:
            with contextlib.suppress(*_STORAGE_ERRORS):
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                _left_as_seen(self.path)

    # Opening ----------------------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """The file opened to read and write, created when missing; read-only when this process cannot write it."""
        if self.path.is_file() and not os.access(self.path, os.W_OK):
            return self._connect_read_only(_why_read_only(self.path, "this process may not write the file"))
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # Each commit reaches the OS before the call returns: a killed process loses nothing; only a
            # power cut can lose the last calls, which a resume then makes again.
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(self._SCHEMA)
        except sqlite3.Error as exc:
            db.close()
            if self.path.is_file() and _cannot_write(exc):  # its directory or file system is read-only
                return self._connect_read_only(_why_read_only(self.path, f"SQLite cannot write beside it: {exc}"))
            raise
        return db

    def _connect_read_only(self, why: str | None = None) -> sqlite3.Connection:
        """The file opened to read only. In WAL mode SQLite reads through two files beside it (-wal, -shm) which
        it cannot create in a directory it cannot write; there a file with no log pending is read as it is
        (`immutable`), and one whose last records wait in its log is a `ConfigurationError`."""
        self.read_only = why or self.read_only
        if not self.path.is_file():
            raise ConfigurationError(f"cannot read {str(self.path)!r} as a checkpoint file: it does not exist")
        uri = self.path.resolve().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False, isolation_level=None)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.Error as exc:
            db.close()
            if not _cannot_write(exc):
                raise
        log = Path(f"{self.path}-wal")
        if log.is_file() and log.stat().st_size > 0:
            raise ConfigurationError(
                f"cannot read {str(self.path)!r} where it is: its last records wait in {str(log)!r}, which SQLite "
                "reads only where it may write beside them; copy both files to a writable directory, or open it "
                "once with write access (closing it folds them into the file)")
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False, isolation_level=None)

    def _check_integrity(self) -> None:
        """SQLite's `quick_check` of the whole file (about 1.5 ms of CPU per MB), unless this process left the file
        as it is now: a damaged page anywhere, not only in the records a run reads, is found before the run
        writes into the file, and a process that runs many runs through one file checks it once."""
        if _unchanged_since_seen(self.path):
            return
        problems = [row[0] for row in self._db.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
            raise self._damaged(f"{problems[0]}{more}")
        _left_as_seen(self.path)

    # Helpers --------------------------------------------------------------------------------------------------

    def _refuse_writing(self, action: str) -> None:
        if self.read_only:
            raise ConfigurationError(f"cannot {action}: {str(self.path)!r} is read-only here ({self.read_only}); give "
                                     "a writable copy of it")

    def _unusable(self, exc: sqlite3.Error) -> ConfigurationError:
        if getattr(exc, "sqlite_errorname", "").startswith("SQLITE_CORRUPT"):
            return self._damaged(str(exc))
        return ConfigurationError(f"cannot use {str(self.path)!r} as a checkpoint file: {exc}")

    def _damaged(self, problem: str) -> ConfigurationError:
        return ConfigurationError(f"cannot use {str(self.path)!r} as a checkpoint file: it is damaged ({problem}); "
                                  f"restore it from a copy, or give a new file (`sqlite3 {self.path} .recover` may "
                                  "save its records)")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A storage failure while the file is read (a damaged file, one that cannot be read) as the one-line
        configuration error of a file that cannot be used."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._unusable(exc) from exc

    def _calls(self, run_id: str) -> list[CallRecord]:
        rows = self._db.execute("SELECT seq, role, digest, nested, payload FROM calls WHERE run_id = ? ORDER BY seq",
                                (run_id,)).fetchall()
        return [CallRecord(seq, role, inputs_hash, bool(nested), payload)
                for seq, role, inputs_hash, nested, payload in rows]


# Every SQLiteStore not yet closed: closed when the process exits, so that each file is whole on its own.
_OPEN_STORES: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()
# Each file as this process last left it (device and inode: size and modification time): a file nobody else has
# changed since is not checked again when a run opens it anew.
_FILES_SEEN: dict[tuple[int, int], tuple[int, int]] = {}
_FILES_SEEN_LOCK = threading.Lock()


def _stat(path: Path) -> tuple[tuple[int, int], tuple[int, int]] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino), (found.st_size, found.st_mtime_ns)


def _left_as_seen(path: Path) -> None:
    found = _stat(path)
    if found is not None:
        with _FILES_SEEN_LOCK:
            _FILES_SEEN[found[0]] = found[1]


def _unchanged_since_seen(path: Path) -> bool:
    found = _stat(path)
    with _FILES_SEEN_LOCK:
        return found is not None and _FILES_SEEN.get(found[0]) == found[1]


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN_STORES):
        with contextlib.suppress(*_STORAGE_ERRORS):
            store.close()


def _why_read_only(path: Path, otherwise: str) -> str:
    try:
        on_read_only_system = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        on_read_only_system = False
    return "its file system is read-only" if on_read_only_system else otherwise


def _cannot_write(exc: sqlite3.Error) -> bool:
    """Whether SQLite failed for want of write access (to the file, the directory beside it, the file system)."""
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith("SQLITE_READONLY") or name in ("SQLITE_CANTOPEN", "SQLITE_PERM")


def open_store(checkpoint: str | os.PathLike[str] | CheckpointStore) -> CheckpointStore:
    """A store from a path (a `SQLiteStore` the caller closes) or a store object (returned as it is)."""
    if isinstance(checkpoint, str | os.PathLike):
        return SQLiteStore(checkpoint)
    if all(hasattr(checkpoint, name) for name in ("begin", "record", "finish")):
        return checkpoint
    raise ConfigurationError(f"checkpoint must be a file path or a checkpoint store, got {checkpoint!r:.100}")


@contextlib.contextmanager
def opened(checkpoint: str | os.PathLike[str] | CheckpointStore) -> Iterator[CheckpointStore]:
    """The store of `checkpoint` for the time of a `with` block: one opened from a path is closed after it (its
    file then whole on its own); a store object given is left open, its owner's to close."""
    store = open_store(checkpoint)
    try:
        yield store
    finally:
        if store is not checkpoint:
            store.close()


# --- retention: deleting runs, and the file kept compact ------------------------------------------------------


@dataclass(frozen=True)
class Removal:
    """What `delete_runs` or `prune_runs` did: the runs deleted (with the runs nested in them), the runs left
    because a live process works on them, and the bytes of the file (with its write-ahead log) before and after
    it was compacted (the same when nothing was deleted, or on a dry run)."""

    deleted: tuple[str, ...]
    in_progress: tuple[str, ...]
    bytes_before: int
    bytes_after: int


def delete_runs(checkpoint: str | os.PathLike[str] | SQLiteStore, run_ids: Iterable[str]) -> Removal:
    """Delete runs from a checkpoint file, each with its calls, its question and the runs nested in it, then
    compact the file (VACUUM). `ConfigurationError`, with nothing deleted, when a run is not in the file or a
    live process works on it."""
    run_ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    if not run_ids:
        raise ConfigurationError("name the runs to delete (`loops runs list FILE` lists them)")
    with _sqlite_store(checkpoint) as store:
        before = store.size()
        deleted = store.delete(run_ids)
        return Removal(tuple(deleted), (), before, store.compact())


def prune_runs(checkpoint: str | os.PathLike[str] | SQLiteStore, *,
               older_than: float | datetime.timedelta | None = None, status: str | Iterable[str] | None = None,
               keep_last: int | None = None, dry_run: bool = False) -> Removal:
    """Delete the runs of a checkpoint file that match every criterion given, then compact it (VACUUM):
    `older_than` (seconds, or a `timedelta`) the runs started that long ago or longer; `status` the runs that
    ended with these stop reasons ("unfinished" for those that have not ended); `keep_last` keeps the newest
    N of the runs the others match (alone: every run but the newest N). A run a live process works on is left
    (`Removal.in_progress`); a run nested in another (a DSL loop form's) goes with it. `dry_run` deletes
    nothing and says what would be."""
    if older_than is None and status is None and keep_last is None:
        raise ConfigurationError("say which runs to prune: older_than (seconds), status (stop reasons) or keep_last "
                                 "(the newest runs to keep)")
    if isinstance(older_than, datetime.timedelta):
        older_than = older_than.total_seconds()
    if older_than is not None and (isinstance(older_than, bool) or not isinstance(older_than, int | float)
                                   or not 0 <= older_than < float("inf")):
        raise ConfigurationError(f"older_than must be seconds (a number >= 0) or a timedelta, got {older_than!r}")
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0):
        raise ConfigurationError(f"keep_last must be a whole number >= 0, got {keep_last!r}")
    statuses = None if status is None else {status} if isinstance(status, str) else set(status)
    with _sqlite_store(checkpoint) as store:
        runs = store.runs()  # oldest first
        known = {run.run_id for run in runs}
        tops = [run for run in runs if not _nested_in_any(run.run_id, known)]
        cutoff = None if older_than is None else time.time() - older_than
        matched = [run for run in tops if (cutoff is None or run.created <= cutoff) and (
            statuses is None or (run.stop_reason or "unfinished") in statuses)]
        if keep_last is not None:
            matched = matched[:max(len(matched) - keep_last, 0)]
        busy = store.in_progress()
        left = tuple(run.run_id for run in matched if any(_nested_in(run.run_id, claimed) for claimed in busy))
        chosen = [run.run_id for run in matched if run.run_id not in left]
        before = store.size()
        if dry_run or not chosen:
            return Removal(tuple(chosen), left, before, before)
        deleted = store.delete(chosen)
        return Removal(tuple(deleted), left, before, store.compact())


@contextlib.contextmanager
def _sqlite_store(checkpoint: str | os.PathLike[str] | SQLiteStore) -> Iterator[SQLiteStore]:
    if not isinstance(checkpoint, str | os.PathLike | SQLiteStore):
        raise ConfigurationError(f"runs are deleted from a SQLite checkpoint (a file path or a SQLiteStore), not "
                                 f"{checkpoint!r:.100}")
    with opened(checkpoint) as store:
        yield store


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


def _in_progress(run_id: str, where: str, fix: str = "wait for it to end, or give this run another run_id"
                 ) -> ConfigurationError:
    return ConfigurationError(f"run {run_id!r} is in progress {where}: {fix}")


def unknown_run(run_id: str, known: Iterable[str], path: str | os.PathLike[str] | None) -> ConfigurationError:
    """The error of a run id a checkpoint (the file at `path`) does not hold: the nearest ids it holds, and how
    to list them all."""
    nearest = difflib.get_close_matches(run_id, list(known), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(map(repr, nearest))}? " if nearest else ""
    listing = f"`loops runs list {path}` lists them" if path is not None else "the store's runs() lists them"
    where = repr(str(path)) if path is not None else "the checkpoint"
    return ConfigurationError(f"no run {run_id!r} in {where}: {hint}{listing}")


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

"""The SQLite store of checkpoints: `SQLiteStore` (one row per call, committed as it finishes; claims that
know which process holds a run id and whether it still lives; the file checked once per process and folded
whole when a run ends), `open_store` and `opened` (a path or a store object, as a run is given it), and
retention (`delete_runs`, `prune_runs`, `Removal`).

Its own room because it changes with SQLite, files and processes, never with what a record holds
(`loops.recording.checkpoint_records`) or how a run replays it (`loops.recording.checkpoint`). Import these from
`loops.recording.checkpoint`, which re-exports them.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loops.errors import ConfigurationError
from loops.recording.checkpoint_records import (
    _STORAGE_ERRORS,
    CallRecord,
    CheckpointStore,
    QuestionRecord,
    RunRecord,
    _check_run,
    _in_progress,
    _nested_in,
    _nested_in_any,
    _within,
    unknown_run,
)

__all__ = ["Removal", "SQLiteStore", "delete_runs", "open_store", "opened", "prune_runs"]


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

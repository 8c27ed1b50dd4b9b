"""The vocabulary of a checkpoint: what a store keeps (`RunRecord`, `CallRecord`, `QuestionRecord`), what a
store does (`CheckpointStore`, the protocol `loops.recording.checkpoint.Replay` talks to), and the rules every store
applies alike: a run id recorded by another program or with other inputs is refused (`program_difference`
says how the programs differ), a run id in progress elsewhere is refused, an unknown one names the nearest.
`MemoryStore` is the store that holds them in memory (tests).

Its own room because the records are what a replay reads and a store writes: they change when what is
recorded changes, never with how SQLite keeps it (`loops.recording.checkpoint_store`) or how a run replays it
(`loops.recording.checkpoint`). Import these from `loops.recording.checkpoint`, which re-exports them.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import pickle
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from loops.errors import ConfigurationError, ReplayDivergence
from loops.identity import canonical

__all__ = ["CallRecord", "CheckpointStore", "MemoryStore", "QuestionRecord", "RunRecord", "program_difference",
           "program_name", "unknown_run"]

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
    `question` the pickled `loops.running.person.Question`, `answer` a person's answer as JSON once given."""

    run_id: str
    seq: int
    role: str
    inputs_hash: str
    question: bytes
    answer: str | None
    asked: float

    def unpack(self) -> Any:
        """The `loops.running.person.Question`; a damaged record is a `ConfigurationError`."""
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
    program. A fingerprint recorded before roles were described in it is compared by its identity alone, and one
    that names the class by the module that defined it then by the class's public name (`loops.identity`)."""
    (identity, _, roles), (then_identity, _, then_roles) = program.partition(" "), recorded.partition(" ")
    if identity == then_identity:
        return None
    (kind, _, rest), (then_kind, _, then_rest) = identity.partition(":"), then_identity.partition(":")
    if kind != then_kind and (then_kind := canonical(then_kind)) == kind and rest == then_rest:
        return None
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

"""Checkpoints on real SQLite files and real processes (`loops.recording.checkpoint`): a file or record that cannot be
read, a damaged page anywhere, is one clear error before any LM call; a normal exit leaves the file whole on
its own; a read-only file (a read-only bind mount) is listed, shown and replayed; storage that fails mid-run
ends the run gracefully with its work; one run at a time per run id, and a killed owner never blocks the
resume; the cost budget holds across a kill and a resume; runs pruned leave a compact file whose kept runs
replay."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import dspy
import pytest

import loops
from loops import ConfigurationError, CreatorCriticIterator
from loops.recording.checkpoint import SQLiteStore, delete_runs, program_difference, prune_runs
from tests.loops.fake_openai import faulty_openai
from tests.loops.test_long_loops import never_approving
from tests.scripted import calls, scripted_lm

ROOT = Path(__file__).resolve().parents[3]


def recorded_run(path: Path) -> None:
    """A finished run 'r1' of three iterations recorded in the SQLite file `path`."""
    with dspy.context(lm=scripted_lm(never_approving)):
        CreatorCriticIterator(max_iterations=3, checkpoint=path)(requirements="a slogan", run_id="r1")


def python(script: str, *args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def integrity(path: Path) -> str:
    """SQLite's `integrity_check` of the file at `path`: "ok", or what is wrong."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            return "\n".join(row[0] for row in db.execute("PRAGMA integrity_check"))
    except sqlite3.DatabaseError as exc:
        return str(exc)


def loops_command(*args: object, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "loops", *map(str, args)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}, **options)


# --- storage that cannot be read: one line, before any LM call ---------------------------------------------


def test_a_damaged_checkpoint_file_is_one_line_with_exit_2_before_any_lm_call(tmp_path):
    path = tmp_path / "runs.db"
    recorded_run(path)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself
    data = bytearray(path.read_bytes())
    data[4096:] = bytes(len(data) - 4096)  # its first page (the schema) is intact, the pages of its records gone
    path.write_bytes(data)

    with faulty_openai() as server:
        command = loops_command("refine", "a slogan", "--model", "openai/x", "--api-base", server.base_url(),
                                "--checkpoint", path, "--run-id", "r1")
        out, err = command.communicate(timeout=120)

    assert command.returncode == 2, out + err
    assert err.strip().splitlines() == [f"error: cannot use {str(path)!r} as a checkpoint file: {DAMAGED}; restore "
                                        f"it from a copy, or give a new file (`sqlite3 {path} .recover` may save its "
                                        "records)"]
    assert server.received["t"] == 0


def test_a_checkpoint_with_one_page_of_random_bytes_is_refused_in_one_line_before_any_lm_call_even_for_a_new_run(
        tmp_path):
    path = tmp_path / "ck.db"
    with dspy.context(lm=scripted_lm(never_approving)):
        for number in range(4):  # a file of a dozen pages
            CreatorCriticIterator(max_iterations=3, checkpoint=path)(requirements=f"slogan {number}",
                                                                     run_id=f"r{number}")
    assert path.stat().st_size >= 10 * 4096 and not Path(f"{path}-wal").exists()
    with path.open("r+b") as file:  # dd if=/dev/urandom of=ck.db bs=4096 seek=7 count=1 conv=notrunc
        file.seek(7 * 4096)
        file.write(random.Random(7).randbytes(4096))
    assert integrity(path) != "ok"  # SQLite's own check fails, though a new run would read none of it

    with faulty_openai() as server:
        command = loops_command("refine", "a slogan", "--model", "openai/x", "--api-base", server.base_url(),
                                "--checkpoint", path, "--run-id", "new")
        out, err = command.communicate(timeout=120)

    assert command.returncode == 2, out + err
    assert re.fullmatch(rf"error: cannot use {re.escape(repr(str(path)))} as a checkpoint file: it is damaged "
                        r"\(.+\); restore it from a copy, or give a new file \(`sqlite3 .+ \.recover` may save its "
                        r"records\)\n", err), err
    assert server.received["t"] == 0


DAMAGED = "it is damaged (database disk image is malformed)"


def test_a_damaged_record_is_a_clear_error_before_any_lm_call(tmp_path):
    path = tmp_path / "runs.db"
    recorded_run(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE calls SET payload = ? WHERE run_id = 'r1' AND seq = 1", (b"\x80\x05garbage",))

    lm = scripted_lm([])
    with dspy.context(lm=lm), pytest.raises(ConfigurationError, match=r"^the record of call 2 \(critic\) is damaged "
                                                                       r"and cannot be replayed \(UnpicklingError"):
        CreatorCriticIterator(max_iterations=3, checkpoint=path)(requirements="a slogan", run_id="r1")
    assert calls(lm) == 0


# --- one file: a normal exit leaves every finished run in the file itself ---------------------------------

_MANY_RUNS = """
    import shutil, sys
    import dspy
    from loops import CreatorCriticIterator
    from loops.recording.checkpoint import SQLiteStore
    from tests.loops.test_long_loops import never_approving
    from tests.scripted import scripted_lm

    path, copy, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = SQLiteStore(path)  # one store for many runs, never closed by this script
    shared, own = (CreatorCriticIterator(max_iterations=1, checkpoint=checkpoint) for checkpoint in (store, path))
    with dspy.context(lm=scripted_lm(never_approving)):
        for number in range(runs):  # every third run opens the file itself (a path), the others use the store
            (own if number % 3 == 2 else shared)(requirements=f"slogan {number}", run_id=f"r{number}")
    shutil.copy(path, copy)  # the file alone, while the process still has it open
"""


def finished_runs(path: Path) -> tuple[int, int]:
    """(runs, finished runs) of the checkpoint file at `path`, read by a plain SQLite connection."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT COUNT(*), COUNT(stop_reason) FROM runs").fetchone()


def test_a_process_that_ran_many_runs_through_one_store_leaves_every_finished_run_in_the_file_alone(tmp_path):
    path, during = tmp_path / "runs.db", tmp_path / "during" / "runs.db"
    during.parent.mkdir()

    ran = python(_MANY_RUNS, path, during, 120)

    assert ran.returncode == 0, ran.stderr
    assert finished_runs(during) == (120, 120)  # each run, as it ended, was folded into the file
    assert sorted(item.name for item in tmp_path.iterdir()) == ["during", "runs.db"]  # no -wal, no -shm left
    alone = tmp_path / "alone" / "runs.db"
    alone.parent.mkdir()
    shutil.copy(path, alone)
    assert finished_runs(alone) == (120, 120) and integrity(alone) == "ok"


# --- a checkpoint that cannot be written: read, shown and replayed as it is ----------------------------------


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[list[str]]:
    """A command prefix under which `directory` is read-only, for root too: a read-only bind mount of it in a mount
    namespace of the command's own (`unshare`: no write reaches it, whoever asks); where user namespaces are not
    allowed, a user who is not root gets the directory and its files made read-only (chmod) instead."""
    mount = ["unshare", "--map-root-user", "--mount", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"',
             str(directory)]
    if shutil.which("unshare") and subprocess.run([*mount, "true"], capture_output=True).returncode == 0:
        yield mount
        return
    if os.geteuid() == 0:
        pytest.skip("nothing makes a directory read-only to root here: user namespaces (unshare) are not allowed")
    paths = [directory, *directory.iterdir()]
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(modes[path] & ~0o222)
    try:
        yield []
    finally:
        for path in paths:
            path.chmod(modes[path])


def run_in(prefix: list[str], *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "loops", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def test_a_read_only_checkpoint_is_listed_shown_and_replayed_and_a_run_that_would_write_is_refused_before_any_call(
        tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "ck.db"
    with faulty_openai() as server:
        def refine(prefix: list[str], tenant: str, run_id: str) -> subprocess.CompletedProcess:
            return run_in(prefix, "refine", "a slogan, read-only", "--model", "openai/x", "--api-base",
                          server.base_url(tenant), "--max-iterations", "2", "--checkpoint", path, "--run-id", run_id)

        recorded = refine([], "record", "r1")
        assert recorded.returncode == 1, recorded.stdout + recorded.stderr  # never approved: max_iterations
        before = (sorted(os.listdir(folder)), path.read_bytes())
        assert before[0] == ["ck.db"]

        with read_only(folder) as prefix:
            listed = run_in(prefix, "runs", "list", path)
            shown = run_in(prefix, "runs", "show", path, "r1")
            replayed = refine(prefix, "replay", "r1")
            new = refine(prefix, "new", "r2")
            pruned = run_in(prefix, "runs", "prune", path, "--keep-last", "0")

    assert listed.returncode == 0 and re.search(r"r1 .* 4 .* max_iterations", listed.stdout), listed.stderr
    assert shown.returncode == 0 and "iterator" in shown.stdout, shown.stderr
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "stop reason: max_iterations" in replayed.stdout and "LM calls: 0 (+4 replayed)" in replayed.stdout
    why = r"\((its file system is read-only|this process may not write the file)\)"
    assert new.returncode == 2 and re.fullmatch(
        rf"error: cannot start the new run 'r2', whose calls it would record: '{path}' is read-only here {why}; "
        r"give a writable copy of it\n", new.stderr), new.stderr
    assert pruned.returncode == 2 and re.fullmatch(
        rf"error: cannot delete runs: '{path}' is read-only here {why}; give a writable copy of it\n", pruned.stderr)
    assert server.received["replay"] == server.received["new"] == 0
    assert (sorted(os.listdir(folder)), path.read_bytes()) == before  # not a byte written, not a file beside it


_KILLED_WRITER = """
    import os, signal, sys
    import dspy
    from loops import CreatorCriticIterator
    from loops.recording.checkpoint import SQLiteStore
    from tests.loops.test_long_loops import never_approving
    from tests.scripted import scripted_lm

    def answer(engine, request):
        if len(engine.requests) == 8:  # the fourth run's critic: its creator's call is in the log, not in the file
            os.kill(os.getpid(), signal.SIGKILL)
        return never_approving(engine, request)

    store = SQLiteStore(sys.argv[1])
    with dspy.context(lm=scripted_lm(answer)):
        for number in range(4):
            CreatorCriticIterator(max_iterations=1, checkpoint=store)(requirements="s", run_id=f"r{number}")
"""


def test_a_read_only_checkpoint_whose_writer_was_killed_is_read_with_its_log_and_without_one_is_a_clear_error(
        tmp_path):
    whole, partial = tmp_path / "whole", tmp_path / "partial"
    whole.mkdir()
    partial.mkdir()
    killed = python(_KILLED_WRITER, whole / "ck.db")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(os.listdir(whole)) == ["ck.db", "ck.db-shm", "ck.db-wal"]
    for name in ("ck.db", "ck.db-wal"):  # the file and its log, copied without the index beside them
        shutil.copy(whole / name, partial / name)
    alone = tmp_path / "alone.db"
    shutil.copy(whole / "ck.db", alone)
    assert finished_runs(alone) == (3, 3)  # the fourth run is in the log only

    with read_only(whole) as prefix:
        listed = run_in(prefix, "runs", "list", whole / "ck.db")
    with read_only(partial) as prefix:
        unreadable = run_in(prefix, "runs", "list", partial / "ck.db")

    assert listed.returncode == 0, listed.stderr
    rows = [line.split("│")[1:-1] for line in listed.stdout.splitlines() if re.match(r"│ r\d", line)]
    assert [(row[0].strip(), row[3].strip(), row[4].strip()) for row in rows] == [
        ("r0", "2", "max_iterations"), ("r1", "2", "max_iterations"), ("r2", "2", "max_iterations"),
        ("r3", "1", "unfinished")]
    assert unreadable.returncode == 2
    assert unreadable.stderr == (
        f"error: cannot read '{partial / 'ck.db'}' where it is: its last records wait in '{partial / 'ck.db-wal'}', "
        "which SQLite reads only where it may write beside them; copy both files to a writable directory, or open it "
        "once with write access (closing it folds them into the file)\n")


# --- storage that fails mid-run: the run ends gracefully, its work kept, and resumes later -------------------

_FULL_DISK = """
    import json, resource, signal, sys
    import dspy
    from loops import CreatorCriticIterator
    from tests.loops.test_long_loops import never_approving
    from tests.scripted import scripted_lm

    path, fill_at = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing

    def answer(engine, request):
        if len(engine.requests) == fill_at:  # from now on no file of this process may grow: the disk is full
            resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
        return never_approving(engine, request)

    with dspy.context(lm=scripted_lm(answer)):
        result = CreatorCriticIterator(max_iterations=4, checkpoint=path)(requirements="a slogan", run_id="r1")
    print(json.dumps({key: result[key] for key in ("final", "stop_reason", "warnings", "lm_calls", "replayed")}))
"""


def test_a_full_disk_mid_run_ends_the_run_gracefully_with_its_work_and_it_resumes_later(tmp_path):
    path = tmp_path / "runs.db"

    full = python(_FULL_DISK, path, 3)
    assert full.returncode == 0, full.stderr
    stopped = json.loads(full.stdout)
    assert (stopped["stop_reason"], stopped["final"], stopped["lm_calls"]) == ("error", "D0", 3)
    assert stopped["warnings"][0].startswith("stopped by an error: RunError: the checkpoint could not record call 3 "
                                             "of run 'r1' (OperationalError: ")

    resumed = python(_FULL_DISK, path, -1)
    assert resumed.returncode == 0, resumed.stderr
    finished = json.loads(resumed.stdout)
    assert (finished["stop_reason"], finished["final"], finished["replayed"], finished["lm_calls"]) == (
        "max_iterations", "D0", 2, 6)  # every draft judged alike: the earlier is kept


# --- one run at a time per run id ---------------------------------------------------------------------------


def test_a_second_process_on_a_run_in_progress_is_refused_before_any_lm_call_and_a_killed_owner_never_blocks(
        tmp_path):
    path = tmp_path / "runs.db"
    with faulty_openai() as server:
        server.hang_s = 120
        server.faults[("owner", 2)] = "hang"  # the owner's critic hangs: its run is in progress
        options = ("--model", "openai/x", "--api-base", "--adapter", "json", "--checkpoint", path, "--run-id", "r1",
                   "--timeout", "300")

        def refine(tenant: str) -> subprocess.Popen:
            # (a requirement of its own: no earlier test's answer is in DSPy's cache, on in the command)
            return loops_command("refine", "a slogan, one run at a time", *options[:3], server.base_url(tenant),
                                 *options[3:])

        owner = refine("owner")
        deadline = time.monotonic() + 60
        while server.received["owner"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.received["owner"] == 2, owner.communicate()

        out, err = refine("second").communicate(timeout=120)
        assert f"error: run 'r1' is in progress in process {owner.pid}: wait for it to end, or give this run another " \
               "run_id" in err, out + err
        assert server.received["second"] == 0

        owner.send_signal(signal.SIGKILL)
        owner.communicate(timeout=30)
        resumed = refine("resumed")
        out, err = resumed.communicate(timeout=120)

    assert resumed.returncode == 1, out + err  # the server never approves: max_iterations
    assert "stop reason: max_iterations" in out and "(+1 replayed)" in out
    assert server.received["resumed"] == 5  # the creator's call was replayed; the killed critic's was sent again


# --- the cost budget across a kill and a resume ---------------------------------------------------------------

_PRICED_RUN = """
    import json, os, signal, sys
    import dspy
    from loops import CreatorCriticIterator, RetryPolicy
    from tests.loops.test_long_loops import never_approving
    from tests.scripted import scripted_lm

    path, kill_at, counter, budget = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])

    def answer(engine, request):
        with open(counter, "a") as out:
            out.write("request\\n")
        with open(counter) as lines:
            if len(lines.readlines()) == kill_at:  # across the killed and the resumed process
                os.kill(os.getpid(), signal.SIGKILL)
        return never_approving(engine, request)

    module = CreatorCriticIterator(max_iterations=10, checkpoint=path)
    with dspy.context(lm=scripted_lm(answer, name="openai/gpt-4o-mini")):  # scripted: priced, never sent
        result = module(requirements="a slogan", run_id="r1", max_cost_usd=budget)
    print(json.dumps({key: result.get(key) for key in ("final", "stop_reason", "lm_calls", "replayed", "cost_usd")}))
"""


def test_the_cost_budget_holds_across_a_kill_and_a_resume_which_reports_the_whole_runs_cost(tmp_path):
    import litellm

    prompt, completion = litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=10, completion_tokens=5)
    budget = (prompt + completion) * 6.5  # seven requests reach it

    whole = python(_PRICED_RUN, tmp_path / "whole.db", -1, tmp_path / "whole.count", budget)
    assert whole.returncode == 0, whole.stderr
    expected = json.loads(whole.stdout)
    assert (expected["stop_reason"], expected["lm_calls"]) == ("cost", 7)

    killed = python(_PRICED_RUN, tmp_path / "runs.db", 5, tmp_path / "runs.count", budget)
    assert killed.returncode == -signal.SIGKILL
    resumed = python(_PRICED_RUN, tmp_path / "runs.db", -1, tmp_path / "runs.count", budget)
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout)

    # The resumed run stops where the uninterrupted one did: one request more in all, the killed one.
    assert len((tmp_path / "runs.count").read_text().splitlines()) == 7 + 1
    assert (outcome["stop_reason"], outcome["final"], outcome["replayed"], outcome["lm_calls"]) == (
        "cost", expected["final"], 4, 3)
    assert outcome["cost_usd"] == pytest.approx(expected["cost_usd"])


@pytest.mark.parametrize(("recorded", "now", "said"), [
    ("m.Loop:abc creator=llm:1,critic=llm:2", "m.Loop:abc creator=llm:1,critic=llm:2", None),
    ("m.Loop:abc", "m.Loop:abc creator=llm:1,critic=llm:2", None),  # recorded before roles were described
    ("m.Loop:abc creator=llm:1,critic=llm:2", "m.Loop:def creator=llm:1,critic=person",
     "the critic was the built-in LLM role then and is a person now"),
    ("m.Loop:abc creator=llm:1", "m.Loop:def creator=llm:9",
     "the creator's prompt (its instructions or fields) differs"),
    ("m.Loop:abc", "m.Other:abc creator=llm:1", "m.Loop then, m.Other now"),
    ("m.Loop:abc", "m.Loop:def creator=llm:1",
     "a role's instructions or fields, or who answers it (an LM, a person as with --human, a custom phase)"),
])
def test_a_program_difference_says_which_role_differs(recorded, now, said):
    assert program_difference(recorded, now) == said


# --- retention: runs deleted by id, by age, by stop reason and by number; the file left compact ----------------


def recorded_runs(path: Path, count: int) -> CreatorCriticIterator:
    """`count` finished runs 'r0'... of two iterations (four calls each) in the file `path`, and a run 'paused'
    waiting on a person; the module that recorded the finished ones."""
    module = CreatorCriticIterator(max_iterations=2, checkpoint=path)
    with dspy.context(lm=scripted_lm(never_approving)):
        for number in range(count):
            module(requirements=f"a slogan {number}", run_id=f"r{number}")
        CreatorCriticIterator(max_iterations=2, critic=loops.human(interactive=False))(
            requirements="a paused slogan", checkpoint=path, run_id="paused")
    return module


def test_pruning_by_age_stop_reason_and_number_leaves_a_compact_file_whose_kept_runs_replay_and_resume(tmp_path):
    path = tmp_path / "runs.db"
    module = recorded_runs(path, 60)
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # the first 20 runs started 40 days ago
        db.executemany("UPDATE runs SET created = created - 40 * 86400 WHERE run_id = ?",
                       [(f"r{number}",) for number in range(20)])
    with SQLiteStore(path) as store:  # a run a live process works on (this one), and a DSL loop form's run in r25
        store.begin("busy", "program", "inputs")
        store.claim("busy", "owner")
        store.begin("r25/3:5#1", "program", "inputs")
        with pytest.raises(ConfigurationError, match=r"^no run 'r99' in .*: did you mean 'r9' or 'r59' or 'r49'\? "):
            delete_runs(store, ["r1", "r99"])  # nothing deleted: one of them is not in the file
        assert len(store.runs()) == 63

        old = prune_runs(store, older_than=datetime.timedelta(days=30))
        assert old.deleted == tuple(f"r{number}" for number in range(20)) and old.in_progress == ()
        assert old.bytes_after < old.bytes_before
        waiting = prune_runs(store, status=["awaiting_input", "unfinished"], dry_run=True)
        assert (waiting.deleted, waiting.in_progress, waiting.bytes_after) == (("paused",), ("busy",),
                                                                              old.bytes_after)
        newest = prune_runs(store, status="max_iterations", keep_last=10)
        assert newest.deleted == (*(f"r{number}" for number in range(20, 50)), "r25/3:5#1")  # as they started
        assert delete_runs(store, ["r50"]).deleted == ("r50",)
        assert [run.run_id for run in store.runs()] == [*(f"r{number}" for number in range(51, 60)), "paused", "busy"]
        with pytest.raises(ConfigurationError, match="^run 'busy' is in progress in process .*: wait for it to end "
                                                     "before deleting it$"):
            delete_runs(store, ["busy"])
        store.release("busy", "owner")
    gone = delete_runs(path, ["busy"])  # given a path: the file opened, compacted and closed
    assert gone.deleted == ("busy",) and gone.bytes_after == path.stat().st_size
    assert not Path(f"{path}-wal").exists() and integrity(path) == "ok"
    assert newest.bytes_after < newest.bytes_before and gone.bytes_after < old.bytes_before / 3  # 63 runs, then 10

    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm):  # a kept run replays from its record; the paused one resumes with its answer
        replayed = module(requirements="a slogan 55", run_id="r55")
        loops.answer(path, "paused", approved=True)
        resumed = CreatorCriticIterator(max_iterations=2, critic=loops.human(interactive=False))(
            requirements="a paused slogan", checkpoint=path, run_id="paused")
    assert (replayed.stop_reason, replayed.replayed, replayed.lm_calls) == ("max_iterations", 4, 0)
    assert (resumed.stop_reason, resumed.replayed, resumed.lm_calls, calls(lm)) == ("approved", 1, 0, 0)

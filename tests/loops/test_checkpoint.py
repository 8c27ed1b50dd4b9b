"""Checkpoints on real SQLite files and real processes (`loops.checkpoint`): a file or record that cannot be
read is one clear error before any LM call; storage that fails mid-run ends the run gracefully with its work;
one run at a time per run id, and a killed owner never blocks the resume; the cost budget holds across a
kill and a resume."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dspy
import pytest

from loops import ConfigurationError, CreatorCriticIterator
from tests.loops.fake_openai import faulty_openai
from tests.loops.test_long_loops import never_approving
from tests.scripted import calls, scripted_lm

ROOT = Path(__file__).resolve().parents[2]


def recorded_run(path: Path) -> None:
    """A finished run 'r1' of three iterations recorded in the SQLite file `path`."""
    with dspy.context(lm=scripted_lm(never_approving)):
        CreatorCriticIterator(max_iterations=3, checkpoint=path)(requirements="a slogan", run_id="r1")


def python(script: str, *args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


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
    assert err.strip().splitlines() == [f"error: cannot use {str(path)!r} as a checkpoint file: database disk image "
                                        "is malformed"]
    assert server.received["t"] == 0


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

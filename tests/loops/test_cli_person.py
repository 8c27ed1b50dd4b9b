"""A person in the loop through the `loops` command, each step a real process: a run pauses for a person
(exit 4) and prints the question, `loops runs show` prints it again, `loops runs answer` records an answer (a
malformed one refused, exit 2, naming the fields), the same command resumes with no LM request repeated
(counted at a loopback server); at a terminal (a pseudo-terminal here) the person answers in the run, the
wait not charged to `--timeout`; a DSL program's `(human)` phase pauses and resumes the same way."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.loops.fake_openai import faulty_openai
from tests.loops.trace_files import trace_steps

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b\][^\x07]*\x07|\r")
pytestmark = pytest.mark.slow


def loops_command(*args: object) -> subprocess.CompletedProcess:
    """`loops ARGS` in a process of its own, with no terminal: nobody at hand to answer."""
    return subprocess.run([sys.executable, "-m", "loops", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def test_a_run_pauses_a_second_process_answers_a_third_resumes_with_no_lm_request_repeated(tmp_path):
    path, trace = tmp_path / "runs.db", tmp_path / "trace.jsonl"
    with faulty_openai() as server:
        refine = ("refine", "A slogan for a water bottle", "--human", "critic", "--max-iterations", "2",
                  "--model", "openai/x", "--api-base", server.base_url(), "--checkpoint", path, "--run-id", "r1")

        paused = loops_command(*refine)
        assert paused.returncode == 4, paused.stdout + paused.stderr
        assert "stop reason: awaiting_input" in paused.stdout and "waiting for a person" in paused.stdout
        assert server.received["t"] == 1  # the creator's

        shown = loops_command("runs", "show", path, "r1")
        assert shown.returncode == 0, shown.stderr
        assert _lines_with(shown.stdout, "The critic's turn", "requirements:", "A slogan for a water bottle",
                           "draft:", "approved (true or false)", "feedback (text; left out: empty)",
                           f"answer: loops runs answer {path} r1 --set approved=true|false --set feedback=TEXT")

        refused = loops_command("runs", "answer", path, "r1", "--set", "approved=maybe", "--set", "mood=fine")
        assert refused.returncode == 2
        assert refused.stderr.startswith("error: the critic's answer is refused: it has no field 'mood'; approved "
                                         "must be true or false, got 'maybe'. The critic answers with: approved (true "
                                         "or false), feedback (text; left out: empty), accuracy_passed (true or false;")

        answered = loops_command("runs", "answer", path, "r1", "--set", "approved=false", "--set",
                                 "feedback=Name the bottle")
        assert answered.returncode == 0, answered.stderr
        assert "recorded the critic's answer for run r1: feedback='Name the bottle', approved=False" in answered.stdout

        again = loops_command(*refine, "--trace", trace)
        assert again.returncode == 4, again.stdout + again.stderr
        assert "LM calls: 1 (+1 replayed)" in again.stdout
        assert server.received["t"] == 2  # the iterator's; the creator's was replayed
        steps = trace_steps(trace)
        assert [(step["role"], step["human"], step["replayed"]) for step in steps] == [
            ("creator", False, True), ("critic", True, False), ("iterator", False, False)]
        assert steps[2]["inputs"]["feedback"] == "Name the bottle"

        assert loops_command("runs", "answer", path, "r1", "--set", "approved=yes").returncode == 0
        done = loops_command(*refine)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "stop reason: approved" in done.stdout and "LM calls: 0 (+2 replayed)" in done.stdout

    assert server.received["t"] == 2  # each LM request was sent once, across five processes
    listed = loops_command("runs", "list", path)
    assert re.search(r"r1 .* 4 .* approved", listed.stdout), listed.stdout


def test_a_person_answers_at_the_terminal_while_the_command_runs_and_the_wait_is_not_charged_to_its_timeout(
        tmp_path):
    with faulty_openai() as server:
        terminal = _Terminal("refine", "A slogan", "--human", "critic", "--max-iterations", "2", "--timeout", "2",
                             "--model", "openai/x", "--api-base", server.base_url())
        try:
            terminal.expect("approved (true or false): ")
            assert "draft:" in terminal.screen and "creator" in terminal.screen
            time.sleep(3)  # the person thinks for longer than the whole run's --timeout
            terminal.type("maybe")
            terminal.expect("refused: approved must be true or false, got 'maybe'")
            terminal.type("no")
            terminal.expect("feedback (text): ")
            terminal.type("Name the bottle")
            terminal.expect("The critic's turn (iteration 2)")
            terminal.expect("approved (true or false): ")
            terminal.type("yes")
            terminal.expect("feedback (text): ")
            terminal.type("")
            assert terminal.wait() == 0, terminal.screen
        finally:
            terminal.close()

    screen = terminal.screen
    assert "stop reason: approved" in screen, screen
    assert re.search(r"critic \(a person\) *│ *1 *│ *[3-9]\.\d", screen), screen  # its seconds are the person's
    assert server.received["t"] == 2  # the creator's and the iterator's


def test_a_dsl_programs_human_phase_pauses_and_resumes_through_the_command(tmp_path):
    program, path = tmp_path / "slogan.sexp", tmp_path / "runs.db"
    program.write_text('(creator-critic-loop\n  (max-iterations 2)\n  (requirements "A slogan for a bakery")\n'
                       '  (creator (lambda (requirements context iteration) "Fresh bread daily"))\n'
                       '  (critic (human "Is it warm enough?"))\n'
                       '  (iterator (lambda (requirements draft feedback iteration) (string-append draft "!"))))\n')
    run = ("run", program, "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1", "--checkpoint", path,
           "--run-id", "p1")

    paused = loops_command(*run)
    assert paused.returncode == 4, paused.stdout + paused.stderr
    assert "Is it warm enough?" in paused.stdout and "Fresh bread daily" in paused.stdout
    assert "Is it warm enough?" in loops_command("runs", "show", path, "p1").stdout
    assert loops_command("runs", "answer", path, "p1", "--set", "approved=false").returncode == 0
    assert loops_command(*run).returncode == 4
    assert loops_command("runs", "answer", path, "p1", "--set", "approved=true").returncode == 0
    done = loops_command(*run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Fresh bread daily!" in done.stdout and "approved, success" in done.stdout


def test_human_names_a_role_of_the_command(tmp_path):
    wrong = loops_command("refine", "A slogan", "--human", "editor")
    assert (wrong.returncode, wrong.stderr) == (2, "error: --human editor: the roles of refine are creator, critic, "
                                                   "iterator\n")


def _lines_with(text: str, *pieces: str) -> bool:
    missing = [piece for piece in pieces if piece not in text]
    assert not missing, f"{missing} not in:\n{text}"
    return True


class _Terminal:
    """`loops ARGS` on a pseudo-terminal (stdin, stdout and stderr), as a person at a terminal would run it."""

    def __init__(self, *args: str):
        self.master, follower = os.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "loops", *args], cwd=ROOT, stdin=follower, stdout=follower, stderr=follower,
            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}, start_new_session=True)
        os.close(follower)
        self.output = ""
        self.seen = 0  # how much of the screen `expect` has matched past

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.output)

    def expect(self, text: str, timeout: float = 90) -> None:
        """Read until `text` shows after what was matched before."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.screen.find(text, self.seen)
            if found >= 0:
                self.seen = found + len(text)
                return
            if not self._read(0.1) and self.process.poll() is not None:
                break
        raise AssertionError(f"{text!r} did not show; the screen:\n{self.screen}")

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def wait(self, timeout: float = 90) -> int:
        code = self.process.wait(timeout)
        while self._read(0.2):
            pass
        return code

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the other side closed
            return False
        self.output += data.decode(errors="replace")
        return bool(data)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        os.close(self.master)

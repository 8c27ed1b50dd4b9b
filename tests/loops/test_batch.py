"""`loops.batch` and `loops batch`: many loops at once, streamed to JSON lines, resumable; asyncio in-process
and Ray actors running many loops each. Scripted LMs for the bookkeeping; a real loopback server, a real
Ray instance (and a two-node cluster) and real subprocesses (killed, interrupted) for the rest."""

import contextlib
import http.server
import json
import logging
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import dspy
import pytest
from dspy.lm15 import AuthError, ServerError
from typer.testing import CliRunner

import loops.batch
import loops.lm
from loops import ConfigurationError, CreatorCriticIterator, RetryPolicy
from loops.cli import app
from loops.optimize import creator_critic_metric
from loops.vocabulary.profile import profile_of
from tests.loops.trace_files import trace_steps
from tests.scripted import calls, request_text, scripted_lm

# Ray keeps a local instance (its node, every server of it) on 127.0.0.1 only when told, before it is imported,
# that it is one machine alone; loops.batch does the same for the instances it starts.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

NO_WAIT = RetryPolicy(backoff_s=0)
ONE_TRY = RetryPolicy(attempts=1, backoff_s=0)
# One answer every Creator–Critic role parses (ChatAdapter ignores the sections a role does not ask for):
# the creator drafts, the critic approves.
EVERY_ROLE = {"reasoning": "plan", "draft": "a draft", "accuracy_passed": True, "completeness_passed": True,
              "quality_passed": True, "feedback": "", "approved": True}
REPO = Path(__file__).resolve().parents[2]


def approving(engine, request):
    return EVERY_ROLE


def examples(count):
    return [dspy.Example(id=f"note-{n}", requirements=f"note {n}").with_inputs("requirements") for n in range(count)]


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_example_is_recorded_as_it_finishes_with_its_inputs(tmp_path):
    out = tmp_path / "results.jsonl"
    batch = [*examples(4), dspy.Example(id="long", requirements="x" * 500).with_inputs("requirements")]
    with dspy.context(lm=scripted_lm(approving)):
        summary = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), batch, out=out, concurrency=3,
                                  metric=creator_critic_metric, progress=False)

    assert (summary.finished, summary.succeeded, summary.failed, summary.skipped) == (5, 5, 0, 0)
    assert summary.all_succeeded and summary.per_second > 0 and summary.cpu_seconds > 0
    found = {record["id"]: record for record in records(out)}
    assert set(found) == {*(f"note-{n}" for n in range(4)), "long"}
    assert all(record["success"] and record["stop_reason"] == "approved" and record["final"] == "a draft"
               and record["lm_calls"] == 2 and record["score"] == 1.0 for record in found.values())
    assert found["note-2"]["inputs"] == {"requirements": "note 2"}
    assert found["long"]["inputs"] == {"requirements": "x" * loops.batch.INPUT_CHARS + "…"}


def test_a_rerun_skips_what_is_done_and_reruns_a_line_cut_short(tmp_path, caplog):
    out = tmp_path / "results.jsonl"
    lm = scripted_lm(approving)
    with dspy.context(lm=lm):
        loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(2), out=out, progress=False)
        with out.open("a") as handle:
            handle.write('{"id": "note-2", "succ')  # killed mid-write
        summary = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(4), out=out, progress=False)

    assert (summary.skipped, summary.finished) == (2, 2)
    assert calls(lm) == 2 * 4  # two loops of two calls each, then the other two
    assert sorted(record["id"] for record in records(out)) == [f"note-{n}" for n in range(4)]  # every line whole
    assert "its last line was cut short" in caplog.text


def test_a_damaged_line_of_out_is_skipped_with_a_warning_and_its_example_runs_again(tmp_path, caplog):
    out = tmp_path / "results.jsonl"
    lm = scripted_lm(approving)
    with dspy.context(lm=lm):
        loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(3), out=out, progress=False)
        lines = out.read_bytes().splitlines(keepends=True)
        damaged = lines[1].replace(b'"success"', b'"succ\xff\xfe"')  # one bad byte pair, as a disk might leave
        out.write_bytes(lines[0] + damaged + lines[2])
        with caplog.at_level(logging.WARNING, logger="loops.batch"):
            first = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(3), out=out, progress=False)
            again = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(3), out=out, progress=False)

    assert (first.skipped, first.finished, again.skipped, again.finished) == (2, 1, 3, 0)
    assert calls(lm) == 2 * 4
    assert re.search(r"results.jsonl: line 2 is not a result record \(damaged\?\): skipped, and its example runs "
                     "again", caplog.text)
    assert damaged in out.read_bytes(), "a line that is not ours to judge is left as it was"


def raising_for(word, error):
    def answer(engine, request):
        return error if word in request_text(request) else EVERY_ROLE
    return answer


def test_an_example_whose_loop_raised_is_recorded_and_the_batch_goes_on(tmp_path):
    out = tmp_path / "results.jsonl"
    batch = [*examples(2), dspy.Example(id="broken", requirements="broken").with_inputs("requirements")]
    with dspy.context(lm=scripted_lm(raising_for("broken", ServerError("HTTP 500: down", status=500)))):
        summary = loops.batch.run(CreatorCriticIterator(retry=ONE_TRY, strict=True), batch, out=out, progress=False)

    assert (summary.finished, summary.failed, summary.all_succeeded) == (2, 1, False)
    broken = next(record for record in records(out) if record["id"] == "broken")
    assert broken["error"].startswith("RoleFailed: ") and "HTTP 500: down" in broken["error"]
    assert (broken["success"], broken["stop_reason"], broken["inputs"]) == (False, None, {"requirements": "broken"})


def test_retry_failed_runs_the_failures_again_and_keeps_one_line_per_example(tmp_path):
    out = tmp_path / "results.jsonl"
    batch = [*examples(3), dspy.Example(id="broken", requirements="broken").with_inputs("requirements")]
    with dspy.context(lm=scripted_lm(raising_for("broken", ServerError("HTTP 500: down", status=500)))):
        loops.batch.run(CreatorCriticIterator(retry=ONE_TRY, strict=True), batch, out=out, progress=False)
    lm = scripted_lm(approving)
    with dspy.context(lm=lm):
        rerun = loops.batch.run(CreatorCriticIterator(retry=ONE_TRY, strict=True), batch, out=out, progress=False)
        retried = loops.batch.run(CreatorCriticIterator(retry=ONE_TRY, strict=True), batch, out=out, progress=False,
                                  retry_failed=True)

    assert (rerun.skipped, rerun.finished, rerun.all_succeeded) == (4, 0, False)
    assert (retried.skipped, retried.finished, retried.succeeded, retried.all_succeeded) == (3, 1, 1, True)
    assert calls(lm) == 2
    found = records(out)
    assert sorted(record["id"] for record in found) == ["broken", "note-0", "note-1", "note-2"]
    assert all(record["success"] for record in found)


def test_a_configuration_error_stops_the_batch_with_nothing_of_it_recorded(tmp_path):
    out = tmp_path / "results.jsonl"
    batch = examples(6)
    lm = scripted_lm(lambda engine, request: AuthError("HTTP 401: Incorrect API key provided", status=401))
    expected = r"example 'note-\d': the LM refused the request, which no retry can fix: .*Incorrect API key"
    with dspy.context(lm=lm), pytest.raises(ConfigurationError, match=expected):
        loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), batch, out=out, concurrency=2, progress=False)

    assert all(record["success"] for record in records(out)), "a configuration error is never recorded as done"
    assert len(records(out)) <= 3
    with dspy.context(lm=scripted_lm(approving)):
        summary = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(6), out=out, progress=False)
    assert summary.skipped + summary.finished == 6 and summary.all_succeeded


# Rows that are JSON but that the program refuses, each with what it is told (the example's inputs are every key
# but its id, its own checks among them): the wrong kind of value, a key it does not take, a limit (data are
# inputs), no requirements at all.
REFUSED = [
    ({"requirements": None}, "requirements must be a non-empty str, got None"),
    ({"requirements": 12}, "requirements must be a non-empty str, got 12"),
    ({"requirements": ""}, "requirements must be a non-empty str, got ''"),
    ({"requirements": ["a", "list"]}, "requirements must be a non-empty str, got ['a', 'list']"),
    ({"requirements": "y", "requirment": "a typo"}, "unknown input 'requirment' (did you mean 'requirements'?); "
                                                    "the inputs are requirements, context, checks"),
    ({"requirements": "y", "timeout_s": -1}, "'timeout_s' is an option of the run (a limit, a checkpoint), not an "
                                             "input: data holds inputs only; the inputs are requirements, context, "
                                             "checks"),
    ({"requirements": "y", "max_iterations": 4}, "'max_iterations' is an option of the run"),
    ({"requirment": "typo key"}, "unknown input 'requirment' (did you mean 'requirements'?); the inputs are "
                                 "requirements, context, checks; no 'requirements' (what to create): it is required"),
    ({"requirements": "caf\udce9"}, "requirements is not UTF-8 text: it holds the byte 0xe9 (not UTF-8) at "
                                    "character 4"),
]


def test_every_example_the_program_would_refuse_is_listed_before_any_runs(tmp_path):
    batch = [*examples(3), *(dspy.Example(id=f"bad-{n}", **row).with_inputs(*row) for n, (row, _) in
                             enumerate(REFUSED))]
    lm = scripted_lm(approving)

    found = loops.batch.bad_examples(CreatorCriticIterator(), batch)
    with dspy.context(lm=lm), pytest.raises(ConfigurationError) as raised:
        loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), batch, out=tmp_path / "out.jsonl", progress=False)

    assert [(bad.position, bad.id) for bad in found] == [(4 + n, f"bad-{n}") for n in range(len(REFUSED))]
    for bad, (_, said) in zip(found, REFUSED, strict=True):
        assert said in "; ".join(bad.problems), (bad, said)
    message = str(raised.value)
    assert message.splitlines()[0] == f"{len(REFUSED)} of {len(batch)} examples cannot run, and none ran:"
    assert message.splitlines()[1:] == [str(bad) for bad in found]
    assert calls(lm) == 0 and not (tmp_path / "out.jsonl").exists(), "nothing ran, nothing was written"


def test_mistakes_raise_before_any_lm_call(tmp_path):
    lm = scripted_lm(approving)
    program = CreatorCriticIterator(retry=NO_WAIT)
    (tmp_path / "folder").mkdir()
    with dspy.context(lm=lm):
        with pytest.raises(ConfigurationError, match="backend must be one of asyncio, ray"):
            loops.batch.run(program, examples(1), out=tmp_path / "x.jsonl", backend="threads")
        with pytest.raises(ConfigurationError, match="concurrency must be an int >= 1"):
            loops.batch.run(program, examples(1), out=tmp_path / "x.jsonl", concurrency=0)
        with pytest.raises(ConfigurationError, match=r"example 2 \(id 'note-0'\): another example has the id 'note-0'"):
            loops.batch.run(program, examples(1) * 2, out=tmp_path / "x.jsonl")
        with pytest.raises(ConfigurationError, match="folder' is a directory: give a file"):
            loops.batch.run(program, examples(1), out=tmp_path / "folder")
        with pytest.raises(ConfigurationError, match="cannot use out '/proc/version'"):
            loops.batch.run(program, examples(1), out="/proc/version")  # read-only, even for root
    with pytest.raises(ConfigurationError, match="no LM is configured"):
        loops.batch.run(program, examples(1), out=tmp_path / "x.jsonl")
    assert calls(lm) == 0


# --- a real loopback server: the CLI's exit codes, Ray actors, subprocesses killed and interrupted ----------------


class LoopbackLM(http.server.ThreadingHTTPServer):
    """An OpenAI-compatible chat server on loopback answering every Creator–Critic role after `latency`
    seconds. It counts the requests (`requests`), those in flight and the most in flight at once (`most`);
    a request that mentions "broken" gets HTTP 500, one that mentions "picky" a critic that never approves,
    and while `rejecting` every request gets 401."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Answer)
        self.lock = threading.Lock()
        self.latency, self.rejecting, self.requests, self.in_flight, self.most = 0.0, False, 0, 0, 0

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def lm(self):
        return loops.lm.resolve("openai/loopback", api_base=self.base_url).copy(cache=False)

    def answer(self, body: bytes) -> tuple[int, dict]:
        if self.rejecting:
            return 401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
        if b"broken" in body:
            return 500, {"error": {"message": "down for this one", "type": "server_error"}}
        fields = {**EVERY_ROLE, "approved": False, "improved_draft": "a draft"} if b"picky" in body else EVERY_ROLE
        if b'"response_format"' in body:  # a JSON adapter's request (the default with an api_base): a JSON answer
            content = json.dumps(fields)
        else:  # DSPy's field markers
            content = "\n\n".join(f"[[ ## {name} ## ]]\n{value}" for name, value in fields.items()) + (
                "\n\n[[ ## completed ## ]]")
        return 200, {"id": "1", "object": "chat.completion", "created": 1, "model": "loopback",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": content}}],
                     "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}


class _Answer(http.server.BaseHTTPRequestHandler):
    server: LoopbackLM

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        server = self.server
        with server.lock:
            server.requests += 1
            server.in_flight += 1
            server.most = max(server.most, server.in_flight)
        try:
            time.sleep(server.latency)
            status, answer = server.answer(body)
            data = json.dumps(answer).encode()
            with contextlib.suppress(ConnectionError):  # a client killed while it waited
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        finally:
            with server.lock:
                server.in_flight -= 1

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    server = LoopbackLM()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def lm_server(server):
    server.latency, server.rejecting, server.most = 0.0, False, 0
    loops.lm.server._schema_spelling.pop(server.base_url, None)
    return server


def write_data(path, texts):
    path.write_text("".join(json.dumps({"id": f"t{n}", "requirements": text}) + "\n" for n, text in enumerate(texts)))
    return path


def cli_batch(server, data, out, *extra):
    return CliRunner().invoke(app, ["batch", "refine", "--data", str(data), "--out", str(out), "--model",
                                    "openai/loopback", "--api-base", server.base_url, "--max-iterations", "2", *extra])


def test_cli_exit_codes_say_whether_every_example_succeeded(lm_server, tmp_path):
    data, out = write_data(tmp_path / "data.jsonl", ["a", "b", "c"]), tmp_path / "out.jsonl"
    assert cli_batch(lm_server, data, out).exit_code == 0
    write_data(data, ["a", "b", "c", "picky d"])
    outcome = cli_batch(lm_server, data, out)
    assert outcome.exit_code == 1, outcome.output
    assert "1 ran: 0 succeeded, 1 did not; 3 already in" in outcome.stdout
    assert cli_batch(lm_server, data, out).exit_code == 1, "the unsuccessful example is still the batch's"
    assert [record["stop_reason"] for record in records(out)] == ["approved"] * 3 + ["max_iterations"]


def test_cli_a_rejected_key_exits_2_at_the_first_example_and_poisons_nothing(lm_server, tmp_path):
    data, out = write_data(tmp_path / "data.jsonl", [f"task {n}" for n in range(20)]), tmp_path / "out.jsonl"
    lm_server.rejecting = True
    outcome = cli_batch(lm_server, data, out, "--concurrency", "2")
    assert outcome.exit_code == 2, outcome.output
    assert len(outcome.stderr.splitlines()) == 1, outcome.stderr
    line = outcome.stderr.strip()
    assert re.match(r"error: example 't\d+': the LM refused the request, which no retry can fix: .*HTTP 401", line)
    assert "Traceback" not in outcome.output and out.read_text() == ""
    lm_server.rejecting = False
    outcome = cli_batch(lm_server, data, out)
    assert outcome.exit_code == 0 and "20 ran: 20 succeeded, 0 did not; 0 already in" in outcome.stdout


def test_cli_lists_every_bad_line_with_its_number_and_id_in_one_report_before_any_lm_call(lm_server, tmp_path):
    lines = [json.dumps({"id": "ok-1", "requirements": "a"}), "not json at all",
             *(json.dumps({"id": f"bad-{n}", **row}) for n, (row, _) in enumerate(REFUSED)),
             "{\"id\": \"cut\", \"requirements\": \"b", "", "[1, 2]", json.dumps({"id": "ok-2", "requirements": "c"})]
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    data.write_text("\n".join(lines) + "\n")
    requests = lm_server.requests

    outcome = cli_batch(lm_server, data, out)

    assert outcome.exit_code == 2, outcome.output
    report = outcome.stderr.splitlines()
    bad = len(REFUSED) + 3
    assert report[0] == (f"error: {bad} lines of {str(data)!r} cannot run, so none ran (a line holds one example's "
                         "inputs; the limits are the command's options):")
    assert report[1] == "  line 2: not JSON (Expecting value, column 1)"
    for n, (_, said) in enumerate(REFUSED):
        assert report[2 + n].startswith(f"  line {3 + n} (id 'bad-{n}'): ") and said in report[2 + n], report[2 + n]
    assert report[-2:] == [f"  line {3 + len(REFUSED)}: not JSON (Unterminated string starting at, column 31)",
                           f"  line {5 + len(REFUSED)}: a JSON list, not an object"]
    assert len(report) == 1 + bad and "Traceback" not in outcome.output
    assert lm_server.requests == requests and not out.exists(), "nothing ran"


def test_cli_a_rows_limit_is_refused_and_the_commands_limits_hold(lm_server, tmp_path):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    data.write_text(json.dumps({"id": "b", "requirements": "picky y", "max_iterations": 4}) + "\n")
    requests = lm_server.requests

    refused = cli_batch(lm_server, data, out, "--max-iterations", "1")

    assert refused.exit_code == 2 and lm_server.requests == requests, refused.output
    assert refused.stderr.startswith(f"error: {str(data)!r}, line 1 (id 'b'): 'max_iterations' is an option of the "
                                     "run (a limit, a checkpoint), not an input: data holds inputs only")
    data.write_text(json.dumps({"id": "b", "requirements": "picky y"}) + "\n")
    ran = cli_batch(lm_server, data, out, "--max-iterations", "1")
    assert ran.exit_code == 1, ran.output
    (record,) = records(out)
    assert (record["iterations"], record["lm_calls"], record["stop_reason"]) == (1, 2, "max_iterations")


def test_cli_a_typo_key_exits_2_and_the_rerun_after_the_fix_runs_it(lm_server, tmp_path):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    data.write_text(json.dumps({"id": "a", "requirements": "a"}) + "\n" +
                    json.dumps({"id": "c", "requirment": "typo key"}) + "\n")

    typo = cli_batch(lm_server, data, out)
    data.write_text(data.read_text().replace("requirment", "requirements"))
    fixed = cli_batch(lm_server, data, out)

    assert typo.exit_code == 2 and "line 2 (id 'c'): unknown input 'requirment' (did you mean 'requirements'?)" in (
        typo.stderr), typo.output
    assert fixed.exit_code == 0 and "2 ran: 2 succeeded, 0 did not; 0 already in" in fixed.stdout, fixed.output
    assert sorted(record["id"] for record in records(out)) == ["a", "c"]


def test_cli_a_rerun_says_how_many_of_what_it_skips_failed_and_that_retry_failed_runs_them(lm_server, tmp_path):
    data, out = write_data(tmp_path / "data.jsonl", ["a", "b"]), tmp_path / "out.jsonl"
    # What an earlier batch recorded for an example whose loop raised (before rows were checked, a typo'd key).
    out.write_text(json.dumps({"id": "t1", "inputs": {"requirment": "b"}, "success": False, "stop_reason": None,
                               "error": "TypeError: forward() missing 1 required positional argument", "seconds": 0})
                   + "\n")

    rerun = cli_batch(lm_server, data, out)
    retried = cli_batch(lm_server, data, out, "--retry-failed")

    assert rerun.exit_code == 1, rerun.output
    assert ("1 ran: 1 succeeded, 0 did not; 1 already in " in rerun.stdout
            and "(1 of them unsuccessful, 1 raised an error: --retry-failed runs those again)" in rerun.stdout)
    assert retried.exit_code == 0 and "1 ran: 1 succeeded, 0 did not; 1 already in" in retried.stdout


def test_cli_says_how_many_did_not_succeed_when_none_did(lm_server, tmp_path):
    data, out = write_data(tmp_path / "data.jsonl", ["picky a", "picky b"]), tmp_path / "out.jsonl"

    outcome = cli_batch(lm_server, data, out)

    assert outcome.exit_code == 1, outcome.output
    assert re.fullmatch(rf"2 ran: 0 succeeded, 2 did not; 0 already in {out}; [\d.]+ s, [\d.]+ loops/s",
                        outcome.stdout.splitlines()[-1]), outcome.stdout


def test_cli_timeout_trace_and_checkpoint_mean_for_each_example_what_they_mean_for_one_run(lm_server, tmp_path):
    # Requests no other test sends: DSPy's cache (this session's) must not answer them.
    data = write_data(tmp_path / "data.jsonl", ["checkpointed a", "picky checkpointed b", "checkpointed c"])
    trace, checkpoint = tmp_path / "trace.jsonl", tmp_path / "runs.db"
    requests = lm_server.requests

    first = cli_batch(lm_server, data, tmp_path / "first.jsonl", "--trace", str(trace), "--checkpoint", str(checkpoint))
    sent = lm_server.requests - requests
    steps = trace_steps(trace)
    again = cli_batch(lm_server, data, tmp_path / "again.jsonl", "--trace", str(tmp_path / "replayed.jsonl"),
                      "--checkpoint", str(checkpoint))
    replayed = trace_steps(tmp_path / "replayed.jsonl")
    lm_server.latency = 1.0
    slow = cli_batch(lm_server, write_data(tmp_path / "slow.jsonl", ["timed a", "timed b"]), tmp_path / "out.jsonl",
                     "--timeout", "0.5")

    assert first.exit_code == again.exit_code == 1, (first.output, again.output)
    assert len(steps) == sent == 2 + 4 + 2  # every role call of every example, each with its example's id
    assert sorted({step["example"] for step in steps}) == ["t0", "t1", "t2"]
    assert [step["role"] for step in steps if step["example"] == "t1"] == ["creator", "critic", "iterator", "critic"]
    assert lm_server.requests - requests - sent == 2, "the second batch sent no request: the slow one sent its two"
    assert len(replayed) == len(steps) and all(step["replayed"] for step in replayed), "each run from its record"
    first_records, again_records = (without_timing(records(tmp_path / name)) for name in ("first.jsonl", "again.jsonl"))
    assert [record.pop("lm_calls") for record in first_records] == [2, 4, 2]
    assert [record.pop("lm_calls") for record in again_records] == [0, 0, 0]
    assert again_records == first_records
    assert slow.exit_code == 1 and {record["stop_reason"] for record in records(tmp_path / "out.jsonl")} == {
        "timeout"}, slow.output


def test_cli_trace_on_ray_actors_is_refused_before_anything_starts(lm_server, tmp_path):
    outcome = cli_batch(lm_server, write_data(tmp_path / "data.jsonl", ["a"]), tmp_path / "out.jsonl", "--backend",
                        "ray", "--trace", str(tmp_path / "trace.jsonl"))

    assert outcome.exit_code == 2 and outcome.stderr.startswith("error: --trace writes the role calls run in this "
                                                                "process; with --backend ray"), outcome.output


def test_cli_bad_files_exit_2_in_one_line_and_a_batch_that_fails_exits_3(lm_server, tmp_path):
    data = write_data(tmp_path / "data.jsonl", ["a", "b"])
    (tmp_path / "latin1.jsonl").write_bytes('{"requirements": "caf\u00e9"}\n'.encode("latin-1"))
    (tmp_path / "folder").mkdir()
    requests = lm_server.requests
    for args, message in [
        ((tmp_path / "latin1.jsonl", tmp_path / "out.jsonl"), "latin1.jsonl', line 1: not UTF-8 text (byte 0xe9"),
        ((data, tmp_path / "folder"), "folder' is a directory: give a file"),
        ((data, Path("/proc/version")), "cannot use out '/proc/version'"),
    ]:
        outcome = cli_batch(lm_server, *args)
        assert outcome.exit_code == 2 and outcome.stderr.count("\n") == 1 and message in outcome.stderr, outcome.output
    assert lm_server.requests == requests, "each mistake was found before any LM call"
    outcome = cli_batch(lm_server, data, Path("/dev/full"))  # every write fails: no space left on the device
    assert outcome.exit_code == 3, outcome.output
    assert re.match(r"error: the batch failed: OSError: \[Errno 28\] No space left on device; what /dev/full holds "
                    "stays done", outcome.stderr)


def test_cli_an_address_where_no_cluster_answers_exits_2_at_once(lm_server, tmp_path):
    pytest.importorskip("ray", reason="the ray extra is installed by the README's test command")
    data = write_data(tmp_path / "data.jsonl", ["a"])
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = cli_batch(lm_server, data, tmp_path / "out.jsonl", "--backend", "ray", "--address", f"127.0.0.1:{port}")
    assert outcome.exit_code == 2, outcome.output
    assert outcome.stderr == (f"error: no Ray cluster answers at address '127.0.0.1:{port}' (Connection refused): "
                              "start one with `ray start --head` (docs/scale.md), or leave the address out for a "
                              "local instance\n")


def run_cli(*args, **popen):
    """`loops batch ...` as a user runs it: its own process, a DSPy cache of its own, and Ctrl-C reaching it as
    at a terminal. A shell starts a background job with SIGINT ignored (`make test &`), children inherit that,
    and Python then leaves it ignored; a handled signal is reset to the default in the child, so the tests'
    SIGINT ends the batch however the suite was started."""
    env = {**os.environ, "DSPY_CACHEDIR": popen.pop("cache"), "PYTHONPATH": str(REPO)}
    ours = signal.getsignal(signal.SIGINT)
    if ours is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, "-m", "loops", "batch", "refine", *map(str, args)], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    finally:
        signal.signal(signal.SIGINT, ours)


def lines_of(path):
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_for_lines(path, count, process, seconds):
    deadline = time.monotonic() + seconds
    while lines_of(path) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no {count} results within {seconds} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_batch_killed_with_sigkill_resumes_with_every_example_exactly_once(lm_server, tmp_path):
    lm_server.latency = 0.05
    data, out = write_data(tmp_path / "data.jsonl", [f"task {n}" for n in range(240)]), tmp_path / "out.jsonl"
    args = ("--data", data, "--out", out, "--concurrency", "8", "--model", "openai/loopback",
            "--api-base", lm_server.base_url)
    killed = run_cli(*args, cache=str(tmp_path / "cache1"))
    wait_for_lines(out, 20, killed, 60)
    killed.kill()
    killed.communicate()
    done_before = lines_of(out)
    assert 20 <= done_before < 240
    resumed = run_cli(*args, cache=str(tmp_path / "cache2"))
    stdout, stderr = resumed.communicate(timeout=120)

    assert resumed.returncode == 0, stderr
    ids = [record["id"] for record in records(out)]  # every line a whole record
    assert sorted(ids) == sorted(f"t{n}" for n in range(240)), "every example exactly once"
    assert re.search(r"(\d+) ran: \1 succeeded, 0 did not; (\d+) already in", stdout)


def descendants(pid):
    """The processes `pid` started, and theirs, from /proc."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = set(), [pid]
    while frontier:
        found.update(grown := children.get(frontier.pop(), []))
        frontier += grown
    return found


def listening_addresses(pids):
    """The local addresses the processes `pids` listen on (TCP), as `ss` shows them."""
    shown = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3] for line in shown.splitlines()
            if any(f"pid={pid}," in line for pid in pids)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "ray"])
def test_ctrl_c_stops_the_batch_at_once_saying_how_many_are_done_and_how_to_resume(lm_server, tmp_path, backend):
    if backend == "ray":
        pytest.importorskip("ray", reason="the ray extra is installed by the README's test command")
    lm_server.latency = 0.1
    data, out = write_data(tmp_path / "data.jsonl", [f"task {n}" for n in range(600)]), tmp_path / "out.jsonl"
    batch = run_cli("--data", data, "--out", out, "--concurrency", "8", "--backend", backend, "--model",
                    "openai/loopback", "--api-base", lm_server.base_url, cache=str(tmp_path / "cache"))
    wait_for_lines(out, 8, batch, 90)
    if backend == "ray":  # the local instance the batch started: on loopback only
        ray_processes = descendants(batch.pid)
        addresses = listening_addresses(ray_processes)
        assert addresses and all(re.match(r"(\[::ffff:)?127\.0\.0\.1\]?:\d+$", address) for address in addresses), (
            addresses)
    started = time.monotonic()
    batch.send_signal(signal.SIGINT)
    _, stderr = batch.communicate(timeout=30)
    stopped_after = time.monotonic() - started

    assert batch.returncode == 130, stderr
    done = lines_of(out)
    assert stderr.splitlines()[-1] == (f"interrupted: {done} of 600 examples are done, in {out}; the same batch run "
                                       "again resumes from there")
    assert done < 600 and len(records(out)) == done
    print(f"{backend}: stopped {stopped_after:.2f} s after SIGINT with {done} of 600 done")
    assert stopped_after < 10, "it stops at once (~1-3 s here), not after the examples in flight and beyond"
    if backend == "ray":
        time.sleep(1)
        assert not [pid for pid in ray_processes if Path(f"/proc/{pid}").exists()], "the local instance is gone"


# --- Ray: a real local instance (2 CPUs), its actors calling the loopback server ------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the ray extra is installed by the README's test command")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never another suite's
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    yield ray
    ray.shutdown()


def without_timing(found):
    return sorted(({key: value for key, value in record.items() if key != "seconds"} for record in found),
                  key=lambda record: record["id"])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_ray_actors_run_many_loops_each_with_the_results_of_asyncio(lm_server, local_ray, tmp_path):
    lm_server.latency = 0.5
    batch = [*examples(16), dspy.Example(id="broken", requirements="broken").with_inputs("requirements")]
    program = CreatorCriticIterator(retry=ONE_TRY, strict=True)
    by_backend, most = {}, {}
    with dspy.context(lm=lm_server.lm()):
        for backend in ("asyncio", "ray"):
            out = tmp_path / f"{backend}.jsonl"
            loops.batch.run(program, batch[:2], out=out, backend=backend, progress=False)
            lm_server.most = 0
            summary = loops.batch.run(program, batch, out=out, backend=backend, concurrency=8, progress=False)
            most[backend] = lm_server.most
            assert (summary.skipped, summary.finished, summary.failed) == (2, 14, 1)
            by_backend[backend] = without_timing(records(out))

    assert summary.workers == 2 and summary.cpu_seconds > 0
    # Two actors, 8 loops: one loop at a time per actor would never have more than 2 requests in flight.
    assert most["ray"] >= 5, most
    assert by_backend["ray"] == by_backend["asyncio"]
    assert [record["id"] for record in by_backend["ray"]] == sorted(["broken", *(f"note-{n}" for n in range(16))])
    assert "down for this one" in by_backend["ray"][0]["error"]


# The embedded LM as --model local --max-tokens 77 --temperature 0.5 --adapter json builds it, with settings of
# the user's own (top_p, num_retries) under them: everything a worker must run it with, none of it the default.
EMBEDDED_SETTINGS = {"model": loops.lm.MODEL, "kwargs": {"temperature": 0.5, "max_tokens": 77, "top_p": 0.9},
                     "cache": False, "num_retries": 1, "adapter": "json",
                     "history_window": loops.lm.EMBEDDED_HISTORY_WINDOW, "price": "free", "embedded": True}


def embedded_lm():
    return loops.lm.resolve(loops.lm.local_lm(top_p=0.9, num_retries=1), max_tokens=77, temperature=0.5,
                            adapter="json")


def settings_of(lm):
    found = profile_of(lm)
    return {"model": lm.model, "kwargs": dict(lm.kwargs), "cache": lm.cache, "num_retries": lm.num_retries,
            "adapter": found.adapter, "history_window": found.history_window, "price": found.price.__name__,
            "embedded": loops.lm.is_embedded(lm)}


def reporting_its_lm():
    """A program that calls no LM: its final is the settings of the LM it runs on, where it runs. Defined here
    so that cloudpickle sends the class itself to Ray's workers, which cannot import the tests."""

    class ReportsItsLM(dspy.Module):
        async def aforward(self, requirements):
            adapter = dspy.settings.adapter
            return dspy.Prediction(success=True, final={**settings_of(dspy.settings.lm),
                                                        "configured_adapter": type(adapter).__name__})

    return ReportsItsLM()


@pytest.mark.embedded
def test_the_embedded_lm_travels_whole_and_without_the_weights_loaded_here():
    lm = embedded_lm()
    loops.lm.embedded._shared_model()  # loaded in this process: none of it may go with the LM
    shipped = cloudpickle.dumps(lm)  # as Ray sends it to an actor

    assert len(shipped) < 10_000
    assert settings_of(pickle.loads(shipped)) == settings_of(lm) == EMBEDDED_SETTINGS


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_ray_actors_run_on_the_lm_asyncio_runs_on_with_every_setting_of_it(local_ray, tmp_path):
    """Ray's actors once rebuilt the embedded LM from its name, with the defaults (max_tokens 512, temperature
    0, compact JSON): `--backend ray` ran another LM than `--backend asyncio`."""
    by_backend = {}
    with dspy.context(lm=embedded_lm(), adapter=dspy.XMLAdapter()):
        for backend in ("asyncio", "ray"):
            out = tmp_path / f"{backend}.jsonl"
            summary = loops.batch.run(reporting_its_lm(), examples(4), out=out, backend=backend, concurrency=4,
                                      progress=False)
            assert summary.finished == 4, records(out)
            by_backend[backend] = without_timing(records(out))

    assert summary.workers == 2
    assert [record["final"] for record in by_backend["ray"]] == [
        {**EMBEDDED_SETTINGS, "configured_adapter": "XMLAdapter"}] * 4
    assert by_backend["ray"] == by_backend["asyncio"]


@pytest.mark.slow
def test_the_batch_joins_a_running_two_node_cluster_by_its_address(lm_server, tmp_path):
    """Two Ray nodes on this machine, each with one CPU and its own raylet, on 127.0.0.1, and `loops batch
    --address` joining them from its own process. The nodes are started by Ray's `ray.cluster_utils.Cluster`
    rather than two `ray start` commands: Ray keeps a node on 127.0.0.1 only with
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, and then `ray start --address` refuses to add a node ("Multi-node Ray
    clusters are not supported on Windows and OSX"); without it, Ray rewrites 127.0.0.1 to the machine's
    network address, for the head's address too, and listens on every interface (docs/scale.md)."""
    cluster_utils = pytest.importorskip("ray.cluster_utils", reason="the ray extra is installed by the README's "
                                        "test command")
    lm_server.latency = 0.5
    cluster = cluster_utils.Cluster(initialize_head=True, connect=False,
                                    head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        data, out = write_data(tmp_path / "data.jsonl", [f"task {n}" for n in range(40)]), tmp_path / "out.jsonl"
        batch = run_cli("--data", data, "--out", out, "--backend", "ray", "--address", cluster.address,
                        "--concurrency", "8", "--model", "openai/loopback", "--api-base", lm_server.base_url,
                        cache=str(tmp_path / "cache"))
        stdout, stderr = batch.communicate(timeout=120)
    finally:
        cluster.shutdown()

    assert batch.returncode == 0, stderr
    assert re.search(r"40 ran: 40 succeeded, 0 did not; 0 already in .* start-up, 2 Ray actors\)", stdout)
    assert sorted(record["id"] for record in records(out)) == sorted(f"t{n}" for n in range(40))
    assert lm_server.most >= 5, "each actor, one per node, ran several loops at once (at most 2 otherwise)"


# --- checks per example, from the data ---------------------------------------------------------------------------


def test_a_batch_file_carries_each_examples_checks_to_its_loop_and_scores_by_them(lm_server, tmp_path):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    rows = [{"id": "holds", "requirements": "a", "checks": ["include=draft"]},
            {"id": "fails", "requirements": "picky b", "checks": ["include=draft", "max-words=1"]},
            {"id": "none", "requirements": "c"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))

    outcome = cli_batch(lm_server, data, out)

    assert outcome.exit_code == 1, outcome.output  # "fails" never holds its checks, whatever the critic says
    found = {record["id"]: record for record in records(out)}
    assert (found["holds"]["success"], found["holds"]["score"]) == (True, 1.0)
    assert (found["fails"]["success"], found["fails"]["stop_reason"]) == (False, "max_iterations")
    assert found["fails"]["score"] == pytest.approx(0.45)  # half the checks held, below 1 (the critic: never)
    assert found["fails"]["inputs"]["checks"] == '["include=draft", "max-words=1"]'
    assert found["none"]["success"] is True


def test_a_bad_check_in_a_batch_file_stops_the_batch_with_exit_2(lm_server, tmp_path):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    data.write_text(json.dumps({"id": "a", "requirements": "a", "checks": ["max-wordz=3"]}) + "\n")

    outcome = cli_batch(lm_server, data, out)

    assert outcome.exit_code == 2, outcome.output
    assert "unknown check 'max-wordz'" in outcome.stderr


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_checks_survive_a_ray_batch_the_programs_and_each_examples(lm_server, local_ray, tmp_path):
    from loops.vocabulary.checks import Count, Include

    inputs = ("requirements", "checks")
    batch = [dspy.Example(id="holds", requirements="a", checks=[Include("draft")]).with_inputs(*inputs),
             dspy.Example(id="fails", requirements="picky b", checks=["max-words=1"]).with_inputs(*inputs)]
    program = CreatorCriticIterator(retry=ONE_TRY, max_iterations=2, checks=[Count("word", max=5)])
    found = {}
    with dspy.context(lm=lm_server.lm()):
        for backend in ("asyncio", "ray"):
            out = tmp_path / f"{backend}.jsonl"
            loops.batch.run(program, batch, out=out, backend=backend, metric=creator_critic_metric, progress=False)
            found[backend] = without_timing(records(out))

    assert found["ray"] == found["asyncio"]
    assert [(record["id"], record["success"], record["score"]) for record in found["ray"]] == [
        ("fails", False, pytest.approx(0.45)), ("holds", True, 1.0)]

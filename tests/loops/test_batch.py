"""`loops.batch`: many loops at once, streamed to JSON lines, resumable; asyncio in-process and Ray workers."""

import contextlib
import http.server
import json
import os
import threading

import dspy
import pytest

import loops.batch
from loops import ConfigurationError, CreatorCriticIterator, RetryPolicy
from loops.optimize import creator_critic_metric
from tests.scripted import calls, scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)
# One answer every Creator–Critic role parses (ChatAdapter ignores the sections a role does not ask for):
# the creator drafts, the critic approves.
EVERY_ROLE = {"reasoning": "plan", "draft": "a draft", "accuracy_passed": True, "completeness_passed": True,
              "quality_passed": True, "feedback": "", "approved": True}


def approving(engine, request):
    return EVERY_ROLE


def examples(count):
    return [dspy.Example(id=f"note-{n}", requirements=f"note {n}").with_inputs("requirements") for n in range(count)]


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_example_is_recorded_as_it_finishes(tmp_path):
    out = tmp_path / "results.jsonl"
    with dspy.context(lm=scripted_lm(approving)):
        summary = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(5), out=out, concurrency=3,
                                  metric=creator_critic_metric, progress=False)

    assert (summary.finished, summary.succeeded, summary.failed, summary.skipped) == (5, 5, 0, 0)
    found = {record["id"]: record for record in records(out)}
    assert set(found) == {f"note-{n}" for n in range(5)}
    assert all(record["success"] and record["stop_reason"] == "approved" and record["final"] == "a draft"
               and record["lm_calls"] == 2 and record["score"] == 1.0 for record in found.values())
    assert summary.per_second > 0


def test_a_rerun_skips_what_is_done_and_reruns_a_line_cut_short(tmp_path):
    out = tmp_path / "results.jsonl"
    lm = scripted_lm(approving)
    with dspy.context(lm=lm):
        loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(2), out=out, progress=False)
        with out.open("a") as handle:
            handle.write('{"id": "note-2", "succ')  # killed mid-write
        summary = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), examples(4), out=out, progress=False)

    assert (summary.skipped, summary.finished) == (2, 2)
    assert calls(lm) == 2 * 4  # two loops of two calls each, then the other two
    assert sorted(record["id"] for record in records_of_complete_lines(out)) == [f"note-{n}" for n in range(4)]


def records_of_complete_lines(path):
    found = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            found.append(json.loads(line))
    return found


def test_a_failing_example_is_recorded_and_the_batch_goes_on(tmp_path):
    out = tmp_path / "results.jsonl"
    batch = [*examples(2), dspy.Example(id="broken", requirements=None).with_inputs("requirements")]
    with dspy.context(lm=scripted_lm(approving)):
        summary = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), batch, out=out, progress=False)

    assert (summary.finished, summary.failed) == (2, 1)
    broken = next(record for record in records(out) if record["id"] == "broken")
    assert broken["error"].startswith("ConfigurationError: requirements must be a non-empty str")


def test_mistakes_raise_before_any_lm_call(tmp_path):
    lm = scripted_lm(approving)
    program = CreatorCriticIterator(retry=NO_WAIT)
    with dspy.context(lm=lm):
        with pytest.raises(ConfigurationError, match="backend must be one of asyncio, ray"):
            loops.batch.run(program, examples(1), out=tmp_path / "x.jsonl", backend="threads")
        with pytest.raises(ConfigurationError, match="concurrency must be an int >= 1"):
            loops.batch.run(program, examples(1), out=tmp_path / "x.jsonl", concurrency=0)
        with pytest.raises(ConfigurationError, match="two examples have the id 'note-0'"):
            loops.batch.run(program, examples(1) * 2, out=tmp_path / "x.jsonl")
    with pytest.raises(ConfigurationError, match="no LM is configured"):
        loops.batch.run(program, examples(1), out=tmp_path / "x.jsonl")
    assert calls(lm) == 0


# --- Ray: a real local Ray instance (2 CPUs), its workers calling a real loopback LM server -----------------


class _ChatServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        content = "\n\n".join(f"[[ ## {name} ## ]]\n{value}" for name, value in EVERY_ROLE.items())
        content += "\n\n[[ ## completed ## ]]"
        body = json.dumps({"id": "1", "object": "chat.completion", "created": 1, "model": "loopback",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content}}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def loopback_lm():
    server = _ChatServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield dspy.LM("openai/loopback", api_base=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="unused",
                  num_retries=0, cache=False)
    server.shutdown()


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the ray extra is installed by the README's test command")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def without_timing(found):
    return sorted(({key: value for key, value in record.items() if key != "seconds"} for record in found),
                  key=lambda record: record["id"])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_ray_workers_give_the_same_results_as_asyncio_and_resume_too(loopback_lm, local_ray, tmp_path):
    batch = [*examples(4), dspy.Example(id="broken", requirements=None).with_inputs("requirements")]
    by_backend = {}
    with dspy.context(lm=loopback_lm):
        for backend in ("asyncio", "ray"):
            out = tmp_path / f"{backend}.jsonl"
            loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), batch[:2], out=out, backend=backend, progress=False)
            summary = loops.batch.run(CreatorCriticIterator(retry=NO_WAIT), batch, out=out, backend=backend,
                                      concurrency=2, progress=False)
            assert (summary.skipped, summary.finished, summary.failed) == (2, 2, 1)
            by_backend[backend] = without_timing(records(out))

    assert by_backend["ray"] == by_backend["asyncio"]
    assert [record["id"] for record in by_backend["ray"]] == ["broken", *[f"note-{n}" for n in range(4)]]

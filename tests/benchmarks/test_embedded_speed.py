import json

import pytest

from benchmarks.embedded_speed import busy_cores, direct_worker, summary
from tests.processes import alive


def report(run_seconds: list[float], lm_seconds: list[float], read_s: float = 1.0) -> dict:
    return {"load_s": 1.0, "runs": [
        {"wall_s": wall, "cpu_s": wall, "refine_s": wall / 2, "lm_s": lm, "requests": 4, "threads": 1,
         "llama": {"read_s": read_s, "read_tokens": 100, "generate_s": lm / 2, "generated_tokens": 10}}
        for wall, lm in zip(run_seconds, lm_seconds, strict=True)]}


def test_the_summary_compares_candidates_within_each_round():
    reports = {  # a busy second round slows every candidate alike: the ratio is taken within each round
        "today": [report([10, 10], [8, 8]), report([20, 20], [16, 16])],
        "library": [report([8, 2], [6, 1]), report([16, 4], [12, 2])],
        "direct": [report([6, 1], [6, 1]), report([12, 2], [12, 2])],
    }

    lines = "\n".join(summary(reports))

    assert "today / library, both runs: 2.00x (goal >= 2.5); run 1: 1.25x (goal >= 1.0); run 2: 5.00x" in lines
    assert "library / direct, LM time of run 1: 1.00x (goal <= 1.1)" in lines
    assert "library / direct, LM time of run 2: 1.00x" in lines
    assert "library                  run 2:   1.50 s =   1.00 s ( 67%,   100 tokens)" in lines


def test_the_busy_processes_end_with_the_measurement():
    with busy_cores(1.5) as processes:
        assert len(processes) == 2 and all(alive(process.pid) for process in processes)
    assert not any(alive(process.pid) for process in processes)


@pytest.mark.embedded
def test_the_direct_replay_sends_each_run_with_the_librarys_cache(tmp_path):
    request = [[{"role": "system", "content": "You answer in one word. " * 20},
                {"role": "user", "content": "Name a colour."}], {"max_tokens": 4, "temperature": 0.0}]
    record = tmp_path / "requests.json"
    record.write_text(json.dumps([[request], [request]]))

    replayed = direct_worker(record, ram_cache=False)

    first, second = replayed["runs"]
    assert first["requests"] == second["requests"] == 1
    assert first["llama"]["read_tokens"] > 100  # read whole
    assert 0 < second["llama"]["read_tokens"] <= 2  # all but the last batch from the cache
    assert first["threads"] >= 1

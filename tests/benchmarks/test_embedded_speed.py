import json

import pytest

from benchmarks.embedded_speed import busy_cores, direct_worker, mbpp_summary, summary
from tests.processes import alive


def part(wall: float, lm: float) -> dict:
    return {"wall_s": wall, "cpu_s": wall, "lm_s": lm, "lm_cpu_s": lm, "requests": 4, "threads": "1/2", "outcome": None,
            "llama": {"read_s": 1.0, "read_tokens": 100, "generate_s": lm / 2, "generated_tokens": 10}}


def report(walls: list[float], lms: list[float]) -> dict:
    return {"load_s": 1.0, "runs": [{"refine": part(wall, lm), "fix": part(2 * wall, 2 * lm)}
                                    for wall, lm in zip(walls, lms, strict=True)]}


def test_the_summary_compares_candidates_within_each_round():
    reports = {  # a busy second round slows every candidate alike: the ratio is taken within each round
        "today": [report([10, 10], [8, 8]), report([20, 20], [16, 16])],
        "library": [report([8, 2], [6, 1]), report([16, 4], [12, 2])],
        "direct": [report([6, 1], [6, 1]), report([12, 2], [12, 2])],
    }

    lines = "\n".join(summary(reports))

    assert ("today / library, refine: both runs 2.00x (goal >= 2.5), run 1 1.25x (goal >= 1.0), run 2 5.00x; "
            "in CPU time: both runs 2.00x, run 1 1.25x") in lines
    assert ("library / direct, LM time of refine: run 1 1.00x (CPU 1.00x), run 2 1.00x (CPU 1.00x) "
            "(goal <= 1.1)") in lines
    assert "  library                    12.00 ( 12.00)    3.00 (  3.00)" in lines  # refine, the median round
    assert "library                  refine run 2:    1.50 s =    1.00 s ( 67%,   100 tokens)" in lines


def test_the_mbpp_summary_compares_each_task_run_both_ways():
    def task(task_id: int, wall: float, passed: bool, codes: list[str]) -> dict:
        return {"task_id": task_id, "passed": passed, "codes": codes, **part(wall, wall / 2)}

    records = {"today": [task(554, 100, True, ["a"]), task(555, 60, False, ["b"]), task(556, 80, False, ["c"])],
               "library": [task(554, 40, True, ["a"]), task(555, 30, False, ["b"]), task(556, 50, False, ["d"])]}

    lines = "\n".join(mbpp_summary(records))

    assert "3 validation tasks (554, 555, 556)" in lines
    assert "  today               80.0     80.0     240      50%         2%  [554]" in lines  # read 3 s of 120
    assert "library's median s/task / today's: 0.50 (goal <= 0.5)" in lines
    assert "today / library per task, median: 2.00x wall" in lines  # 2.5, 2.0, 1.6
    assert "the same both ways: 2 of 3" in lines


def test_the_busy_processes_end_with_the_measurement():
    with busy_cores(1.5) as processes:
        assert len(processes) == 2 and all(alive(process.pid) for process in processes)
    assert not any(alive(process.pid) for process in processes)


@pytest.mark.embedded
def test_the_direct_replay_sends_each_run_with_the_librarys_cache(tmp_path):
    request = [[{"role": "system", "content": "You answer in one word. " * 20},
                {"role": "user", "content": "Name a colour."}], {"max_tokens": 4, "temperature": 0.0}]
    record = tmp_path / "requests.json"
    record.write_text(json.dumps([{"refine": [request]}, {"refine": [request]}]))

    replayed = direct_worker(record, ram_cache=False)

    first, second = (run["refine"] for run in replayed["runs"])
    assert first["requests"] == second["requests"] == 1
    assert first["llama"]["read_tokens"] > 100  # read whole
    assert 0 < second["llama"]["read_tokens"] <= 2  # all but the last batch from the cache
    generating, reading = map(int, first["threads"].split("/"))  # as the library's model: one to generate
    assert generating >= 1 and reading >= 1

import json

import dspy
import pytest

from benchmarks.mbpp import (
    build_prompt,
    build_test_file,
    candidate_kind,
    candidate_task,
    check_code,
    failure_category,
    load_tasks,
    main,
    run_task,
    summarize,
)
from loops.patterns.code import EMBEDDED_CODE_LOOP, draws
from tests.scripted import scripted_lm

TASKS = [
    {"task_id": 1, "prompt": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b\n",
     "test_imports": [], "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"], "split": "validation"},
    {"task_id": 2, "prompt": "Write a function to find the square root.",
     "code": "import math\n\n\ndef root(x):\n    return math.sqrt(x)\n",
     "test_imports": ["import math"], "test_list": ["assert root(4) == 2"], "split": "train"},
]


def test_tasks_load_by_split(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text("\n".join(json.dumps(task) for task in TASKS) + "\n")

    assert [task["task_id"] for task in load_tasks(path, "validation")] == [1]
    assert [task["task_id"] for task in load_tasks(path, "all")] == [1, 2]


def test_the_prompt_is_the_papers_task_plus_asserts():
    prompt = build_prompt(TASKS[0])

    assert prompt.startswith("You are an expert Python programmer, and here is your task: Write a function to add")
    assert prompt.endswith("Your code should pass these tests:\n\nassert add(1, 2) == 3\nassert add(0, 0) == 0")


def test_the_harness_passes_the_reference_solution_and_fails_a_wrong_one():
    for task in TASKS:
        assert "from solution import *" in build_test_file(task)
        assert check_code(task["code"], task).ok, task["task_id"]

    wrong = check_code("def add(a, b):\n    return a - b\n", TASKS[0])
    assert (wrong.ok, wrong.passed, wrong.failed) == (False, 1, 1)
    assert failure_category(wrong) == "AssertionError"
    assert failure_category(check_code("def plus(a, b):\n    return a + b\n", TASKS[0])) == "NameError"


def test_the_summary_counts_passes_and_calls_per_config():
    records = [
        {"config": "single", "task_id": 1, "passed": True, "lm_calls": 1, "seconds": 2.0, "first_pass_iteration": 1,
         "failure_category": None, "first_raw_passed": False, "first_extracted_passed": True},
        {"config": "single", "task_id": 2, "passed": False, "lm_calls": 1, "seconds": 3.0, "first_pass_iteration": None,
         "failure_category": "NameError", "first_raw_passed": False, "first_extracted_passed": False},
    ]

    (row,) = summarize(records)

    assert (row["config"], row["tasks"], row["passed"], row["lm_calls"]) == ("single", 2, 1, 2)


def test_each_kind_of_candidate_is_drawn_as_the_loop_draws_it_and_tested_on_its_own():
    plan = draws(EMBEDDED_CODE_LOOP.samples, EMBEDDED_CODE_LOOP.examples, EMBEDDED_CODE_LOOP.penalty_variants)
    answers = ["def add(a, b):\n    return a - b\n"] * len(plan)
    answers[2] = TASKS[0]["code"]  # only the third kind passes
    lm = scripted_lm(answers)

    with dspy.context(lm=lm):
        record = candidate_task(TASKS[0])

    assert [answer["kind"] for answer in record["candidates"]] == [candidate_kind(draw) for draw in plan]
    assert [answer["passed"] for answer in record["candidates"]] == [index == 2 for index in range(len(plan))]
    assert (record["passed"], record["lm_calls"]) == (True, len(plan))
    configs = [request.config for request in lm.engine.requests]
    expected = [draw.executor_call(number)[0] for number, draw in enumerate(plan, 1)]
    assert [(config.temperature, config.seed, config.frequency_penalty) for config in configs] == [
        (call.get("temperature"), call.get("seed"), call.get("frequency_penalty")) for call in expected]


def test_an_unknown_config_is_refused_with_every_choice_named():
    with pytest.raises(SystemExit, match=r"choose from single, .*passk, candidates, sNiM .* or file:PATH"):
        main(["--configs", "singel"])


HARDCODED_ADD = "def add(a, b):\n    if a == 1 and b == 2:\n        return 3\n    return 0\n"


@pytest.mark.parametrize("config", ["single", "file"])
def test_a_pass_that_returns_the_tested_values_is_reported_apart_and_not_counted(config, tmp_path):
    from loops import ExecuteValidateController
    from loops.patterns.code import Draw

    if config == "file":  # a saved program (e.g. the draws optimizer's), run as saved
        path = tmp_path / "fix.json"
        ExecuteValidateController(draws=[Draw()], max_iterations=1, analyst=False).save(path)
        config = f"file:{path}"
    with dspy.context(lm=scripted_lm([HARDCODED_ADD, TASKS[0]["code"]])):
        cheat = run_task(config, TASKS[0])
        honest = run_task(config, TASKS[0])

    assert (cheat["passed"], cheat["hardcoded"], cheat["failure_category"]) == (
        False, ["assert add(1, 2) == 3"], "hardcoded")
    assert (honest["passed"], honest["hardcoded"]) == (True, [])
    (row,) = summarize([cheat, honest])
    assert (row["passed"], row["hardcoded"], row["failures"]) == (1, [1], {"hardcoded": 1})

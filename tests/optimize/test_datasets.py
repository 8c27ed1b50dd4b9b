"""`loops.optimize.datasets.mbpp`: MBPP JSON lines as examples that carry their own tests, run by the
Execute–Validate loop in a fresh workspace each, scored by its metric."""

from __future__ import annotations

import json

import dspy
import pytest

from loops import ConfigurationError, ExecuteValidateController
from loops.optimize import execute_validate_metric
from loops.optimize.datasets import MBPP_TEST_COMMAND, MBPP_TEST_FILE, mbpp
from tests.scripted import scripted_lm

TASKS = [
    {"task_id": 601, "prompt": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
     "test_imports": [], "test_list": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"], "split": "train"},
    {"task_id": 511, "prompt": "Write a function to double a number.", "code": "def double(x):\n    return 2 * x",
     "test_imports": ["import math"], "test_list": ["assert double(2) == 4", "assert double(0) == 0"],
     "split": "validation"},
]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text("\n".join(json.dumps(task) for task in TASKS) + "\n")
    return path


def test_a_split_becomes_examples_with_the_loops_inputs_and_their_own_tests(data):
    [example] = mbpp(data, split="validation")
    assert set(example.inputs().keys()) == {"initial_input", "test_command"}
    assert example.task_id == 511 and example.reference.startswith("def double")
    assert example.test_command == MBPP_TEST_COMMAND
    request = example.initial_input
    assert request["prompt"].endswith(
        "Your code should pass these tests:\n\nassert double(2) == 4\nassert double(0) == 0")
    assert request["workspace_files"][MBPP_TEST_FILE] == (
        "from solution import *\nimport math\n\n\ndef test_1():\n    assert double(2) == 4\n\n\n"
        "def test_2():\n    assert double(0) == 0\n")
    assert [example.task_id for example in mbpp(data, split="all")] == [601, 511]
    assert len(mbpp(data, split="all", limit=1)) == 1


@pytest.mark.parametrize("make, message", [
    (lambda tmp_path: tmp_path / "none.jsonl", "cannot read the MBPP file"),
    (lambda tmp_path: (tmp_path / "x.jsonl", (tmp_path / "x.jsonl").write_text("{oops\n"))[0], "is not JSON lines"),
    (lambda tmp_path: (tmp_path / "y.jsonl", (tmp_path / "y.jsonl").write_text('{"a": 1}\n'))[0],
     "does not look like MBPP"),
])
def test_a_wrong_file_is_a_configuration_error_naming_it(tmp_path, make, message):
    with pytest.raises(ConfigurationError, match=message):
        mbpp(make(tmp_path))


def test_an_unknown_split_is_refused(data):
    with pytest.raises(ConfigurationError, match="split must be one of prompt, validation, train, test, all"):
        mbpp(data, split="dev")


@pytest.mark.parametrize("answer, score", [("def double(x):\n    return 2 * x\n", 1.0),
                                           ("def double(x):\n    return x + 2\n", 0.5)])
def test_the_loop_runs_an_example_in_its_own_workspace_and_the_metric_scores_it(data, answer, score):
    [example] = mbpp(data, split="validation")
    module = ExecuteValidateController(max_iterations=1, samples=1, analyst=False)
    with dspy.context(lm=scripted_lm([answer]), adapter=dspy.ChatAdapter()):
        result = module(**example.inputs())
    assert execute_validate_metric(example, result) == pytest.approx(score)

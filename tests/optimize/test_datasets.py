"""`loops.optimize.datasets.mbpp`: MBPP JSON lines as examples that carry their own tests, run by the
Execute–Validate loop in a fresh workspace each, scored by its metric."""

from __future__ import annotations

import json
import re

import dspy
import pytest

from loops import ConfigurationError, ExecuteValidateController
from loops.optimize import execute_validate_metric
from loops.optimize.datasets import MBPP_TEST_COMMAND, MBPP_TEST_FILE, jsonl, mbpp
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
    (lambda tmp_path: (tmp_path / "x.jsonl", (tmp_path / "x.jsonl").write_text("{oops\n"))[0],
     r"'.*x.jsonl', line 1: not JSON \(Expecting property name enclosed in double quotes, column 2\)"),
    (lambda tmp_path: (tmp_path / "y.jsonl", (tmp_path / "y.jsonl").write_text('{"a": 1}\n'))[0],
     "does not look like MBPP"),
])
def test_a_wrong_file_is_a_configuration_error_naming_it(tmp_path, make, message):
    with pytest.raises(ConfigurationError, match=message):
        mbpp(make(tmp_path))


def test_a_bad_line_is_named_by_its_line_in_the_file(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"requirements": "a"}\n\n{"requirements": "b"}\n{"requirements": "c",}\n')
    with pytest.raises(ConfigurationError, match=r"tasks.jsonl', line 4: not JSON \(.*column 22\)"):
        jsonl(data)
    data.write_text('{"requirements": "a"}\n["b"]\n')
    with pytest.raises(ConfigurationError, match="line 2: a JSON list, not an object"):
        jsonl(data)


def test_every_bad_line_is_named_in_one_error_not_only_the_first(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join('{"requirements": "a"}\n' if number % 3 else f"not JSON {number}\n"
                            for number in range(36)))

    with pytest.raises(ConfigurationError) as raised:
        jsonl(data)

    said = str(raised.value)
    assert "\n" not in said
    assert said.startswith(f"{str(data)!r}, line 1: not JSON (Expecting value, column 1); line 4: ")
    assert [int(number) for number in re.findall(r"line (\d+)", said)] == [1, 4, 7, 10, 13, 16, 19, 22, 25, 28]
    assert said.endswith("; and 2 more lines (each line must be one JSON object)")


def test_a_file_that_is_not_utf8_is_a_one_line_configuration_error(tmp_path):
    data = tmp_path / "latin1.jsonl"
    data.write_bytes('{"requirements": "a"}\n{"requirements": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(ConfigurationError, match=r"latin1.jsonl', line 2: not UTF-8 text \(byte 0xe9 at column 22\)"):
        jsonl(data)


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


SOLUTIONS = {
    "add": "def add(a, b):\n    return a + b\n",
    "is_even": "def is_even(n):\n    return n % 2 == 0\n",
    "reverse_string": "def reverse_string(s):\n    return s[::-1]\n",
    "square": "def square(x):\n    return x * x\n",
    "maximum": "def maximum(xs):\n    return max(xs)\n",
    "count_vowels": "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n",
    "first": "def first(xs):\n    return xs[0] if xs else None\n",
    "word_count": "def word_count(s):\n    return len(s.split())\n",
}


def test_the_built_in_sets_hold_inputs_of_their_patterns():
    from loops.optimize.datasets import BUILTIN, builtin

    assert set(BUILTIN) == {"writing", "goals", "code"}
    assert all(set(example.inputs()) == {"requirements", "context"} for example in builtin("writing"))
    assert all(set(example.inputs()) == {"initial_input"} for example in builtin("goals"))
    with pytest.raises(ConfigurationError, match="no built-in set 'poems'"):
        builtin("poems")


@pytest.mark.slow
def test_every_built_in_code_task_is_solvable_and_its_tests_tell(tmp_path):
    from loops.optimize.datasets import builtin

    for example in builtin("code"):
        name = example.initial_input["prompt"].split("function ")[1].split("(")[0]
        module = ExecuteValidateController(max_iterations=1, samples=1, analyst=False)
        for code, expected in ((SOLUTIONS[name], True), ("def nothing():\n    pass\n", False)):
            with dspy.context(lm=scripted_lm([code])):
                result = module(**example.inputs())
            assert result.success is expected, (name, code, result.best_attempt)


def test_any_json_lines_file_gives_examples_and_its_splits(tmp_path):
    from loops.optimize.datasets import has_splits, jsonl

    path = tmp_path / "notes.jsonl"
    path.write_text('{"requirements": "a", "split": "train", "reference": "r"}\n'
                    '{"requirements": "b", "split": "validation"}\n')

    assert has_splits(path)
    [train] = jsonl(path, split="train")
    assert (train.inputs().toDict(), train.reference) == ({"requirements": "a"}, "r")
    assert [example.requirements for example in jsonl(path)] == ["a", "b"]
    with pytest.raises(ConfigurationError, match=r"record 1: no 'context'"):
        jsonl(path, inputs=("requirements", "context"))

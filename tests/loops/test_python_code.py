"""The Python helpers of the code loop (loops.patterns.code.python) and the executor's request
(loops.patterns.code.code_request)."""

import shlex
import sys

import pytest

from loops import ConfigurationError
from loops.patterns.code import (
    Interface,
    align_names,
    code_request,
    hardcoded_asserts,
    module_the_tests_import,
    read_interface,
)
from loops.signatures.results import CodeRequest

MBPP_STYLE = (
    "from solution import *\nimport math\n\n\n"
    "def test_1():\n    assert Split([1, 2, 3, 4, 5]) == [1, 3, 5]\n\n\n"
    "def test_2(tmp_path):\n    assert math.isclose(area(2, 3.0), 6.0)\n"
    "    assert set(similar((3, 4), (5, 4))) == {4}\n    assert len(tmp_path.name) > 0\n"
)


def test_the_interface_is_the_names_a_star_importing_test_calls_with_their_argument_kinds(tmp_path):
    (tmp_path / "test_solution.py").write_text(MBPP_STYLE)

    interface = read_interface(tmp_path, "pytest -q test_solution.py")

    # Builtins (set, len), other modules' functions (math.isclose) and fixtures (tmp_path) are not the target's.
    assert interface.calls == (("Split", "Split(list)"), ("area", "area(int, float)"),
                               ("similar", "similar(tuple, tuple)"))
    assert interface.names == ("Split", "area", "similar")
    assert interface.test_files == ("test_solution.py",)
    assert interface.describe("solution.py") == (
        "The tests call `Split(list)`, `area(int, float)`, `similar(tuple, tuple)`: define exactly these names "
        "in solution.py, with these arguments.")


def test_names_imported_by_name_or_called_on_the_module_belong_to_the_interface(tmp_path):
    (tmp_path / "checks_test.py").write_text(
        "from solution import Pair, max_chain\nimport solution as sol\n\n\n"
        "def test_chain():\n    assert max_chain([Pair(5, 24)], n=1) == 1\n    assert sol.helper('x') == 'x'\n")
    (tmp_path / "notes.py").write_text("from solution import ignored\n")  # not a test file

    interface = read_interface(tmp_path, "pytest", target_file="solution.py")

    assert interface.calls == (("Pair", "Pair(int, int)"), ("max_chain", "max_chain(list, n=int)"),
                               ("helper", "helper(str)"))
    assert interface.imports == ("from solution import Pair, max_chain", "import solution as sol")


def test_the_test_command_is_read_too_a_python_c_program_and_the_files_it_names(tmp_path):
    (tmp_path / "check.py").write_text("from lib.core import mean\nassert mean([1, 2]) == 1.5\n")
    command = shlex.join([sys.executable, "-c", "from lib.core import add; assert add(1, 2) == 3"])

    assert read_interface(tmp_path, command, target_file="lib/core.py").names == ("add",)
    assert read_interface(tmp_path, f"{sys.executable} check.py", target_file="lib/core.py").names == ("mean",)


@pytest.mark.parametrize(("files", "command", "expected"), [
    ({"test_mul.py": "from mul import mul\nimport pytest, json\n"}, "pytest -q", "mul.py"),
    ({"tests_of.py": "import geometry.shapes\n"}, "pytest -q tests_of.py", "geometry/shapes.py"),
    ({}, "python -c 'from solution import add; assert add(1, 2) == 3'", "solution.py"),
    ({"test_a.py": "from helpers import x\nfrom mul import mul\n", "helpers.py": "x = 1\n"}, "pytest", "mul.py"),
    ({"test_a.py": "from one import a\nfrom two import b\n"}, "pytest", None),  # which one: not ours to guess
    ({"test_a.py": "import os, sys, pytest\nfrom test_b import helper\n"}, "pytest", None),
])
def test_the_module_the_tests_import_is_the_file_they_expect(tmp_path, files, command, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    assert module_the_tests_import(tmp_path, command) == expected


def test_no_tests_or_unparseable_tests_give_an_empty_interface(tmp_path):
    assert not read_interface(tmp_path / "missing", "pytest")
    (tmp_path / "test_broken.py").write_text("def test(:\n")
    interface = read_interface(tmp_path, "pytest")
    assert interface == Interface(test_files=("test_broken.py",)) and interface.describe("solution.py") == ""


def test_align_names_aliases_the_one_function_to_the_expected_names():
    code, aliases = align_names("def odd_list(xs):\n    return xs\n", ("Split",))
    assert aliases == ["Split = odd_list"] and code.endswith("Split = odd_list\n")
    assert align_names("def a(): pass\ndef b(): pass\n", ["Split"])[1] == []  # which one? no guess


def test_a_request_is_built_from_a_str_or_a_dict_and_renders_the_executors_task():
    assert code_request("write f") == CodeRequest(prompt="write f")
    request = code_request({"prompt": "write f", "files": ["a.py"], "target_file": "f.py",
                              "interface": "The tests call `f(int)`: define exactly these names."})
    assert request.files == ("a.py",) and code_request(request) is request

    retried = request.retry("It failed.", ["g", "g"]).retry("Again.", ["h"])

    assert retried.expected_names == ("g", "h") and retried.feedback == "Again."
    assert retried.task() == ("write f\n\nThe tests call `f(int)`: define exactly these names.\n\n"
                              "Your previous attempt failed:\nAgain.")


@pytest.mark.parametrize("value", [None, 3, {"task": "x"}, {"prompt": "x", "file": ["typo.py"]}])
def test_a_request_that_is_not_one_says_what_it_takes(value):
    with pytest.raises(ConfigurationError, match="prompt"):
        code_request(value)


# --- code that answers the tests rather than the task (hardcoded_asserts) -------------------------------

CATALAN_TESTS = """from solution import *


def test_1():
    assert catalan_number(10)==16796


def test_2():
    assert catalan_number(9)==4862


def test_3():
    assert catalan_number(7)==429
"""


@pytest.mark.parametrize("code, found", [
    # Task 583's repair in iteration 2: the tested values, returned by branches on the tested arguments.
    ("def catalan_number(n):\n    if n == 10:\n        return 16796\n    elif n == 9:\n        return 4862\n"
     "    return 429\n", ["assert catalan_number(10) == 16796", "assert catalan_number(9) == 4862"]),
    ("def catalan_number(n):\n    return {10: 16796, 9: 4862, 7: 429}[n]\n",
     ["assert catalan_number(10) == 16796", "assert catalan_number(9) == 4862", "assert catalan_number(7) == 429"]),
    ("def catalan_number(n):\n    return 16796 if n == 10 else 0\n", ["assert catalan_number(10) == 16796"]),
    # Honest code: a base case returning a trivial value is not hard-coding.
    ("def catalan_number(n):\n    if n <= 1:\n        return 1\n"
     "    return sum(catalan_number(i) * catalan_number(n - 1 - i) for i in range(n))\n", []),
    ("def catalan_number(n):\n    if n == 0:\n        return 1\n    c = 1\n    for k in range(n):\n"
     "        c = c * 2 * (2 * k + 1) // (k + 2)\n    return c\n", []),
    ("def catalan_number(n):\n    if n == 10\n", []),  # does not parse
])
def test_hardcoded_asserts_finds_tested_values_returned_for_the_tested_arguments(code, found):
    assert hardcoded_asserts(code, CATALAN_TESTS) == found


def test_hardcoded_asserts_reads_several_arguments_and_either_side_of_the_assert():
    tests = "assert 'ab' == join_words('a', 'b')\nassert join_words('c', 'd') == 'cd'\n"
    assert hardcoded_asserts("def join_words(a, b):\n    if a == 'a' and b == 'b':\n        return 'ab'\n"
                             "    return a + b\n", tests) == ["assert 'ab' == join_words('a', 'b')"]
    assert hardcoded_asserts("def join_words(a, b):\n    if (a, b) == ('c', 'd'):\n        return 'cd'\n", tests) \
        == ["assert join_words('c', 'd') == 'cd'"]
    assert hardcoded_asserts("def join_words(a, b):\n    return a + b\n", tests) == []

"""Every program in examples/ runs: each has a row here (a new example without one fails), with the
inputs it is run with, a scripted LM that answers its atoms, and what its result must be."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import dspy
import pytest

from loops.lm import local_lm
from loops.sexp import compile as compile_program
from loops.sexp import shell_command_tool
from tests.scripted import request_text, scripted_lm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def coding_loop(tmp_path: Path) -> dict:
    # Two iterations: the first code fails the real pytest run, the analysis atom says what to change,
    # the second code passes. The executor's answer comes fenced, as models write it.
    (tmp_path / "test_greet.py").write_text("from greet import greet\n\ndef test_greet():\n"
                                            "    assert greet('Ada') == 'Hello, Ada!'\n")
    right = "def greet(name):\n    return f'Hello, {name}!'"
    return {
        # The validator runs the tests through the shell tool: granted, for the one executable it needs.
        "tools": {"system:execute_shell_command": shell_command_tool(executables=[sys.executable])},
        "bindings": {"goal": "Define greet(name) returning 'Hello, NAME!'", "file": "greet.py",
                     "test-command": shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])},
        "answers": [{"steps": "Write greet(name)"},
                    {"code": "```python\ndef greet(name):\n    return 'Hello'\n```"},
                    {"success": False, "analysis": "greet ignores the name", "next_input": "Put the name in it",
                     "new_files": []},
                    {"code": right}],
        "outcome": ("stopped", True),
        "check": lambda result: (result == (("status", "PASSED"), ("file", "greet.py"), ("iterations", 2))
                                 and (tmp_path / "greet.py").read_text() == right),
        # The analysis saw the failing test run; the second attempt got its instructions and feedback.
        "requests": lambda requests: ("assert 'Hello' == 'Hello, Ada!'" in request_text(requests[2])
                                      and "Put the name in it" in request_text(requests[3])
                                      and "greet ignores the name" in request_text(requests[3])),
    }


def director_loop(tmp_path: Path) -> dict:
    return {
        "bindings": {"goal": "Describe a teapot", "keywords": "spout handle"},
        "answers": [{"plan": "describe it"}, {"result": "A teapot has a spout."},
                    {"plan": "mention the handle too"}, {"result": "A teapot has a spout and a handle."}],
        "check": lambda result: result == "A teapot has a spout and a handle.",
        "outcome": ("stopped", True),  # the evaluator passed the second result
    }


def creator_critic(tmp_path: Path) -> dict:
    return {
        "bindings": {"product": "a reusable water bottle", "max-words": 6},
        "answers": [{"draft": "Stay hydrated on every single commute you ever take"},
                    {"revised": "Hydrate smarter, commute better"},
                    {"revised": "Your reusable bottle, every commute"}],
        "check": lambda result: result == "Your reusable bottle, every commute",
        "outcome": ("approved", True),
    }


def workrail_loops(tmp_path: Path) -> dict:
    return {
        "bindings": {"target": 100},
        "answers": [],
        "check": lambda result: result == (("value", 128), ("countdown", 0), ("evens", 20),
                                           ("numbered", ("1. apple", "2. pear", "3. plum")), ("spins", 3)),
        "warnings": ["while stopped at max-iterations 3"],
    }


def plain_language(tmp_path: Path) -> dict:
    return {
        "bindings": {"n": 10},
        "answers": [],
        "check": lambda result: result == (("ticks", 3), ("sum", 55), ("squares", (1, 4, 9)),
                                           ("greeting", "Hello, Ada!"), ("missing", ())),
    }


CASES = {"coding_loop": coding_loop, "director_loop": director_loop, "creator_critic": creator_critic,
         "workrail_loops": workrail_loops, "plain_language": plain_language}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.sexp")), ids=lambda path: path.stem)
def test_every_example_runs_to_the_result_it_promises(path, tmp_path):
    assert path.stem in CASES, f"examples/{path.name} has no case in {__file__}: add one"
    case = CASES[path.stem](tmp_path)
    program = compile_program(path, tools=case.get("tools"), workspace=tmp_path)
    lm = scripted_lm(list(case["answers"]))
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = program(**case["bindings"])
    # A program ends as its last loop form did; one without a loop form, by running to its end.
    assert (result.stop_reason, result.success) == case.get("outcome", ("completed", True)), result.warnings
    assert case["check"](result.result), result.result
    assert len(lm.engine.requests) == len(case["answers"])
    assert case.get("requests", lambda requests: True)(lm.engine.requests)
    for expected in case.get("warnings", []):
        assert any(expected in warning for warning in result.warnings), result.warnings
    if not case.get("warnings"):
        assert result.warnings == []


@pytest.mark.slow
def test_the_creator_critic_example_runs_on_the_embedded_model(tmp_path):
    program = compile_program(EXAMPLES / "creator_critic.sexp", workspace=tmp_path)
    with dspy.context(lm=local_lm()):
        result = program(product="a reusable water bottle", **{"max-words": 12})
    assert result.stop_reason in ("approved", "max_iterations")
    assert result.success is (result.stop_reason == "approved")
    assert isinstance(result.result, str) and result.result.strip()
    assert 1 <= result.lm_calls <= 3
    assert [step.role for step in result.trace][0] == "user:create"

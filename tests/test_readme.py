"""The README's Python blocks run as they are written, on the embedded model they configure themselves: each in a
directory of its own (holding the repository's `examples/`, which a block reads), with the virtual environment's
`python` first on PATH, as after `source .venv/bin/activate`. All but two: the one that asks a person at a
terminal, and the one that sends traces to a collector."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import dspy
import pytest

import loops

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
# Asks a person at a terminal, which a test has not (the block after it shows the same loop pausing instead).
AT_A_TERMINAL = "critic=loops.human())"
# Sends every later run's spans to an OTLP collector the test has not (tests/loops/observers/test_tracing.py enables
# tracing into a provider of its own, and test_tracing_mlflow.py into a real collector).
TO_A_COLLECTOR = "loops.observers.tracing.enable()"
RUNNABLE = [block for block in BLOCKS if AT_A_TERMINAL not in block and TO_A_COLLECTOR not in block]
PATTERNS = ("CreatorCriticIterator(", "ExecuteValidateController(", "DirectorExecutorEvaluatorController(", "sexp",
            "Refine(")


def test_the_readme_calls_every_pattern_from_python():
    assert len(RUNNABLE) == len(BLOCKS) - 2
    for pattern in PATTERNS[:3]:
        assert any(pattern in block for block in RUNNABLE), pattern


@pytest.fixture
def as_a_user(tmp_path, monkeypatch):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    configured = dspy.settings.lm, dspy.settings.adapter
    yield
    dspy.configure(lm=configured[0], adapter=configured[1])  # what a block configured ends with it


@pytest.mark.embedded
@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: next(
    pattern.strip("(") for pattern in (*PATTERNS, "") if pattern in block))
def test_a_readme_block_runs_as_written(as_a_user, block):
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)

    results = [namespace[name] for name in ("result", "paused", "checked") if name in namespace]
    assert results and all(result.stop_reason in loops.STOP_REASONS for result in results)
    assert all(not result.error for result in results), [result.error for result in results]

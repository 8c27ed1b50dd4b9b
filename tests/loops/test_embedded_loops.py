"""End to end on the real embedded model (SmolLM2-135M via llama.cpp): short loops, offline."""

import sys

import dspy
import pytest

from loops import CreatorCriticIterator, ExecuteValidateController, Workspace
from loops.adapters import CompactJSONAdapter
from loops.lm import local_lm

pytestmark = pytest.mark.embedded


@pytest.fixture
def embedded():
    with dspy.context(lm=local_lm(), adapter=CompactJSONAdapter()):
        yield


def test_creator_critic_iterator_runs_a_short_loop(embedded):
    result = CreatorCriticIterator(max_iterations=1)(requirements="Write one sentence about the sea.")

    assert result.stop_reason in ("approved", "max_iterations")
    assert isinstance(result.final_draft, str) and result.final_draft.strip()
    roles = [step.role for step in result.trace]
    assert roles[:2] == ["creator", "critic"]
    assert len(roles) == (2 if result.approved and result.iterations == 0 else 4)
    assert all(step.tokens and step.tokens["output"] > 0 for step in result.trace)


def test_execute_validate_controller_runs_real_tests_on_the_model_code(embedded, tmp_path):
    workspace = Workspace(tmp_path)
    workspace.write({"test_solution.py": "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"})
    loop = ExecuteValidateController(max_iterations=2, workspace=workspace)

    result = loop(
        initial_input="Write a Python function add(a, b) that returns the sum of a and b.",
        test_command=f"{sys.executable} -m pytest -q -p no:cacheprovider test_solution.py",
    )

    # Whether a 135M model gets it right is the benchmark's business; the loop's is to run it honestly.
    assert result.stop_reason in ("stopped", "max_iterations")
    roles = [step.role for step in result.trace]
    assert roles[:2] == ["executor", "validator"]
    validations = [step.outputs["result"] for step in result.trace if step.role == "validator"]
    assert result.success == validations[-1].ok
    assert (tmp_path / "solution.py").exists()
    if not result.success:  # the analyst is not asked after the last attempt: nothing would follow
        assert roles == ["executor", "validator", "analyst", "executor", "validator"]

"""End to end on the real embedded model (SmolLM2-135M via llama.cpp): short loops, offline."""

import re
import sys

import dspy
import pytest
from typer.testing import CliRunner

import loops.lm
import loops.lm.embedded
from loops import CreatorCriticIterator, ExecuteValidateController, Workspace
from loops.cli import app
from loops.lm import local_lm
from loops.vocabulary.adapters import CompactJSONAdapter
from loops.vocabulary.profile import adapter_for

pytestmark = pytest.mark.embedded


@pytest.fixture
def embedded():
    with dspy.context(lm=local_lm(), adapter=CompactJSONAdapter()):
        yield


def test_creator_critic_iterator_runs_a_short_loop(embedded):
    result = CreatorCriticIterator(max_iterations=2)(requirements="Write one sentence about the sea.")

    assert result.stop_reason in ("approved", "max_iterations")
    assert isinstance(result.final_draft, str) and result.final_draft.strip()
    roles = [step.role for step in result.trace]
    assert roles == (["creator", "critic"] if result.approved and result.iterations == 1
                     else ["creator", "critic", "iterator", "critic"])
    assert all(step.tokens and step.tokens["output"] > 0 for step in result.trace)
    assert result.lm_calls >= len(roles)


def test_the_embedded_model_brings_its_adapter_as_a_dspy_user_would_configure_it():
    # `dspy.configure(lm=local_lm())` and nothing else: no adapter in the context.
    with dspy.context(lm=local_lm()):
        assert dspy.settings.adapter is None
        result = CreatorCriticIterator(max_iterations=1)(requirements="Write one sentence about the sea.")

    assert [step.role for step in result.trace] == ["creator", "critic"]
    draft = result.final
    assert isinstance(draft, str) and draft.strip()
    assert "{draft}" not in draft and "[[ ##" not in draft  # not ChatAdapter's placeholder copied verbatim
    assert result.iterations == 1 and result.stop_reason in ("approved", "max_iterations")
    assert isinstance(result.trace[1].outputs["approved"], bool)


def test_adapter_for_the_embedded_lm_is_compact_json_without_loading_the_model():
    loaded = loops.lm.embedded._model  # None unless an earlier test ran the model

    assert isinstance(adapter_for(local_lm()), CompactJSONAdapter)
    assert loops.lm.embedded._model is loaded


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


@pytest.mark.parametrize("driver", ["forward", "aforward"])
def test_the_run_deadline_ends_an_embedded_generation_in_flight(driver):
    import asyncio
    import time

    module = CreatorCriticIterator(max_iterations=3)
    essay = "Write a very long essay about rivers, at least 2000 words."
    with dspy.context(lm=local_lm(max_tokens=4000)):
        started = time.monotonic()
        if driver == "forward":
            result = module(requirements=essay, timeout_s=1.5)
        else:
            result = asyncio.run(module.acall(requirements=essay, timeout_s=1.5))
        elapsed = time.monotonic() - started
    assert result.stop_reason == "timeout"
    assert elapsed < 1.5 + 0.5, f"the run overran its deadline by {elapsed - 1.5:.2f}s"
    assert result.trace[-1].error == "abandoned at the deadline"
    assert result.lm_calls == len(result.trace)  # the abandoned request counts


def test_a_prompt_longer_than_the_models_context_ends_the_run_as_a_limit_before_it_is_sent(embedded):
    requirements = "Write one sentence about " + "the sea and the sky, " * 1500  # about 9,000 tokens: over 8,192

    result = CreatorCriticIterator(max_iterations=2)(requirements=requirements)

    assert (result.stop_reason, result.lm_calls, result.success) == ("context_limit", 0, False)
    assert re.fullmatch(r"a prompt of \d{4,5} tokens does not fit the embedded model's context of 8192 tokens "
                        r"\(shorter inputs or a smaller history_window keep a role's prompt within it\)",
                        result.warnings[-1]), result.warnings


def test_the_command_exits_1_for_a_prompt_over_the_models_context_as_for_any_limit():
    outcome = CliRunner().invoke(app, ["refine", "Write about " + "the sea and the sky, " * 1500])

    assert outcome.exit_code == 1, outcome.output
    assert "stop reason: context_limit" in outcome.stdout
    assert "does not fit the embedded model's context of 8192 tokens" in " ".join(outcome.stdout.split())

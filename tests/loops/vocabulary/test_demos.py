"""What optimizers see of a loop (loops.vocabulary.demos): per role, the call the result rests on, without history."""

import dspy
from dspy.teleprompt import BootstrapFewShot

from loops import CreatorCriticIterator, ExecuteValidateController, RetryPolicy, Workspace
from loops.signatures.results import ValidationResult
from tests.loops.test_optimization import respond as rejects_the_first_draft  # approves only the revision
from tests.scripted import request_text, scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)


def bootstrap(module, lm, trainset):
    optimizer = BootstrapFewShot(metric=lambda example, prediction, trace=None: prediction.success,
                                 max_bootstrapped_demos=4, max_labeled_demos=0)
    with dspy.context(lm=lm):
        return optimizer.compile(module, trainset=trainset)


def test_a_looping_role_gives_one_demo_per_run_the_call_that_led_to_success_without_history():
    trainset = [dspy.Example(requirements=f"note {n}").with_inputs("requirements") for n in range(2)]
    compiled = bootstrap(CreatorCriticIterator(retry=NO_WAIT), scripted_lm(rejects_the_first_draft), trainset)

    demos = {name: predictor.demos for name, predictor in compiled.named_predictors()}
    # The critic judged two drafts per example: its demo is the approving verdict, never the rejection.
    assert [demo["approved"] for demo in demos["critic"]] == [True, True]
    assert [demo["draft"] for demo in demos["critic"]] == ["second draft", "second draft"]
    assert [demo["improved_draft"] for demo in demos["iterator"]] == ["second draft", "second draft"]
    assert all("history" not in demo for found in demos.values() for demo in found)


def test_demos_render_as_plain_task_and_answer_before_the_roles_own_turns():
    trainset = [dspy.Example(requirements="note 1").with_inputs("requirements")]
    compiled = bootstrap(CreatorCriticIterator(retry=NO_WAIT), scripted_lm(rejects_the_first_draft), trainset)
    lm = scripted_lm(rejects_the_first_draft)

    with dspy.context(lm=lm):
        result = compiled(requirements="note 2")

    assert result.approved
    second_critic_call = [request for request in lm.engine.requests if "CRITIC" in request_text(request)][1]
    assert '{"messages"' not in request_text(second_critic_call)
    turns = [message.text for message in second_critic_call.messages]
    assert "[[ ## history ## ]]" not in turns[0] and "not supplied" not in turns[0].lower()
    # The demo (task: note 1) comes first, then the critic's own earlier turn of this run (note 2).
    assert "note 1" in turns[0] and "note 2" in turns[-1]
    assert any("first draft" in turn for turn in turns[2:-1])  # its history is still shown, as turns


def test_the_executors_demo_is_the_kept_sample_not_the_last_one(tmp_path):
    (tmp_path / "test_solution.py").write_text("def test_x():\n    pass\n")
    codes = {"def f():\n    return 2": 2, "def f():\n    return 1": 1, "def f():\n    return 0": 0}

    def validate(test_command, iteration):
        passed = codes[(tmp_path / "solution.py").read_text().strip()]
        return ValidationResult(exit_code=1, passed=passed, failed=3 - passed)

    # None of three samples passes; the first passed most tests, so the loop keeps it, not the last. The
    # answers come in fences with an example print, as small models write them: the demo shows the code
    # as it was written and tested.
    lm = scripted_lm([{"code": f"```python\n{code}\n\nprint(f())\n```", "notes": ""} for code in codes])
    module = ExecuteValidateController(workspace=Workspace(tmp_path), samples=3, max_iterations=1, analyst=False,
                                       validator=validate, executor_adapter=None, retry=NO_WAIT)
    trainset = [dspy.Example(initial_input="write f", test_command="true").with_inputs("initial_input",
                                                                                      "test_command")]
    optimizer = BootstrapFewShot(metric=lambda example, prediction, trace=None: True, max_bootstrapped_demos=4,
                                 max_labeled_demos=0)
    with dspy.context(lm=lm):
        compiled = optimizer.compile(module, trainset=trainset)

    assert [demo["code"].strip() for demo in compiled.executor.demos] == ["def f():\n    return 2"]
    assert "```" not in compiled.executor.demos[0]["code"] and "print" not in compiled.executor.demos[0]["code"]


def test_only_a_captured_trace_is_curated():
    lm = scripted_lm(rejects_the_first_draft)
    global_trace = dspy.settings.trace
    before = len(global_trace)
    with dspy.context(lm=lm):
        CreatorCriticIterator(retry=NO_WAIT)(requirements="note")
    assert dspy.settings.trace is global_trace and len(global_trace) == min(before + 4, dspy.settings.max_trace_size)

    captured = []
    with dspy.context(lm=lm, trace=captured):
        result = CreatorCriticIterator(retry=NO_WAIT)(requirements="note")
    # Four calls (creator, critic, iterator, critic) became one per role, in the order they were made.
    assert result.lm_calls == 4
    outputs = [next(name for name in ("draft", "improved_draft", "approved") if name in entry[2]) for entry in captured]
    assert outputs == ["draft", "improved_draft", "approved"]
    assert captured[-1][2].approved is True

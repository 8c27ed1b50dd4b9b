"""The code loop's choices (issue 9): defaults by model kind, the interface read before the first
attempt, several candidates per iteration, and the no-progress stop. Scripted LMs, real files."""

import dspy
import pytest

import loops
from loops import ConfigurationError, ExecuteValidateController, RetryPolicy, Workspace
from loops.lm import LlamaEngine, local_lm
from loops.patterns.code import (
    EMBEDDED_CODE_LOOP,
    END_OF_FENCED_CODE,
    HOSTED_CODE_LOOP,
    WORKED_EXAMPLES,
    Draw,
    code_loop_defaults,
    draws,
)
from loops.running.runtime import STOP_REASONS
from loops.signatures.results import ValidationResult
from tests.scripted import AsyncScriptedEngine, ScriptedEngine, calls, request_text, scripted_lm

NO_WAIT = RetryPolicy(backoff_s=0)
ODD_TESTS = "from solution import *\n\n\ndef test_odd():\n    assert Split([1, 2, 3]) == [1, 3]\n"
GOOD = "def Split(xs):\n    return [x for x in xs if x % 2]\n"
BAD = "def Split(xs):\n    return xs\n"


class LooksEmbedded(ScriptedEngine, LlamaEngine):
    """A scripted engine the loops take for the embedded model (`loops.lm.is_embedded`)."""


def embedded_lookalike(script):
    engine = LooksEmbedded(script)
    return dspy.LM("local/scripted", engine=engine, async_engine=AsyncScriptedEngine(engine), cache=False,
                   num_retries=0)


def scored(tmp_path, scores):
    """A validator that scores the file on disk: {code: tests passed of 3}; 3 passes."""
    def validate(test_command, iteration):
        passed = scores[(tmp_path / "solution.py").read_text()]
        return ValidationResult(exit_code=0 if passed == 3 else 1, passed=passed, failed=3 - passed)
    return validate


def temperatures(lm):
    return [request.config.temperature for request in lm.engine.requests]


# --- 1. defaults by model kind -----------------------------------------------------------------------


def test_the_defaults_follow_the_kind_of_model():
    assert code_loop_defaults(local_lm()) == EMBEDDED_CODE_LOOP  # the model loads lazily: nothing runs
    assert code_loop_defaults(scripted_lm([])) == HOSTED_CODE_LOOP
    assert (EMBEDDED_CODE_LOOP.analyst, EMBEDDED_CODE_LOOP.policy) == (False, "auto")
    assert EMBEDDED_CODE_LOOP.samples > 1 and EMBEDDED_CODE_LOOP.examples
    assert (HOSTED_CODE_LOOP.policy, HOSTED_CODE_LOOP.analyst, HOSTED_CODE_LOOP.samples,
            HOSTED_CODE_LOOP.examples) == ("repair", True, 1, False)


def test_the_module_settles_its_choices_at_call_time_from_the_lm_that_runs():
    module = ExecuteValidateController()
    embedded = {"policy": EMBEDDED_CODE_LOOP.policy, "samples": EMBEDDED_CODE_LOOP.samples, "examples": True,
                "penalty_variants": EMBEDDED_CODE_LOOP.penalty_variants,
                "draws": draws(EMBEDDED_CODE_LOOP.samples, True, EMBEDDED_CODE_LOOP.penalty_variants)}
    with dspy.context(lm=local_lm()):
        assert module.settings() == {**embedded, "analyst": False}
    with dspy.context(lm=scripted_lm([])):
        assert module.settings() == {"policy": "repair", "samples": 1, "examples": False, "penalty_variants": False,
                                     "analyst": True, "draws": (Draw(),)}
        module.executor.set_lm(local_lm())  # a role's own LM outranks the context's
        assert module.settings() == {**embedded, "analyst": True}


def test_every_choice_can_be_made_explicitly():
    module = ExecuteValidateController(policy="fresh", samples=2, examples=False, penalty_variants=False, analyst=True)
    with dspy.context(lm=local_lm()):
        assert module.settings() == {"policy": "fresh", "samples": 2, "examples": False, "penalty_variants": False,
                                     "analyst": True, "draws": (Draw(), Draw(sampled=True))}
    # Only the roles that may run are built: no analyst without it, none beside a custom controller.
    assert "analyst" not in dict(ExecuteValidateController(analyst=False).named_predictors())
    assert "analyst" not in dict(ExecuteValidateController(controller=loops.tests_controller).named_predictors())
    assert "analyst" in dict(ExecuteValidateController().named_predictors())
    with pytest.raises(ConfigurationError, match="samples"):
        ExecuteValidateController(samples=0)
    with pytest.raises(ConfigurationError, match="penalty_variants must be True, False or None"):
        ExecuteValidateController(penalty_variants="yes")
    with pytest.raises(ConfigurationError, match="analyst=True"):
        ExecuteValidateController(analyst=True, controller=loops.tests_controller)


def test_on_the_embedded_model_no_analyst_runs_and_fresh_samples_follow_a_repeat(tmp_path):
    (tmp_path / "test_solution.py").write_text(ODD_TESTS)
    lm = embedded_lookalike([BAD, BAD, GOOD])  # an analyst call would take an answer and break the script
    module = ExecuteValidateController(workspace=Workspace(tmp_path), samples=1, max_iterations=3,
                                       validator=scored(tmp_path, {BAD: 1, GOOD: 3}), retry=NO_WAIT)

    with dspy.context(lm=lm):
        result = module(initial_input="write Split", test_command="pytest")

    assert (result.stop_reason, result.success, result.iterations, calls(lm)) == ("stopped", True, 3, 3)
    assert [step.role for step in result.trace] == ["executor", "validator", "executor", "executor", "validator"]
    assert result.trace[2].note == "this code was tried before: not validated again"
    assert temperatures(lm)[2] == 0.7  # auto: the repeat made the next attempt a fresh sample
    assert len(result.histories["executor"].messages) == 1  # the fresh sample started over


# --- 2. interface first ------------------------------------------------------------------------------


def test_the_first_request_names_what_the_tests_call_and_a_wrong_name_is_aliased_at_once(tmp_path):
    (tmp_path / "test_solution.py").write_text(ODD_TESTS)
    lm = scripted_lm(["def odd_list(xs):\n    return [x for x in xs if x % 2]\n"])
    module = ExecuteValidateController(workspace=Workspace(tmp_path), max_iterations=1, retry=NO_WAIT)
    module.executor.set_lm(lm)
    module.analyst.set_lm(scripted_lm([]))

    result = module(initial_input="Write a function that keeps the odd numbers.",
                    test_command="python -m pytest -q -p no:cacheprovider test_solution.py")

    assert "The tests call `Split(list)`: define exactly these names in solution.py" in request_text(
        lm.engine.requests[0])
    assert (result.success, result.iterations) == (True, 1)
    assert result.final.notes["aliases"] == ["Split = odd_list"]


# --- 3. samples per iteration ------------------------------------------------------------------------


def test_n_candidates_are_drawn_all_traced_and_the_best_is_kept(tmp_path):
    one, two, none = "def Split(xs):\n    return 1\n", "def Split(xs):\n    return 2\n", "def Split(xs):\n    pass\n"
    lm = scripted_lm([one, two, none])
    module = ExecuteValidateController(workspace=Workspace(tmp_path), samples=3, max_iterations=1,
                                       validator=scored(tmp_path, {one: 1, two: 2, none: 0}),
                                       controller=loops.tests_controller, retry=NO_WAIT)

    with dspy.context(lm=lm):
        result = module(initial_input="write Split", test_command="pytest")

    assert [step.role for step in result.trace] == [
        "executor", "validator", "executor.2", "validator", "executor.3", "validator", "controller"]
    assert [step.outputs["result"].passed for step in result.trace if step.role == "validator"] == [1, 2, 0]
    assert result.final.content == two and result.best_attempt["result"].content == two
    assert (tmp_path / "solution.py").read_text() == two  # the workspace holds the best candidate
    assert (result.stop_reason, result.success, result.lm_calls) == ("max_iterations", False, 3)
    # The first is the policy's own attempt; the others are distinct rollouts at a temperature.
    assert temperatures(lm)[1:] == [0.7, 0.7]


def shown_examples(lm):
    """Per request, the numbers of the worked examples it shows."""
    return [tuple(number for number, (_, code) in enumerate(WORKED_EXAMPLES) if code.strip() in request_text(request))
            for request in lm.engine.requests]


def test_greedy_candidates_see_all_the_worked_examples_then_one_each_and_every_second_sample_them_all(tmp_path):
    codes = [f"def Split(xs):\n    return {n}\n" for n in range(7)]
    lm = scripted_lm(codes)
    module = ExecuteValidateController(workspace=Workspace(tmp_path), samples=7, examples=True, max_iterations=1,
                                       validator=scored(tmp_path, {**dict.fromkeys(codes, 0), codes[1]: 1}),
                                       controller=loops.tests_controller, retry=NO_WAIT)

    with dspy.context(lm=lm):
        result = module(initial_input="write Split", test_command="pytest")

    assert shown_examples(lm) == [(), (0, 1, 2), (2,), (0,), (1,), (), (0, 1, 2)]
    assert temperatures(lm) == [None] * 5 + [0.7, 0.7]  # another prompt is another candidate: greedy still
    assert result.final.content == codes[1]
    example_task, _ = WORKED_EXAMPLES[0]
    assert all(example_task not in str(step.inputs) for step in result.trace)  # demos are not the run's inputs
    assert "demos" not in result.histories["executor.2"].messages[0]


def test_on_the_embedded_model_greedy_answers_come_first_then_seeded_samples(tmp_path):
    codes = [f"def Split(xs):\n    return {n}\n" for n in range(9)]
    lm = embedded_lookalike(codes)
    module = ExecuteValidateController(workspace=Workspace(tmp_path), samples=9, max_iterations=1,
                                       validator=scored(tmp_path, dict.fromkeys(codes, 0)), retry=NO_WAIT)

    with dspy.context(lm=lm):
        module(initial_input="write Split", test_command="pytest")

    assert draws(9, examples=True, penalty_variants=True) == (
        Draw(), Draw(examples=(0, 1, 2)), Draw(frequency_penalty=0.0), Draw(examples=(2,)),
        Draw(frequency_penalty=0.2), Draw(examples=(0,)), Draw(examples=(1,)),
        Draw(sampled=True), Draw(examples=(0, 1, 2), sampled=True))
    assert draws(5, examples=True, penalty_variants=True) == draws(9, examples=True, penalty_variants=True)[:5]
    configs = [request.config for request in lm.engine.requests]
    assert temperatures(lm) == [None] * 7 + [0.7, 0.7]
    # Two are greedy without the engine's repeat penalty (a penalty of their own turns it off), and
    # they stop sooner: they pass in a short answer or not at all.
    assert [config.frequency_penalty for config in configs] == [None, None, 0.0, None, 0.2, None, None, None, None]
    assert [config.max_tokens for config in configs] == [None, None, 256, None, 256, None, None, None, None]
    assert [config.seed for config in configs] == [None] * 7 + [8, 9]  # a rerun draws the same samples
    assert shown_examples(lm) == [(), (0, 1, 2), (), (2,), (), (0,), (1,), (), (0, 1, 2)]


@pytest.mark.parametrize("adapter, stop", [("plain text", tuple(END_OF_FENCED_CODE)), (None, None)])
def test_a_plain_text_executor_stops_generating_at_its_codes_closing_fence(tmp_path, adapter, stop):
    answer = f"```python\n{GOOD}```\n\nThe function keeps the odd numbers." if adapter else {"code": GOOD, "notes": ""}
    lm = scripted_lm([answer])
    module = ExecuteValidateController(workspace=Workspace(tmp_path), max_iterations=1, retry=NO_WAIT,
                                       validator=scored(tmp_path, {GOOD: 3}),
                                       **({} if adapter else {"executor_adapter": None}))

    with dspy.context(lm=lm):
        result = module(initial_input="write Split", test_command="pytest")

    # Only the first fence's code is kept, so the prose after it need not be generated; an answer in the
    # context's adapter has fields after the code, and is not cut.
    assert result.success and (tmp_path / "solution.py").read_text() == GOOD
    assert [tuple(config.stop or ()) or None for config in
            (request.config for request in lm.engine.requests)] == [stop]


def test_without_examples_or_penalties_of_their_own_only_the_plain_greedy_candidate_is_greedy():
    assert draws(3) == (Draw(), Draw(sampled=True), Draw(sampled=True))
    assert draws(4, penalty_variants=True) == (
        Draw(), Draw(frequency_penalty=0.0), Draw(frequency_penalty=0.2), Draw(sampled=True))


def test_draws_given_are_the_candidates_in_their_order_a_sample_with_its_own_seed(tmp_path):
    codes = [f"def Split(xs):\n    return {n}\n" for n in range(3)]
    lm = embedded_lookalike(codes)
    given = [Draw(sampled=True, seed=42), Draw(examples=[2]), Draw(frequency_penalty=0.2)]  # a list, as loaded
    module = ExecuteValidateController(workspace=Workspace(tmp_path), draws=given, max_iterations=1,
                                       validator=scored(tmp_path, dict.fromkeys(codes, 0)), retry=NO_WAIT)

    with dspy.context(lm=lm):
        module(initial_input="write Split", test_command="pytest")
        assert module.settings()["samples"] == 3 and module.settings()["draws"][1] == Draw(examples=(2,))

    configs = [request.config for request in lm.engine.requests]
    assert [config.seed for config in configs] == [42, None, None]  # its own seed, wherever it stands
    assert [config.frequency_penalty for config in configs] == [None, None, 0.2]
    assert shown_examples(lm) == [(), (2,), ()]


def test_draws_are_checked_when_the_loop_is_built():
    with pytest.raises(ConfigurationError, match="draws must be a non-empty list of loops.patterns.code.Draw"):
        ExecuteValidateController(draws=[])
    with pytest.raises(ConfigurationError, match="draws must be a non-empty list"):
        ExecuteValidateController(draws=Draw())
    with pytest.raises(ConfigurationError, match="samples, examples would choose them too: drop one of them"):
        ExecuteValidateController(draws=[Draw()], samples=2, examples=True)
    with pytest.raises(ConfigurationError, match="a custom executor was given"):
        ExecuteValidateController(draws=[Draw()], executor=lambda current_input, iteration: {"solution.py": ""})
    with pytest.raises(ConfigurationError, match=r"Draw examples \(7,\): give indices of WORKED_EXAMPLES, 0 to 2"):
        Draw(examples=(7,))
    with pytest.raises(ConfigurationError, match="a greedy draw has none"):
        Draw(seed=3)


def test_with_draws_is_a_copy_that_draws_them_and_saves_them(tmp_path):
    module = ExecuteValidateController(samples=4, examples=True, max_iterations=2)
    chosen = module.with_draws([Draw(frequency_penalty=0.0), Draw()])

    assert (module.draws, module.samples) == (None, 4)  # the original is untouched
    assert (chosen.draws, chosen.samples, chosen.examples) == ((Draw(frequency_penalty=0.0), Draw()), None, None)
    chosen.save(tmp_path / "fix.json")
    loaded = loops.load(tmp_path / "fix.json")
    assert loaded.draws == chosen.draws and loaded.budget.max_iterations == 2


def test_an_executor_with_demos_of_its_own_is_shown_those_instead(tmp_path):
    lm = scripted_lm([BAD, BAD])
    module = ExecuteValidateController(workspace=Workspace(tmp_path), samples=2, examples=True, max_iterations=1,
                                       validator=scored(tmp_path, {BAD: 1}), controller=loops.tests_controller,
                                       retry=NO_WAIT)
    module.executor.demos = [dspy.Example(task="write Echo", target_file="solution.py", file_context="",
                                          code="def Echo(x):\n    return x\n", notes="")]

    with dspy.context(lm=lm):
        module(initial_input="write Split", test_command="pytest")

    assert all("def Echo(x)" in request_text(request) for request in lm.engine.requests)
    assert not any(WORKED_EXAMPLES[0][1].strip() in request_text(request) for request in lm.engine.requests)
    assert temperatures(lm) == [None, 0.7]  # the same prompt again: only a sample can differ


def test_the_first_passing_candidate_ends_the_iteration(tmp_path):
    lm = scripted_lm([BAD, GOOD, "never asked"])
    module = ExecuteValidateController(workspace=Workspace(tmp_path), samples=3, max_iterations=2,
                                       validator=scored(tmp_path, {BAD: 1, GOOD: 3}),
                                       controller=loops.tests_controller, retry=NO_WAIT)

    with dspy.context(lm=lm):
        result = module(initial_input="write Split", test_command="pytest")

    assert (result.stop_reason, result.success, result.iterations, calls(lm)) == ("stopped", True, 1, 2)
    assert result.final.content == GOOD


# --- 4. know when to stop ----------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "answers", "iterations"), [
    ("repair", [BAD, BAD], 2),  # a repair that repeats itself will go on repeating
    ("fresh", [BAD, BAD], 2),
    ("auto", [BAD, BAD, BAD], 3),  # the repeat turns auto to fresh samples; stuck once they repeat too
])
def test_an_iteration_with_nothing_new_stops_the_run_as_no_progress(tmp_path, policy, answers, iterations):
    lm = scripted_lm(answers)
    module = ExecuteValidateController(workspace=Workspace(tmp_path), policy=policy, samples=1, max_iterations=5,
                                       validator=scored(tmp_path, {BAD: 1}), controller=loops.tests_controller,
                                       retry=NO_WAIT)

    with dspy.context(lm=lm):
        result = module(initial_input="write Split", test_command="pytest")

    assert (result.stop_reason, result.iterations, calls(lm)) == ("no_progress", iterations, iterations)
    assert sum(step.role == "validator" for step in result.trace) == 1
    assert result.final.content == BAD and "no_progress" in STOP_REASONS
    assert "repeated code already tried" in result.warnings[-1]

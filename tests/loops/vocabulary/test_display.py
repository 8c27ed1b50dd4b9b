"""How a run shows itself (`loops.vocabulary.display`): the result's and a step's text and HTML, each kind of step's
outcome and judgement, a history folded, a DSL error with its caret."""

import dspy
import pytest

import loops
from loops import CreatorCriticIterator
from loops.running.runtime import LoopResult, Step
from loops.signatures.results import ValidationResult
from loops.vocabulary.display import dsl_error_html, history_html, step_judgement, step_outcome
from tests.loops.sample_runs import refine_run, verdict
from tests.scripted import scripted_lm

# --- the result -------------------------------------------------------------------------------------------


def test_a_loop_returns_a_loop_result_equal_to_the_plain_prediction():
    result = refine_run()

    assert type(result) is LoopResult and isinstance(result, dspy.Prediction)
    assert result == dspy.Prediction(**dict(result.items()))
    assert (result.final, result.success, result.stop_reason, result.final_draft) == (
        "second draft", True, "approved", "second draft")


def test_the_text_repr_is_a_summary_not_a_dump_of_the_trace():
    result = refine_run()

    text = repr(result)

    assert text == str(result)
    assert text.startswith("LoopResult(success=True, stop_reason='approved', iterations=2, lm_calls=4, tokens=60,")
    assert "trace=[4 steps: creator#1, critic#1, iterator#2, critic#2]" in text
    assert "histories={creator: 1, critic: 2, iterator: 1} turns" in text
    assert "A haiku about rain" not in text  # the steps' inputs stay on .trace
    assert len(text.splitlines()) == 4


def test_the_text_repr_names_warnings_and_the_error_and_cuts_a_long_final():
    long_draft = "word " * 100
    result = refine_run([{"reasoning": "r", "draft": long_draft}, verdict(1)], max_iterations=1)

    text = repr(result)

    assert "warnings=['stopped at max_iterations=1']" in text
    assert f"final={repr(long_draft)[:99]}…" in text


def test_the_html_shows_the_summary_the_trace_table_and_each_history_folded():
    result = refine_run()

    page = result._repr_html_()

    assert "<th>stop reason</th><td>approved</td>" in page
    assert "<th>LM calls</th><td>4</td>" in page
    assert "trace (4 role calls)" in page
    assert "<td>critic</td><td>1</td>" in page and "needs revision (2/3 criteria)" in page
    assert page.count("<details>") == 3
    assert "<b>critic</b>: 2 turn(s)" in page
    assert "first &lt;i&gt;draft" in page and "<i>draft" not in page  # the model's text is escaped


def test_the_html_lists_warnings_and_the_error_of_a_failed_run():
    lm = scripted_lm([{"reasoning": "r", "draft": "d"}, RuntimeError("critic crashed")])
    with dspy.context(lm=lm):
        result = CreatorCriticIterator(max_iterations=2, retry=loops.RetryPolicy(attempts=1))(requirements="x")

    page = result._repr_html_()

    assert result.stop_reason == "error"
    assert "<th>error</th>" in page and "critic crashed" in page
    assert "error: LMUnexpectedError: [scripted/test] critic crashed" in page


# --- one step ---------------------------------------------------------------------------------------------


def test_a_step_repr_is_one_short_line():
    step = refine_run().trace[1]

    assert repr(step) == "Step('critic', iteration=1, 0.0s, tokens=10/5, 'needs revision (2/3 criteria)')"


def test_a_step_html_shows_its_facts_inputs_and_outputs():
    step = refine_run().trace[0]

    page = step._repr_html_()

    assert "<td>creator</td>" in page and "<b>requirements</b>" in page and "first &lt;i&gt;draft" in page


def step(role, outputs=None, error=None, tokens=None):
    return Step(role, 1, {}, outputs, 0.5, tokens=tokens, error=error)


@pytest.mark.parametrize(("made", "outcome", "judgement"), [
    (step("critic", verdict(3)), "approved (3/3 criteria)", ("criteria met", 1.0)),
    (step("critic", verdict(1)), "needs revision (1/3 criteria)", ("criteria met", 1 / 3)),
    (step("critic", {"result": (False, "shorter")}), "needs revision", ("critic approved", 0.0)),
    (step("validator", {"result": ValidationResult(exit_code=1, passed=3, failed=1)}),
     "tests fail (exit 1, 3 passed, 1 failed)", ("tests passed", 0.75)),
    (step("validator", {"result": ValidationResult(exit_code=0)}), "tests pass (exit 0)", ("tests passed", 1.0)),
    (step("validator", {"result": False}), "tests fail (exit 1)", ("tests passed", 0.0)),
    (step("validator", {"result": 0}), "tests pass (exit 0)", ("tests passed", 1.0)),
    (step("evaluator", {"status": "PASS", "feedback": ""}), "PASS", ("evaluator passed", 1.0)),
    (step("evaluator", {"result": {"status": "FAIL"}}), "FAIL", ("evaluator passed", 0.0)),
    (step("controller", {"action": "continue", "next_input": "x"}), "decides: continue", None),
    (step("analyst", {"success": False, "analysis": "a", "next_input": "b"}), "judges: failure", None),
    (step("creator", {"reasoning": "r", "draft": "Rain on\n the roof"}), "wrote 'Rain on the roof'", None),
    (step("iterator", {"improved_draft": "x" * 60}), f"wrote '{'x' * 47}…'", None),
    (step("checks", {"held": 1, "total": 2, "passed": False, "floor": None,
                     "failed": [{"rule": "Use at most 3 words.", "message": "has 6 words; use at most 3"}]}),
     "1/2 checks: has 6 words; use at most 3", ("checks held", 0.5)),
    (step("critic", None, error="RoleFailed: the critic timed out"), "error: RoleFailed: the critic timed out", None),
    (step("validator", {"result": "not a test run"}), "ok", None),
])
def test_each_kind_of_step_has_an_outcome_and_a_judgement(made, outcome, judgement):
    assert step_outcome(made) == outcome
    assert step_judgement(made) == (None if judgement is None else pytest.approx(judgement))


def test_a_history_folds_into_numbered_turns():
    page = history_html("critic", dspy.History(messages=[{"current_draft": "a & b", "approved": False}]))

    assert page.startswith("<details><summary><b>critic</b>: 1 turn(s)</summary>")
    assert "<th>1</th>" in page and "a &amp; b" in page


# --- DSL errors -------------------------------------------------------------------------------------------


def test_a_dsl_error_shows_its_line_and_a_caret_in_html():
    import loops.sexp

    with pytest.raises(loops.sexp.DslError) as raised:
        loops.sexp.evaluate('(define x "a")\n(+ 1 x)')

    page = dsl_error_html(raised.value)

    assert "<b>DslTypeError</b> &lt;string&gt;:2:1: " in page
    assert "<pre>    (+ 1 x)\n    ^</pre>" in page

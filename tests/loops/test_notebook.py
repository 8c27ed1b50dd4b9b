"""What a notebook shows of a run: the result's and a step's displays, the trace as a DataFrame, the plot."""

import sys

import dspy
import pytest

import loops
from loops import CreatorCriticIterator, DirectorExecutorEvaluatorController, ExecuteValidateController
from loops.errors import MissingDependencyError
from loops.notebook import (
    TRACE_COLUMNS,
    dsl_error_html,
    history_html,
    plot_run,
    step_judgement,
    step_outcome,
    trace_frame,
)
from loops.runtime import LoopResult, Step
from loops.signatures.results import ValidationResult
from tests.scripted import Phase, scripted_lm

matplotlib = pytest.importorskip("matplotlib")
pytest.importorskip("pandas")
matplotlib.use("Agg")


def verdict(met, feedback="more detail"):
    """The built-in critic's answer with `met` of its three criteria passed (approved when all are)."""
    flags = [index < met for index in range(3)]
    return {"accuracy_passed": flags[0], "completeness_passed": flags[1], "quality_passed": flags[2],
            "feedback": "" if met == 3 else feedback, "approved": met == 3}


def refine_run(script=None, **call):
    lm = scripted_lm(script or [{"reasoning": "r", "draft": "first <draft>"}, verdict(2),
                                {"improved_draft": "second draft"}, verdict(3)])
    with dspy.context(lm=lm):
        return CreatorCriticIterator(max_iterations=3)(requirements="A haiku about rain", **call)


def director_run():
    statuses = Phase({"status": "FAIL", "feedback": "mention cats"}, {"status": "PASS", "feedback": ""})
    module = DirectorExecutorEvaluatorController(director=Phase("plan"), executor=Phase("a poem"),
                                                 evaluator=statuses, controller=Phase(("continue", "again"),
                                                                                      ("stop", "done")))
    return module(initial_input="A poem", max_iterations=3)


def code_run():
    module = ExecuteValidateController(
        executor=Phase("x = 1"), controller=Phase(("continue", "fix it"), ("stop", "done")),
        validator=Phase(ValidationResult(exit_code=1, passed=1, failed=3), ValidationResult(exit_code=0, passed=4,
                                                                                             failed=0)))
    return module(initial_input="task", test_command="check", max_iterations=2)


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
    assert "first &lt;draft&gt;" in page and "<draft>" not in page  # the model's text is escaped


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

    assert "<td>creator</td>" in page and "<b>requirements</b>" in page and "first &lt;draft&gt;" in page


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
    (step("creator", {"reasoning": "r", "draft": "d"}), "ok", None),
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


# --- the DataFrame ----------------------------------------------------------------------------------------


def test_a_trace_becomes_one_row_per_step():
    result = refine_run()

    frame = trace_frame(result)

    assert list(frame.columns) == list(TRACE_COLUMNS)
    assert list(frame["role"]) == ["creator", "critic", "iterator", "critic"]
    assert list(frame["iteration"]) == [1, 1, 2, 2]
    assert list(frame["input_tokens"]) == [10, 10, 10, 10] and frame["output_tokens"].sum() == 20
    assert frame["judged"].fillna("-").tolist() == ["-", "criteria met", "-", "criteria met"]
    assert frame["score"].tolist()[1] == pytest.approx(2 / 3) and frame["score"].tolist()[3] == 1.0


@pytest.mark.parametrize(("runs", "names"), [
    (lambda first, second: [first, second], [0, 1]),
    (lambda first, second: {"refine": first, "direct": second}, ["refine", "direct"]),
])
def test_many_runs_get_a_run_column(runs, names):
    first, second = refine_run(), director_run()

    frame = trace_frame(runs(first, second))

    assert list(frame.columns) == ["run", *TRACE_COLUMNS]
    assert list(frame["run"].unique()) == names
    assert len(frame) == len(first.trace) + len(second.trace)


def test_trace_frame_rejects_what_is_not_a_run():
    with pytest.raises(TypeError, match=r"a loop's result .* or a list or dict of them, got \[1, 2\]"):
        trace_frame([1, 2])


def test_the_helpers_say_which_extra_they_need(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # an import of pandas now fails

    with pytest.raises(MissingDependencyError, match=r"trace_frame needs pandas: pip install 'loops\[notebooks\]'"):
        trace_frame(refine_run())


# --- the plot ---------------------------------------------------------------------------------------------


def judged_lines(figure):
    axes = figure.axes[1]
    return {line.get_label(): list(zip(*line.get_data(), strict=True)) for line in axes.get_lines()}


def test_a_refine_run_plots_tokens_per_role_and_criteria_met_per_iteration():
    figure = plot_run(refine_run())

    tokens_axes, judged_axes = figure.axes
    assert tokens_axes.get_title() == "tokens per role"
    assert [label.get_text() for label in tokens_axes.get_xticklabels()] == ["creator", "critic", "iterator"]
    # input and output stacked: the critic ran twice, 10 + 5 tokens each time
    assert max(patch.get_y() + patch.get_height() for patch in tokens_axes.patches) == 30
    assert judged_axes.get_title() == "judgement per iteration"
    assert judged_lines(figure) == {"criteria met": [(1, pytest.approx(2 / 3)), (2, 1.0)]}
    assert figure._suptitle.get_text() == "stop reason: approved, success: True"


def test_a_code_run_plots_the_tests_passed_and_a_director_run_the_evaluator():
    assert judged_lines(plot_run(code_run())) == {"tests passed": [(1, 0.25), (2, 1.0)]}
    assert judged_lines(plot_run(director_run(), title="two goes")) == {"evaluator passed": [(1, 0.0), (2, 1.0)]}


def test_a_run_that_judges_nothing_plots_seconds_per_iteration():
    import loops.sexp

    program = loops.sexp.compile('(defatom user:name (params (thing string)) (instructions "Name {{thing}}.") '
                                 '(returns (name string))) (get-field (user:name (thing "a shop")) "name")')
    with dspy.context(lm=scripted_lm([{"name": "Fixie"}])):
        result = program()

    figure = plot_run(result)

    assert figure.axes[1].get_title() == "seconds per iteration (no step judged the work)"


def test_a_run_without_role_calls_still_plots():
    result = LoopResult(final=None, success=False, trace=[], histories={}, stop_reason="max_iterations")

    figure = plot_run(result)

    assert figure.axes[0].texts[0].get_text() == "no role calls"


# --- DSL errors -------------------------------------------------------------------------------------------


def test_a_dsl_error_shows_its_line_and_a_caret_in_html():
    import loops.sexp

    with pytest.raises(loops.sexp.DslError) as raised:
        loops.sexp.evaluate('(define x "a")\n(+ 1 x)')

    page = dsl_error_html(raised.value)

    assert "<b>DslTypeError</b> &lt;string&gt;:2:1: " in page
    assert "<pre>    (+ 1 x)\n    ^</pre>" in page


def test_a_dsl_loop_plots_each_atom_calls_tokens_once():
    import loops.sexp

    program = loops.sexp.compile('''
        (defatom user:write (params (topic string)) (instructions "Write about {{topic}}.") (returns (text string)))
        (creator-critic-loop
          (max-iterations 1)
          (requirements "rain")
          (creator (lambda (requirements context iteration) (get-field (user:write (topic requirements)) "text")))
          (critic (lambda (requirements draft iteration) #t))
          (iterator (lambda (requirements draft verdict iteration) draft)))''')
    with dspy.context(lm=scripted_lm([{"text": "drops"}])):
        result = program()

    tokens_axes = plot_run(result).axes[0]

    # The creator phase's step counts the atom's tokens too; the plot shows them once, under the atom.
    assert [step.role for step in result.trace] == ["user:write", "creator", "critic", "program"]
    assert [label.get_text() for label in tokens_axes.get_xticklabels()] == ["user:write"]
    assert max(patch.get_y() + patch.get_height() for patch in tokens_axes.patches) == 15

"""What a notebook shows of a run (`loops.notebook`): the trace as a DataFrame, the plot."""

import sys

import dspy
import pytest

import loops
from loops import CreatorCriticIterator
from loops.errors import MissingDependencyError
from loops.notebook import TRACE_COLUMNS, plot_run, plot_timeline, timeline_html, trace_frame
from loops.running.runtime import LoopResult
from tests.loops.sample_runs import code_run, director_run, refine_run, verdict
from tests.loops.test_long_loops import never_approving
from tests.scripted import Phase, scripted_lm

matplotlib = pytest.importorskip("matplotlib")
pytest.importorskip("pandas")
matplotlib.use("Agg")


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


def test_a_refine_run_plots_tokens_per_role_and_the_verdict_and_length_per_iteration():
    figure = plot_run(refine_run())

    tokens_axes, judged_axes, _ = figure.axes  # the third: the length written, twinned with the second
    assert tokens_axes.get_title() == "tokens per role"
    assert [label.get_text() for label in tokens_axes.get_xticklabels()] == ["creator", "critic", "iterator"]
    # input and output stacked: the critic ran twice, 10 + 5 tokens each time
    assert max(patch.get_y() + patch.get_height() for patch in tokens_axes.patches) == 30
    assert judged_axes.get_title() == "per iteration"
    assert judged_lines(figure) == {"verdict (1 passed)": [(1, 0.0), (2, 1.0)]}
    # the length of each iteration's draft, on its own axis: "first <i>draft</i>", then "second draft"
    assert judged_lines_of(figure.axes[2]) == {"length (chars)": [(1, 18), (2, 12)]}
    assert figure._suptitle.get_text() == "stop reason: approved, success: True"


def judged_lines_of(axes):
    return {line.get_label(): list(zip(*line.get_data(), strict=True)) for line in axes.get_lines()}


def test_a_code_run_plots_the_tests_verdict_and_a_director_run_the_evaluators():
    assert judged_lines(plot_run(code_run())) == {"verdict (1 passed)": [(1, 0.0), (2, 1.0)]}
    assert judged_lines(plot_run(director_run(), title="two goes")) == {"verdict (1 passed)": [(1, 0.0), (2, 1.0)]}


def test_the_plot_shows_the_verdict_the_loop_took_not_the_criteria_the_llm_ticked():
    # Notebook 01: a junk draft with every criterion ticked drew a line flat at 1.0 beside success False.
    approving = verdict(3, feedback="")
    result = refine_run([{"reasoning": "r", "draft": "]["}, approving, {"improved_draft": "Light on the rocks"},
                         verdict(2)], max_iterations=2)

    frame = trace_frame(result)

    assert result.success is False
    assert list(frame[frame["role"] == "critic"][["score", "verdict"]].itertuples(index=False, name=None)) == [
        (1.0, False), (pytest.approx(2 / 3), False)]
    assert judged_lines(plot_run(result)) == {"verdict (1 passed)": [(1, 0.0), (2, 0.0)]}


def test_checks_a_judging_step_reports_are_plotted_as_the_share_held():
    checks = Phase({"approved": False, "feedback": "too long", "checks": {"words": False, "mentions": True}},
                   {"approved": True, "feedback": "", "checks": [{"held": True}, {"held": True}]})
    result = CreatorCriticIterator(creator=Phase("a long draft"), critic=checks, iterator=Phase("short"))(
        requirements="r", max_iterations=2)

    assert judged_lines(plot_run(result)) == {"verdict (1 passed)": [(1, 0.0), (2, 1.0)],
                                              "checks held": [(1, 0.5), (2, 1.0)]}


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


# --- the timeline ---------------------------------------------------------------------------------------------


def test_the_timeline_draws_a_lane_per_role_and_a_bar_per_call_from_when_it_started():
    result = refine_run()

    figure = plot_timeline(result)

    lanes, totals = figure.axes[:2]
    assert [label.get_text() for label in lanes.get_yticklabels()] == ["creator", "critic", "iterator"]
    bars = [bar for container in lanes.containers for bar in container]
    assert len(bars) == len(result.trace)
    starts = [bar.get_x() for bar in bars]
    assert starts[0] == 0.0 and starts == sorted(starts)  # the calls in the order they started
    assert [text.get_text().strip() for text in lanes.texts] == ["wrote 'first <i>draft</i>'",
                                                                 "needs revision (2/3 criteria)",
                                                                 "wrote 'second draft'", "approved (3/3 criteria)"]
    assert max(totals.lines[0].get_ydata()) == result.tokens  # every call's tokens, added up as they end


def test_the_timeline_shows_a_pause_for_a_person_shortened_the_resume_and_the_limit_that_stopped_it(tmp_path):
    path, lm = tmp_path / "runs.db", scripted_lm(never_approving)
    loop = loops.CreatorCriticIterator(max_iterations=3, critic=loops.human(interactive=False))
    with dspy.context(lm=lm):
        loop(requirements="a slogan", checkpoint=path, run_id="r1")
    loops.answer(path, "r1", approved="false", feedback="Name the bottle")
    with dspy.context(lm=lm):
        resumed = loop(requirements="a slogan", checkpoint=path, run_id="r1", max_lm_calls=2)
    resumed.trace[0].started_at -= 3600  # the first process ran an hour before the person answered

    figure = plot_timeline(resumed)

    lanes = figure.axes[0]
    texts = [text.get_text().strip() for text in lanes.texts]
    assert "paused 1h 0m" in texts and "limit: lm_calls" in texts
    assert [label.get_text() for label in lanes.get_yticklabels()] == ["creator", "critic (a person)", "iterator"]
    assert lanes.get_xlim()[1] < 60  # the hour is drawn narrow, not to scale
    assert [entry.get_text() for entry in lanes.get_legend().get_texts()] == ["LLM role", "a person", "replayed"]


def test_a_run_paused_for_a_person_ends_its_timeline_saying_so_and_the_page_holds_it(tmp_path):
    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm):
        paused = loops.CreatorCriticIterator(critic=loops.human(interactive=False))(
            requirements="a slogan", checkpoint=tmp_path / "runs.db", run_id="r")

    assert "paused: waiting for the critic" in [text.get_text().strip() for text in plot_timeline(paused).axes[0].texts]
    page = timeline_html(paused)
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and page.count("<tr><td>") == 1

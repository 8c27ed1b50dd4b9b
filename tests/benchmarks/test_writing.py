import dspy
import pytest

from benchmarks.writing import _Margins, _summarize_margins, summarize
from loops.optimize.critic import CriticOf
from loops.optimize.writing import critic_examples


def test_the_summary_says_how_well_a_margin_separates_good_drafts_from_bad(capsys):
    records = [{"truth": truth, "margins": {"accuracy_passed": margin, "completeness_passed": -margin,
                                            "quality_passed": 0.0, "approved": None}}
               for truth, margin in [(True, 2.0), (True, 1.0), (False, 0.5), (False, -1.0)]]

    _summarize_margins(records)

    printed = capsys.readouterr().out
    assert "margin of accuracy_passed: ROC AUC 1.000; the best threshold agrees on 4/4 = 100.0%" in printed
    assert "margin of completeness_passed: ROC AUC 0.000" in printed
    assert "margin of quality_passed: ROC AUC 0.500" in printed
    assert "approved" not in printed  # never written: nothing to say


def test_the_summary_counts_the_final_texts_a_writing_role_wrote_word_for_word(tmp_path, capsys):
    import json

    records = [{"task_id": "a", "final": "Ride on.", "texts": ["A bike", "Ride on."], "passes": True},
               {"task_id": "b", "final": "Ride on", "texts": ["Ride on."], "passes": False},  # not what was written
               {"task_id": "c", "final": None, "texts": [], "passes": False}]
    out = tmp_path / "refine.jsonl"
    out.write_text("".join(json.dumps({"label": "refine/heldout/defaults", "key": record["task_id"], "lm_calls": 1,
                                       "seconds": 1.0, **record}) + "\n" for record in records))

    summarize([out])

    assert ("final text passes 1/3 = 33.3%; 3 LM calls; 3 s; final text is a writing role's own 2/3"
            in capsys.readouterr().out)


@pytest.mark.embedded
def test_the_margins_are_the_models_preference_where_it_wrote_each_verdict_field():
    margins = _Margins()
    example = next(example for example in critic_examples("train") if example.approved)  # junk is never judged
    with dspy.context(lm=margins.lm()):
        verdict = CriticOf()(requirements=example.requirements, draft=example.draft)
        read = margins.of_last()
        again = margins.of_last()  # the context now holds the last field: reading again re-feeds what differs

    assert set(read) == {"accuracy_passed", "completeness_passed", "quality_passed", "approved"}
    assert all(isinstance(margin, float) for margin in read.values()), read
    assert again == pytest.approx(read, abs=1e-3)
    # the sampled value follows the model's preference where no penalty or grammar overruled it
    if verdict.accuracy_passed is not None:
        assert (read["accuracy_passed"] > 0) == verdict.accuracy_passed


def test_an_optimizer_that_selects_on_a_validation_set_selects_on_train_tasks_it_does_not_fit_on():
    from benchmarks.writing import fit_and_selection
    from loops.optimize.writing import refine_examples

    train, heldout = refine_examples("train"), refine_examples("heldout")
    fit, selection = fit_and_selection(train, "gepa")
    assert len(selection) == len(train) // 3 and len(fit) + len(selection) == len(train)
    assert not {id(example) for example in fit} & {id(example) for example in selection}
    assert not {str(example.requirements) for example in selection} & {str(example.requirements) for example in heldout}
    assert fit_and_selection(train, "gepa") == (fit, selection)  # seeded: a rerun selects on the same tasks
    assert fit_and_selection(train, "bootstrap") == (train, train)

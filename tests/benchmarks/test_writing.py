import dspy
import pytest

from benchmarks.writing import _Margins, _summarize_margins
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

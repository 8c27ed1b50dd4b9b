"""DSPy optimizers see the loop modules as ordinary programs: the full loop runs under `forward`."""

import dspy
from dspy.teleprompt import BootstrapFewShot

from loops import CreatorCriticIterator, RetryPolicy
from tests.scripted import request_text, scripted_lm


def respond(engine, request):
    text = request_text(request)
    if "You are the CREATOR" in text:
        return {"reasoning": "plan", "draft": "first draft"}
    if "You are the ITERATOR" in text:
        return {"improved_draft": "second draft"}
    approved = "second draft" in text.split("[[ ## draft ## ]]")[-1]
    return {"accuracy_passed": True, "completeness_passed": True, "quality_passed": approved,
            "feedback": "" if approved else "polish it", "approved": approved}


def test_bootstrap_few_shot_collects_demos_for_every_role_from_full_loops():
    trainset = [dspy.Example(requirements=f"write note {n}").with_inputs("requirements") for n in range(3)]
    # One metric for any pattern: every prediction has `success`.
    optimizer = BootstrapFewShot(metric=lambda example, prediction, trace=None: prediction.success,
                                 max_bootstrapped_demos=2, max_labeled_demos=0)

    with dspy.context(lm=scripted_lm(respond)):
        compiled = optimizer.compile(CreatorCriticIterator(retry=RetryPolicy(backoff_s=0)), trainset=trainset)
        result = compiled(requirements="write note 9")

    demos = {name: predictor.demos for name, predictor in compiled.named_predictors()}
    assert {name: len(found) for name, found in demos.items()} == {"creator.predict": 2, "critic": 2, "iterator": 2}
    assert demos["iterator"][0]["improved_draft"] == "second draft"
    assert (result.approved, result.iterations) == (True, 2)  # creator + critic, then iterator + critic


def test_a_deep_copied_module_runs_like_the_original():
    # Optimizers deep-copy programs; a "not given" option must stay "not given" in the copy.
    original = CreatorCriticIterator(retry=RetryPolicy(backoff_s=0))
    copied = original.deepcopy()

    with dspy.context(lm=scripted_lm(respond)):
        results = [module(requirements="write a note") for module in (original, copied)]

    assert [(result.final, result.success, result.iterations) for result in results] == [("second draft", True, 2)] * 2
    assert copied.history_window is original.history_window

"""DSPy optimizers see the loop modules as ordinary programs: the full loop runs under `forward`."""

import dspy
from dspy.teleprompt import BootstrapFewShot

from loops import CreatorCriticIterator, RetryPolicy
from tests.scripted import request_text, scripted_lm


def respond(engine, request):
    text = request_text(request)
    if "You are the CREATOR" in text:
        return {"reasoning": "plan", "response": "approach", "draft": "first draft"}
    if "You are the ITERATOR" in text:
        return {"response": "revised", "improved_draft": "second draft"}
    approved = "second draft" in text.split("[[ ## current_draft ## ]]")[-1]
    return {"accuracy_completed": True, "completeness_completed": True, "quality_completed": approved,
            "response": "ok", "feedback": "" if approved else "polish it", "completed": approved}


def test_bootstrap_few_shot_collects_demos_for_every_role_from_full_loops():
    trainset = [dspy.Example(requirements=f"write note {n}").with_inputs("requirements") for n in range(3)]
    optimizer = BootstrapFewShot(metric=lambda example, prediction, trace=None: prediction.approved,
                                 max_bootstrapped_demos=2, max_labeled_demos=0)

    with dspy.context(lm=scripted_lm(respond)):
        compiled = optimizer.compile(CreatorCriticIterator(retry=RetryPolicy(backoff_s=0)), trainset=trainset)
        result = compiled(requirements="write note 9")

    demos = {name: predictor.demos for name, predictor in compiled.named_predictors()}
    assert {name: len(found) for name, found in demos.items()} == {"creator.predict": 2, "critic": 2, "iterator": 2}
    assert demos["iterator"][0]["improved_draft"] == "second draft"
    assert (result.approved, result.iterations) == (True, 1)

"""DSPy's own tests of `dspy.Refine` and `dspy.BestOfN` (tests/predict/test_refine.py and test_best_of_n.py of
DSPy's repository; the installed DSPy 3.4.1's refine.py and best_of_n.py are those the tests were written for),
ported to `loops.Refine` with the same scripted LM (`DummyLM`) and the same module.

`dspy.Refine(module, N, reward_fn, threshold)` is `loops.Refine(module, reward_fn=..., threshold=...,
max_iterations=N)`; `dspy.BestOfN(module, N, ...)` is the one-iteration case, `samples=N, max_iterations=1`.
One deliberate difference, asserted below: a program that fails for good ends the run gracefully
(`stop_reason="error"`, the cause on `result.error`, the work kept), as every loop of this library does, where
DSPy raises the program's exception; `strict=True` raises (a `RoleFailed`, caused by it).
"""

import dspy
import pytest
from dspy.predict.predict import Predict
from dspy.primitives.prediction import Prediction
from dspy.utils.dummies import DummyLM

from loops import Refine, RoleFailed

REFINE = {"max_iterations": 3}  # dspy.Refine(N=3)
BEST_OF_N = {"samples": 3, "max_iterations": 1}  # dspy.BestOfN(N=3)


class DummyModule(dspy.Module):
    def __init__(self, signature, forward_fn):
        super().__init__()
        self.predictor = Predict(signature)
        self.forward_fn = forward_fn

    def forward(self, **kwargs) -> Prediction:
        return self.forward_fn(self, **kwargs)


@pytest.fixture(autouse=True)
def _dummy_lm():
    lm = DummyLM([{"answer": "Brussels"}, {"answer": "City of Brussels"}, {"answer": "Brussels"}])
    with dspy.context(lm=lm):
        yield lm


@pytest.mark.parametrize("attempts", [REFINE, BEST_OF_N], ids=["refine", "best_of_n"])
def test_refine_forward_success_first_attempt(attempts):
    module_call_count = [0]

    def count_calls(self, **kwargs):
        module_call_count[0] += 1
        return self.predictor(**kwargs)

    reward_call_count = [0]

    def reward_fn(kwargs, pred: Prediction) -> float:
        reward_call_count[0] += 1
        # The answer should always be one word.
        return 1.0 if len(pred.answer) == 1 else 0.0

    predict = DummyModule("question -> answer", count_calls)

    refine = Refine(predict, reward_fn=reward_fn, threshold=1.0, **attempts)
    result = refine(question="What is the capital of Belgium?")

    assert result.answer == "Brussels", "Result should be `Brussels`"
    assert reward_call_count[0] > 0, "Reward function should have been called"
    assert module_call_count[0] == 3, (
        f"Module should have been called exactly 3 times, but was called {module_call_count[0]} times"
    )
    # Beyond DSPy's: of equal rewards the earlier attempt is kept, and the run says why it stopped.
    assert (result.final, result.success, result.stop_reason) == ("Brussels", False, "max_iterations")
    assert result.best_attempt["reward"] == 0.0


@pytest.mark.parametrize("attempts", [REFINE, BEST_OF_N], ids=["refine", "best_of_n"])
def test_refine_module_default_fail_count(attempts):
    def always_raise(self, **kwargs):
        raise ValueError("Deliberately failing")

    predict = DummyModule("question -> answer", always_raise)

    refine = Refine(predict, reward_fn=lambda _, __: 1.0, threshold=0.0, **attempts)
    # The deliberate difference: the run ends gracefully with the error, or raises it when strict.
    result = refine(question="What is the capital of Belgium?")
    assert result.stop_reason == "error" and isinstance(result.error.__cause__, ValueError)
    assert result.final is None and len(result.warnings) >= 3
    with pytest.raises(RoleFailed) as raised:
        Refine(predict, reward_fn=lambda _, __: 1.0, threshold=0.0, strict=True, **attempts)(
            question="What is the capital of Belgium?")
    assert isinstance(raised.value.__cause__, ValueError)


@pytest.mark.parametrize("attempts", [REFINE, BEST_OF_N], ids=["refine", "best_of_n"])
def test_refine_module_custom_fail_count(attempts):
    module_call_count = [0]

    def raise_on_second_call(self, **kwargs):
        if module_call_count[0] < 2:
            module_call_count[0] += 1
            raise ValueError("Deliberately failing")
        return self.predictor(**kwargs)

    predict = DummyModule("question -> answer", raise_on_second_call)

    refine = Refine(predict, reward_fn=lambda _, __: 1.0, threshold=0.0, fail_count=1, **attempts)
    result = refine(question="What is the capital of Belgium?")
    assert result.stop_reason == "error" and isinstance(result.error.__cause__, ValueError)
    assert module_call_count[0] == 2, (
        f"Module should have been called exactly 2 times, but was called {module_call_count[0]} times"
    )

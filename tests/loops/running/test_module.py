"""`loops.running.module.Phase`: a pattern's phase as chosen when the pattern is built, which its steps call the same
way whether it is the built-in LLM role or the user's phase."""

from __future__ import annotations

from typing import Any

import dspy
import pytest

from loops.running.module import LoopModule, Phase
from loops.running.runtime import RoleCalls, Run
from loops.vocabulary.contracts import MISSING, PhaseContract
from loops.vocabulary.input_contracts import InputContract
from tests.scripted import calls, scripted_lm


class Writing(LoopModule):
    """A pattern of one phase, written once: the writer writes on a topic; its step never asks who writes."""

    contracts = {"writer": PhaseContract("writer", ("topic", "iteration"), "the text", value="text")}
    input_contract = InputContract(open=True)

    def __init__(self, writer: Any = None, **options: Any):
        super().__init__(max_iterations=1, **options)
        self._set_phase("writer", writer, lambda: dspy.Predict("topic -> text"))

    def forward(self, topic: Any = MISSING, **limits: Any) -> dspy.Prediction:
        return self._forward(limits, **self._checked_inputs(limits, {"topic": topic}))

    async def aforward(self, topic: Any = MISSING, **limits: Any) -> dspy.Prediction:
        return await self._aforward(limits, **self._checked_inputs(limits, {"topic": topic}))

    def _loop(self, run: Run, topic: Any) -> RoleCalls:
        run.next_iteration()
        text, prediction = yield from self._phases["writer"].ask(run, "text", {"topic": topic}, topic=topic,
                                                                 iteration=run.iteration)
        return run.finish("completed", final=text, success=prediction is not None)


def test_the_built_in_role_answers_in_one_llm_call_read_at_its_field():
    lm = scripted_lm([{"text": "Leaves fall."}])
    writing = Writing()
    with dspy.context(lm=lm):
        result = writing(topic="autumn")
    assert writing._phases == {"writer": Phase("writer", builtin=True)}
    assert (result.final, result.success, calls(lm)) == ("Leaves fall.", True, 1)
    assert [step.role for step in result.trace] == ["writer"] and result.trace[0].lm_calls == 1


def test_the_users_phase_is_called_with_its_contracts_arguments_and_no_prediction():
    seen = []

    def writer(topic: str, iteration: int) -> str:
        seen.append((topic, iteration))
        return topic.upper()

    lm = scripted_lm([])
    writing = Writing(writer)
    with dspy.context(lm=lm):
        result = writing(topic="autumn")
    assert writing._phases == {"writer": Phase("writer", builtin=False)}
    assert (result.final, result.success, calls(lm), seen) == ("AUTUMN", False, 0, [("autumn", 1)])
    assert [step.role for step in result.trace] == ["writer"]


@pytest.mark.parametrize("builtin", [True, False])
def test_call_and_turn_give_the_built_in_steps_value_or_the_phases(builtin):
    phase = Phase("writer", builtin)

    def built_in() -> RoleCalls:
        return "built in", "its prediction"
        yield

    writing = Writing(None if builtin else (lambda topic, iteration: f"{topic} by the user"))

    def loop(run: Run, topic: str) -> RoleCalls:
        run.next_iteration()
        value = yield from phase.call(run, lambda: _value(built_in()), topic=topic, iteration=1)
        pair = yield from phase.turn(run, built_in, topic=topic, iteration=1)
        return run.finish("completed", final=(value, pair))

    writing._loop = loop
    with dspy.context(lm=scripted_lm([])):
        result = writing(topic="autumn")
    expected = ("built in", ("built in", "its prediction")) if builtin else \
        ("autumn by the user", ("autumn by the user", None))
    assert result.final == expected


def _value(pair: RoleCalls) -> RoleCalls:
    value, _ = yield from pair
    return value


def test_either_is_what_the_pattern_takes_with_each_kind_of_phase():
    assert Phase("creator", True).either("draws", "one plain draw") == "draws"
    assert Phase("creator", False).either("draws", "one plain draw") == "one plain draw"

"""Refine any DSPy program: a superset of `dspy.Refine` and `dspy.BestOfN`, on the one loop runtime.

`Refine(program, ...)` wraps any `dspy.Module` (or a signature, run by a `dspy.Predict`) and judges one output field of
its prediction (`field=`, by default the last one) by the one verdict rule (`loops.vocabulary.contracts.judge`): the
user's checks first (`loops.vocabulary.checks`), then a critic (the built-in LLM critic, a phase of one's own, a
person), then a reward function against `threshold=`. An attempt that is not approved is run again with the feedback
given as DSPy's `Refine` gives its advice: an extra `hint_` input added to each of the program's predictors by the
adapter, so the program needs no new input field. The hint is the verdict's own feedback (the failed rules, the critic's
words, the score and the score it must reach), or, with `feedback="llm"`, the advice of the feedback role for each
predictor (`loops.signatures.FeedbackSignature`, a named predictor an optimizer tunes).

`samples=n` draws n candidates per iteration (the first as the program answers, the others sampled at a
temperature with their own rollout ids), the first approved taken: `max_iterations=1` is `BestOfN`.
The best attempt is ranked by `loops.vocabulary.contracts.attempt_rank` (checks held, then the critic, then the
reward; of equal ones the earlier). Every guarantee of the runtime holds: the budget, a graceful stop
with the best attempt so far, the trace, checkpoint and resume, `forward` and `aforward`, save and load.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

import dspy

from loops.errors import ConfigurationError, RoleFailed
from loops.patterns.code.draws import Draw
from loops.recording.checkpoint import stable_hash
from loops.running.module import LoopModule
from loops.running.roles import lm_of
from loops.running.runtime import RoleCalls, Run
from loops.signatures.creator_critic import CriticSignature
from loops.signatures.refine import FeedbackSignature
from loops.vocabulary import profile
from loops.vocabulary.budget import Budget
from loops.vocabulary.checks import Check, as_checks, checks_of_call, stated_rules
from loops.vocabulary.contracts import (
    CREATOR_CRITIC,
    InputContract,
    Verdict,
    attempt_rank,
    checked_threshold,
    contracts,
    judge,
)

__all__ = ["REFINE", "Refine"]

REFINE = contracts(critic=(CREATOR_CRITIC["critic"].params, CREATOR_CRITIC["critic"].returns))
"""Refine's pluggable phase: a critic of the judged field's value (`draft`), given the program's inputs as text
(`requirements`), as the Creator–Critic–Iterator's critic is."""

_HINT = dspy.InputField(desc="A hint to the module from an earlier run")


class Refine(LoopModule):
    """Run `program` until its `field` is approved, or keep the best of its attempts.

    - `program`: any `dspy.Module` (a `Predict`, a `ChainOfThought`, a module of several predictors), or a
      signature (`"question -> answer"`), run by a `dspy.Predict`. It is called as DSPy calls it, by keyword
      with the call's inputs (`refine(question=...)`), and the result carries its output fields
      (`result.answer`) beside the loop's (`final`: the judged field's value, `success`, `trace`, ...).
    - `field`: the output field judged; by default the prediction's last (a ChainOfThought's answer).
    - `checks=[...]` (callables of the field's value, or short forms such as `"max-words=40"`): first, free.
    - `critic`: `"llm"` (the built-in critic), a phase `critic(requirements, draft, iteration)` returning a
      verdict or a score (`loops.vocabulary.contracts.CREATOR_CRITIC`), or `loops.human()`; asked once the checks hold.
    - `reward_fn(inputs, prediction) -> float` (DSPy's) and `threshold=`: the reward approves at or above it.
    - `feedback="llm"`: the feedback role advises each predictor; by default the verdict's feedback is the hint.
    - `samples=n`: candidates per iteration, the first approved taken; `fail_count`: attempts that may raise
      before the run stops with the error (DSPy's; by default any number: the run stops with the error only
      when no attempt answered at all).
    """

    contracts = REFINE
    input_contract = InputContract(open=True)  # the program's inputs, whatever their names

    def __init__(self, program: Any, field: str | None = None, *, checks: Any = None,
                 reward_fn: Callable[[dict[str, Any], dspy.Prediction], float] | None = None,
                 threshold: float | None = None, critic: Any = None, feedback: str | None = None, samples: int = 1,
                 fail_count: int | None = None, max_iterations: int | None = None, **options: Any):
        super().__init__(max_iterations=max_iterations, **options)
        self.program = _program(program)
        self.field = field
        self.checks = as_checks(checks)
        if reward_fn is not None and not callable(reward_fn):
            raise ConfigurationError(f"reward_fn must be a function (inputs, prediction) -> float, got {reward_fn!r}")
        self.reward_fn = reward_fn
        self.threshold = checked_threshold(threshold)
        for name, count, least in (("samples", samples, 1), ("fail_count", fail_count, 0)):
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < least):
                raise ConfigurationError(f"{name} must be an int >= {least}, got {count!r}")
        self.samples = samples
        self.fail_count = fail_count
        if feedback not in (None, "llm"):
            raise ConfigurationError(f"feedback must be None (the verdict's feedback is the hint) or 'llm' (the "
                                     f"feedback role advises each predictor), got {feedback!r}")
        # The built-in critic's signature is asked of the LLM, or of a person in its place (`loops.human()`).
        if critic is not None:
            self._set_phase("critic", None if critic == "llm" else critic, lambda: dspy.Predict(CriticSignature))
        if feedback == "llm":
            self._set_phase("feedback", None, lambda: dspy.Predict(FeedbackSignature))
        self._check_judges(critic)
        self._check_field()

    def fingerprint(self) -> str:
        """The loop's, and the wrapped program's predictors (their names, instructions and fields): a checkpoint
        resumes with the program that recorded it."""
        predictors = [(name, predictor.signature.instructions, tuple(predictor.signature.fields))
                      for name, predictor in self.program.named_predictors()]
        return f"{super().fingerprint()}:{stable_hash(predictors)}"

    def __repr__(self) -> str:
        """The loop's roles, then the wrapped program's predictors, each by its name and signature."""
        lines = [f"  program = {type(self.program).__name__}"]
        lines += [f"    {name} = {predictor.signature.signature}"
                  for name, predictor in self.program.named_predictors()]
        return "\n".join([super().__repr__(), *lines])

    def _check_judges(self, critic: Any) -> None:
        if critic is None and self.reward_fn is None and not self.checks:
            raise ConfigurationError("nothing judges the program's attempts: give checks=[...], a critic ('llm', a "
                                     "phase, loops.human()) or a reward_fn with a threshold")
        if self.reward_fn is not None and self.threshold is None and critic is None and not self.checks:
            raise ConfigurationError("reward_fn alone approves nothing: give threshold= (the reward that approves)")

    def _check_field(self) -> None:
        """A judged field the program cannot answer is a mistake said now: the outputs of its predictors are
        known, unless its forward builds its prediction itself."""
        outputs = [name for _, predictor in self.program.named_predictors()
                   for name in predictor.signature.output_fields]
        if self.field is not None and isinstance(self.program, dspy.Predict) and self.field not in outputs:
            raise ConfigurationError(f"field={self.field!r} is no output of the program ({', '.join(outputs)}): "
                                     "name the output field to judge")

    def forward(self, checks: Any = None, **inputs: Any) -> dspy.Prediction:
        limits, inputs, checks = self._split(inputs, checks)
        return self._forward(limits, inputs=inputs, checks=checks)

    async def aforward(self, checks: Any = None, **inputs: Any) -> dspy.Prediction:
        limits, inputs, checks = self._split(inputs, checks)
        return await self._aforward(limits, inputs=inputs, checks=checks)

    def _split(self, given: dict[str, Any], checks: Any) -> tuple[dict[str, Any], dict[str, Any], tuple[Check, ...]]:
        """The call's budget options, the program's inputs (checked: `input_contract`), and the run's checks (the
        loop's, then the call's)."""
        options = self._call_options()
        limits = {name: value for name, value in given.items() if name in options}
        inputs = {name: value for name, value in given.items() if name not in options}
        if not inputs:
            raise ConfigurationError(f"give the program's inputs by keyword, as to the program itself (e.g. "
                                     f"{type(self).__name__}(...)(question=...)); got none")
        return limits, self._checked_inputs(limits, inputs), checks_of_call(self.checks, checks)

    def _roles_that_may_run(self, budget: Budget) -> list[str]:
        # The feedback role advises only between iterations.
        return [role for role in super()._roles_that_may_run(budget)
                if role != "feedback" or budget.allows_iteration(2)]

    def _loop(self, run: Run, inputs: dict[str, Any], checks: tuple[Check, ...]) -> RoleCalls:
        asked = stated_rules(checks, _shown(inputs)) if checks else _shown(inputs)  # what a critic reads
        attempts = _Attempts()
        hint: Any = None
        try:
            while run.next_iteration():
                for number in range(self.samples):
                    attempt = yield from self._attempt(run, inputs, hint, number, attempts)
                    if attempt is None:
                        continue
                    verdict = yield from self._judge(run, inputs, asked, checks, attempt)
                    attempts.offer(run, attempt, verdict)
                    if verdict.approved:
                        return run.finish("approved")
                if attempts.leader is None:
                    continue
                if run.budget.allows_iteration(run.iteration + 1):
                    hint = yield from self._hint(run, inputs, *attempts.leader)
            if attempts.leader is None and attempts.failure is not None:
                raise attempts.failure
            return run.finish("max_iterations")
        finally:
            attempts.restore_trace()

    # One attempt: the program run with the hint ------------------------------------------------------

    def _attempt(self, run: Run, inputs: dict[str, Any], hint: Any, number: int, attempts: _Attempts) -> RoleCalls:
        """The program's prediction on `inputs`, with the hint and (past the first candidate) sampled; None when it
        failed and more attempts may fail (`fail_count`)."""
        attempts.made += 1
        decoding = Draw(sampled=True).decoding(attempts.made) if number else {}
        adapter = _Hinted(self._adapter(), hint, decoding, self.program)
        call = _Call(self.program)
        shown = {**inputs, "hint": hint} if hint else inputs
        try:
            prediction = yield from run.invoke("program" if number == 0 else f"program.{number + 1}", call, shown,
                                               kwargs=inputs, adapter=adapter)
        except RoleFailed as failure:
            attempts.failures += 1
            attempts.failure = failure
            if self.fail_count is not None and attempts.failures > self.fail_count:
                raise
            run.warn(f"iteration {run.iteration}: {failure}; the next attempt goes on")
            return None
        if not isinstance(prediction, dspy.Prediction):
            raise ConfigurationError(f"the program returned {type(prediction).__name__}, not a dspy.Prediction: "
                                     "Refine judges a field of a prediction")
        field = self.field or next(reversed(list(prediction.keys())), None)
        if field not in prediction:
            raise ConfigurationError(f"field={field!r} is not in the program's prediction "
                                     f"({', '.join(prediction.keys())}): name the output field to judge")
        return _Candidate(prediction, field, attempts.made, run.iteration, call.trace)

    def _adapter(self) -> Any:
        """The adapter the program runs under, and the hint is added through: the context's, else the one its
        model needs (its profile's: the embedded model's compact JSON), else DSPy's default."""
        return dspy.settings.adapter or profile.adapter_for(lm_of(self.program)) or dspy.ChatAdapter()

    # Judging: the one verdict rule -----------------------------------------------------------------

    def _judge(self, run: Run, inputs: dict[str, Any], asked: str, checks: tuple[Check, ...],
               attempt: _Candidate) -> RoleCalls:
        value = attempt.value
        floor = _floor(value, attempt.field)
        report = run.check(checks, value, floor=floor) if checks or floor else None
        critic = None
        if hasattr(self, "critic") and (report is None or report.passed):
            critic = yield from self._phases["critic"].call(
                run, lambda: run.call("critic", requirements=asked, draft=str(value)), requirements=asked, draft=value,
                iteration=run.iteration)
        reward = None
        if self.reward_fn is not None:
            reward = yield from run.invoke("reward", _reward, {"value": value},
                                           args=(self.reward_fn, inputs, attempt.prediction))
        return judge(report, critic, reward, threshold=self.threshold)

    # Feedback: the hint of the next attempt --------------------------------------------------------

    def _hint(self, run: Run, inputs: dict[str, Any], attempt: _Candidate, verdict: Verdict) -> RoleCalls:
        """What the next attempt is told: the feedback role's advice for each predictor, or the verdict's feedback
        on the best attempt so far, with what it answered."""
        said = verdict.feedback or "It was not accepted."
        if not hasattr(self, "feedback"):
            return f"An earlier answer ({attempt.field}: {_clip(attempt.value)}) was not accepted: {said}"
        names = [name for name, _ in self.program.named_predictors()]
        advice = yield from run.call("feedback", program_inputs=_shown(inputs),
                                     program_outputs=_shown(dict(attempt.prediction.items())), judgment=said,
                                     module_names=names)
        return advice.advice if isinstance(advice.advice, Mapping) else str(advice.advice)


@dataclasses.dataclass(frozen=True)
class _Candidate:
    """One answered attempt: the program's prediction, the judged field, its order among the run's attempts, and
    the DSPy trace its predictors left (for an optimizer: the best attempt's is kept)."""

    prediction: dspy.Prediction
    field: str
    order: int
    iteration: int
    trace: list[Any] | None

    @property
    def value(self) -> Any:
        return self.prediction[self.field]


class _Attempts:
    """A run's attempts so far: how many were made and failed, the best one, and the one the next hint is about
    (the best so far, of equal ones the latest)."""

    def __init__(self) -> None:
        self.made = self.failures = 0
        self.failure: RoleFailed | None = None
        self.best: _Candidate | None = None
        self.leader: tuple[_Candidate, Verdict] | None = None
        self.trace = dspy.settings.trace

    def offer(self, run: Run, attempt: _Candidate, verdict: Verdict) -> None:
        rank = attempt_rank(verdict, attempt.order)
        record = {"iteration": attempt.iteration, "draft": attempt.value, "verdict": verdict.critic,
                  "reward": verdict.reward, "prediction": attempt.prediction}
        if verdict.checks is not None and verdict.checks.results:
            record["checks"] = verdict.checks
        if run.best_score is None or rank >= run.best_score:
            self.best = attempt
        run.offer_candidate(rank, **{**dict(attempt.prediction.items()), "final": attempt.value,
                                     "success": verdict.approved, "prediction": attempt.prediction,
                                     "best_attempt": record})
        if self.leader is None or verdict.rank >= self.leader[1].rank:
            self.leader = (attempt, verdict)

    def restore_trace(self) -> None:
        """An optimizer's trace gets the best attempt's predictor calls alone, as DSPy's `Refine` leaves it."""
        if self.trace is not None and self.best is not None and self.best.trace:
            self.trace.extend(self.best.trace)


class _Call(dspy.Module):
    """One run of the program, keeping the predictor calls it leaves in an optimizer's trace apart, so that only
    the best attempt's reach it (`_Attempts.restore_trace`). Made per attempt: never stored on the loop."""

    def __init__(self, program: dspy.Module):
        super().__init__()
        self.program = program
        self.trace: list[Any] | None = None

    def forward(self, **inputs: Any) -> Any:
        if dspy.settings.trace is None:
            return self.program(**inputs)
        with dspy.context(trace=[]):
            prediction = self.program(**inputs)
            self.trace = list(dspy.settings.trace)
        return prediction

    async def aforward(self, **inputs: Any) -> Any:
        if dspy.settings.trace is None:
            return await self.program.acall(**inputs)
        with dspy.context(trace=[]):
            prediction = await self.program.acall(**inputs)
            self.trace = list(dspy.settings.trace)
        return prediction


class _Hinted:
    """The adapter an attempt runs under, as DSPy's `Refine` wraps its adapter: each predictor's signature gets
    the `hint_` input (the one hint, or the advice for that predictor's name) and a sampled candidate its
    decoding (a temperature, a rollout id), so the program itself needs no new input field."""

    def __init__(self, adapter: Any, hint: Any, decoding: dict[str, Any], program: dspy.Module):
        self.adapter, self.hint, self.decoding = adapter, hint, decoding
        self.names = {predictor.signature: name for name, predictor in program.named_predictors()}

    def _prepared(self, lm_kwargs: dict[str, Any], signature: Any, inputs: dict[str, Any]) -> tuple[Any, ...]:
        hint = self.hint.get(self.names.get(signature), "N/A") if isinstance(self.hint, Mapping) else self.hint
        if hint:
            signature, inputs = signature.append("hint_", _HINT), {**inputs, "hint_": hint}
        return {**lm_kwargs, **self.decoding}, signature, inputs

    def __call__(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: Any, inputs: dict[str, Any]) -> Any:
        lm_kwargs, signature, inputs = self._prepared(lm_kwargs, signature, inputs)
        return self.adapter(lm, lm_kwargs=lm_kwargs, signature=signature, demos=demos, inputs=inputs)

    async def acall(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: Any,
                    inputs: dict[str, Any]) -> Any:
        lm_kwargs, signature, inputs = self._prepared(lm_kwargs, signature, inputs)
        return await self.adapter.acall(lm, lm_kwargs=lm_kwargs, signature=signature, demos=demos, inputs=inputs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.adapter, name)


def _program(program: Any) -> dspy.Module:
    if isinstance(program, dspy.Module):
        return program
    if isinstance(program, str) or (isinstance(program, type) and issubclass(program, dspy.Signature)):
        return dspy.Predict(program)
    raise ConfigurationError(f"Refine wraps a dspy.Module or a signature ('question -> answer'), got {program!r:.100}")


def _floor(value: Any, field: str) -> str | None:
    """Why an answer is no answer, whatever judges it: nothing at all, or the adapter's template copied
    (`{answer}`, which a small model writes back). Any other answer, a number's digits included, is judged."""
    text = "" if value is None else str(value).strip()
    if not text:
        return "empty"
    if text in (f"{{{field}}}", f"[[ ## {field} ## ]]"):
        return f"a placeholder ({text!r}), not an answer"
    return None


def _reward(reward_fn: Callable[..., Any], inputs: dict[str, Any], prediction: dspy.Prediction) -> float:
    reward = reward_fn(inputs, prediction)
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise ConfigurationError(f"reward_fn returned {reward!r:.100}, not a number")
    return float(reward)


def _shown(values: Mapping[str, Any]) -> str:
    """The program's inputs (or outputs) as text, one `name: value` a line."""
    return "\n".join(f"{name}: {value if isinstance(value, str) else json.dumps(value, default=str)}"
                     for name, value in values.items())


def _clip(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")

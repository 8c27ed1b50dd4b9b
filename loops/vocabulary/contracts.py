"""Phase contracts, written once as data: what each pluggable phase of each pattern is called with,
what it returns, and the one place where what a phase returned is read by the loop.

A plain callable phase gets its contract's arguments positionally, in the table's order, the iteration
number (1-based) always last, so parameter names are free. A `dspy.Module` phase is called as DSPy users
write one: by keyword, with the contract's arguments its signature (or its `forward`) names
(`dspy.Predict("requirements, context -> draft")` gets `requirements` and `context`), and its
prediction's output field is its value (the contract's `value`, else the last one): a creator's
`final` is text when its draft is text. A module checks each phase it is given against its table when
it is built; the DSL checks its lambdas against the same tables. A custom phase's value passes to the
next phase unchanged; the readers below only say what the *loop* (and the built-in phases) need of it:
whether a verdict approves, whether a validation or an evaluation passed, which files an attempt
wrote, what a controller decided.

What a judged attempt comes to is one rule, `judge`: a user's checks first (`loops.vocabulary.checks`), then the
critic's verdict, then a numeric reward; and one ranking of attempts, `attempt_rank`. Every pattern, the DSL and the CLI
go through them.

A phase with no LLM role behind it (the Execute–Validate validator and controller) also says what a
person answers in its place (`answers`, `ask`; `loops.running.person`): a person in an LLM role's place answers
with that role's signature instead.

What a pattern's *call* takes is a contract too (`InputContract`: `CREATOR_CRITIC_INPUTS`, ...): each
input, whether it is required, and what the built-in phases that read it need it to be. A module checks
every call against it before any LM call, and `loops.batch` checks every example of a batch against it
before the first one runs (`LoopModule.input_problems`). Those contracts are `loops.vocabulary.input_contracts`',
re-exported here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import dspy

from loops.errors import ConfigurationError, ContractError, DecisionError
from loops.signatures.creator_critic import CRITERIA
from loops.signatures.results import ControllerDecision, TaskResult, ValidationResult
from loops.vocabulary.checks import CheckReport
from loops.vocabulary.input_contracts import (
    CREATOR_CRITIC_INPUTS,
    DIRECTOR_INPUTS,
    EXECUTE_VALIDATE_INPUTS,
    MISSING,
    VALUE_KINDS,
    Input,
    InputContract,
    as_text,
    first_non_text,
    not_text,
    short_repr,
)

__all__ = [
    "CREATOR_CRITIC",
    "CREATOR_CRITIC_INPUTS",
    "DECISION",
    "DIRECTOR",
    "DIRECTOR_INPUTS",
    "EXECUTE_VALIDATE",
    "EXECUTE_VALIDATE_INPUTS",
    "MISSING",
    "VALUE_KINDS",
    "Input",
    "InputContract",
    "UNJUDGED",
    "PhaseContract",
    "Verdict",
    "as_validation",
    "attempt_rank",
    "checked_threshold",
    "contracts",
    "decision",
    "field_of",
    "files_of",
    "as_text",
    "first_non_text",
    "not_text",
    "judge",
    "outcome_passed",
    "short_repr",
    "verdict_approved",
    "verdict_feedback",
    "verdict_score",
]

DECISION = "a decision: ControllerDecision, or ('continue', next_input) / ('stop', final_value) as a tuple or list"
_DECISION_FORMS = ("ControllerDecision, a 2-element list/tuple ('continue' | 'stop', value), "
                   "or a dict {'action': 'continue' | 'stop', 'value': ...}")


@dataclass(frozen=True)
class PhaseContract:
    """One role's contract: `role(*params)` returns what `returns` says. `answers` are the fields (name: (type,
    description)) a person answers with in this phase's place, `ask` what they are asked (`loops.running.person`).
    `value` names the output field of a module phase's prediction that is the phase's value (the draft a
    creator wrote); None when the loop reads the whole prediction (a critic's verdict)."""

    role: str
    params: tuple[str, ...]
    returns: str
    answers: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    ask: str = ""
    value: str | None = None

    @property
    def signature(self) -> str:
        return f"{self.role}({', '.join(self.params)})"

    def check(self, phase: Any) -> None:
        """Raise `ContractError` unless `phase` can be called with this contract's arguments."""
        if not callable(phase):
            raise ContractError(f"the {self.role} phase must be callable as {self.signature}, got {phase!r:.120}")
        self.keywords(phase)

    def keywords(self, phase: Any) -> tuple[str, ...] | None:
        """How `phase` is called: the names of the contract's arguments it takes by keyword (a `dspy.Module`, as
        DSPy users write one: `dspy.Predict("requirements, context -> draft")`, or a `forward` whose parameters
        are named as the contract's), or None for every argument positionally, in the table's order (a plain
        callable, whose parameter names are free). Raises `ContractError` when it fits neither way."""
        module = isinstance(phase, dspy.Module)
        # A module's forward, read off its class: DSPy warns of `module.forward` read anywhere but its __call__.
        target = functools.partial(type(phase).forward, phase) if module else phase
        try:
            parameters = inspect.signature(target)
        except (TypeError, ValueError):
            return None  # a builtin or C callable: nothing to check against
        named = [name for name, parameter in parameters.parameters.items()
                 if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)]
        if module and named and set(named) <= set(self.params):
            return tuple(name for name in self.params if name in named)
        if module and not named and any(parameter.kind is parameter.VAR_KEYWORD
                                        for parameter in parameters.parameters.values()):
            return self._signature_keywords(phase)
        try:
            parameters.bind(*self.params)
        except TypeError as mismatch:
            name = getattr(phase, "__qualname__", type(phase).__name__)
            how = (" (a module whose forward names them is called by keyword, as are its signature's inputs)"
                   if module else "")
            raise ContractError(
                f"the {self.role} phase {name}{parameters} does not fit its contract {self.signature} -> "
                f"{self.returns} ({mismatch}); it is called with {len(self.params)} positional argument(s){how}"
            ) from None
        return None

    def _signature_keywords(self, module: dspy.Module) -> tuple[str, ...]:
        """The contract's arguments a module that takes `**kwargs` reads: its predictors' inputs. One predictor
        (a Predict, a ChainOfThought) must read nothing else; in a module of several, later predictors may read
        what earlier ones wrote."""
        predictors = module.predictors()
        inputs = [name for predictor in predictors for name in predictor.signature.input_fields]
        taken = tuple(name for name in self.params if name in inputs)
        unknown = [name for name in inputs if name not in self.params] if len(predictors) == 1 else []
        if unknown or not taken:
            shown = ", ".join(inputs) or "nothing"
            raise ContractError(
                f"the {self.role} phase {type(module).__name__} reads {shown}, but its contract {self.signature} "
                f"gives {', '.join(self.params)}: name its signature's inputs after those (e.g. "
                f"dspy.Predict(\"{', '.join(name for name in self.params if name != 'iteration')} -> ...\"))")
        return taken

    def call(self, phase: Any, arguments: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments `phase` is called with (`keywords`)."""
        names = self.keywords(phase)
        if names is None:
            return tuple(arguments[name] for name in self.params), {}
        return (), {name: arguments[name] for name in names}

    def value_of(self, phase: Any, result: Any) -> Any:
        """What a phase's call comes to: a module phase's prediction is read at the contract's `value` field,
        else its last output field (a ChainOfThought's answer, after its reasoning); anything else, unchanged."""
        if self.value is None or not isinstance(phase, dspy.Module) or not isinstance(result, dspy.Prediction):
            return result
        if self.value in result:
            return result[self.value]
        fields = list(result.keys())
        return result[fields[-1]] if fields else result


def contracts(**roles: tuple[Any, ...]) -> Mapping[str, PhaseContract]:
    """Contracts by role: each `(params, returns)`, or `(params, returns, answers, ask)`, or `(params, returns,
    answers, ask, value)`."""
    return {role: PhaseContract(role, *fields) for role, fields in roles.items()}


CREATOR_CRITIC = contracts(
    creator=(("requirements", "context", "iteration"), "the draft", {}, "", "draft"),
    critic=(("requirements", "draft", "iteration"),
            "a verdict: a bool (approved), an (approved, feedback) pair, or a dict or object with "
            "`approved` and `feedback`; or a number (a score, approving at threshold= or above), a (score, "
            "feedback) pair, or a dict or object with `score` and `feedback`"),
    iterator=(("requirements", "draft", "feedback", "iteration"), "the revised draft", {}, "", "draft"),
)

EXECUTE_VALIDATE = contracts(
    executor=(("current_input", "iteration"),
              "the attempt: a TaskResult, or a {path: text} dict of the files to write (what the built-in "
              "validator needs); any other value goes unchanged to a custom validator and controller"),
    validator=(("test_command", "iteration"), "a ValidationResult, a bool (passed) or an int exit code",
               {"passed": (bool, "True when the attempt does what the task asks")},
               "You are the VALIDATOR. Check the attempt the executor wrote in the workspace: does it pass?"),
    controller=(("executor_result", "validation_result", "current_input", "iteration"), DECISION,
                {"action": (Literal["continue", "stop"], "stop to end the loop with this attempt"),
                 "next_input": (str, "On continue: what the next attempt must change (empty: the same task "
                                "again)")},
                "You are the CONTROLLER. Read the attempt and how it was validated, and decide: stop here, or "
                "continue with another attempt, saying what it must change."),
)

DIRECTOR = contracts(
    director=(("current_input", "iteration"), "a plan", {}, "", "plan"),
    executor=(("plan", "iteration"), "the execution result", {}, "", "result"),
    evaluator=(("execution_result", "plan", "iteration"),
               "feedback: a bool, a status string (PASS/FAIL), or a dict or object with `status` or `success`"),
    controller=(("feedback", "plan", "execution_result", "iteration"), DECISION),
)


# --- reading what phases returned ------------------------------------------------------------------

_PASSING_STATUSES = frozenset({"PASS", "PASSED", "SUCCESS", "COMPLETE", "OK", "TRUE"})


def field_of(value: Any, *names: str) -> Any:
    """The first of `names` found on a dict, an association list (`(("status", "PASS"), ...)`, a DSL record)
    or an object (a Prediction, a pydantic model), else None."""
    if _is_association_list(value):
        value = dict(value)
    for name in names:
        if isinstance(value, Mapping):
            if name in value:
                return value[name]
        elif hasattr(value, name) and not name.startswith("_"):
            return getattr(value, name)
    return None


def _is_association_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and bool(value) and all(
        isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[0], str) for entry in value)


def outcome_passed(value: Any) -> bool:
    """Whether a validation or an evaluation says the attempt is good."""
    if isinstance(value, ValidationResult):
        return value.ok
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value == 0  # an exit code
    if isinstance(value, str):
        return value.strip().upper() in _PASSING_STATUSES
    status = field_of(value, "status", "success", "ok", "passed")
    if status is not None:
        return outcome_passed(status)
    code = field_of(value, "exit_code")
    return code == 0 if code is not None else False


def as_validation(value: Any) -> ValidationResult:
    """A validator's value as the `ValidationResult` the built-in controller reads."""
    if isinstance(value, ValidationResult):
        return value
    if isinstance(value, bool):
        return ValidationResult(exit_code=0 if value else 1)
    if isinstance(value, int):
        return ValidationResult(exit_code=value)
    if isinstance(value, Mapping) and "exit_code" in value:
        return ValidationResult.model_validate(value)
    raise ContractError(f"the validator returned {value!r:.200}; {EXECUTE_VALIDATE['validator'].returns} expected")


def files_of(result: Any, required: bool) -> dict[str, str]:
    """The files an executor's attempt asks to be written: a TaskResult's, or a {path: text} dict.

    `required` when the built-in validator will run the tests on them."""
    if isinstance(result, TaskResult):
        return result.files
    if isinstance(result, Mapping) and result and all(
            isinstance(path, str) and isinstance(text, str) for path, text in result.items()):
        return dict(result)
    if required:
        raise ContractError(
            f"the executor returned {result!r:.200}, but the built-in validator runs the tests on files: return "
            "a TaskResult(status=..., files={path: text}) or a {path: text} dict, or pass your own validator"
        )
    return {}


def verdict_score(verdict: Any) -> float | None:
    """A numeric verdict's score: a number, a (score, feedback) pair, or a dict or object with a numeric `score`
    or `reward` and no `approved` (a `dspy.Predict("requirements, draft -> score: float")`); None for any other
    verdict. Judged against a threshold (`judge`)."""
    if _is_number(verdict):
        return float(verdict)
    if isinstance(verdict, tuple | list) and len(verdict) == 2 and _is_number(verdict[0]):
        return float(verdict[0])
    if field_of(verdict, "approved") is None:
        score = field_of(verdict, "score", "reward")
        if _is_number(score):
            return float(score)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def verdict_approved(verdict: Any) -> bool:
    """Whether a critic's verdict approves the draft."""
    if isinstance(verdict, bool):
        return verdict
    if isinstance(verdict, tuple | list) and len(verdict) == 2 and isinstance(verdict[0], bool):
        return verdict[0]
    approved = field_of(verdict, "approved")
    if isinstance(approved, bool):
        return approved
    raise ContractError(f"the critic returned {verdict!r:.200}; {CREATOR_CRITIC['critic'].returns}, or a number "
                        "judged against threshold=, expected")


def verdict_feedback(verdict: Any) -> str:
    """A critic's feedback as text, for the built-in iterator."""
    if isinstance(verdict, tuple | list) and len(verdict) == 2 and not _is_association_list(verdict):
        return str(verdict[1])
    feedback = field_of(verdict, "feedback")
    return "" if feedback is None else str(feedback)


def decision(raw: Any) -> ControllerDecision:
    """What a controller returned, as a decision (raises `DecisionError` saying what to return)."""
    if isinstance(raw, ControllerDecision):
        return raw
    action: Any = None
    value: Any = None
    if isinstance(raw, list | tuple) and len(raw) == 2 and isinstance(raw[0], str):
        action, value = raw
    elif isinstance(raw, dict) and "action" in raw and set(raw) <= {"action", "value"}:
        action, value = raw["action"], raw.get("value")
    if isinstance(action, str) and action.strip().lower() in ("continue", "stop"):
        return ControllerDecision(action=action, value=value)
    raise DecisionError(f"controller returned {short_repr(raw)}, which is not a decision; expected {_DECISION_FORMS}")


# --- the verdict rule and the ranking of attempts ----------------------------------------------------

UNJUDGED = (-1,)
"""The rank of an attempt offered before it is judged: below every judged one (`attempt_rank`)."""

_BARE_WORDS = frozenset({"", "true", "false", "none", "null", "yes", "no", "n/a", "ok"})


@dataclass(frozen=True)
class Verdict:
    """What a judged attempt comes to (`judge`): whether it is `approved`, the `feedback` the next attempt
    gets, and what it was judged by: the `checks`' report, the `critic`'s verdict (None when no critic was
    asked), a numeric `reward`. `contradiction` says how the critic's verdict contradicts itself, when it does
    (then its word was not taken)."""

    approved: bool
    feedback: str
    checks: CheckReport | None = None
    critic: Any = None
    reward: float | None = None
    contradiction: str | None = None

    @property
    def criteria_met(self) -> int:
        """How many of the built-in critic's criteria (`CRITERIA`) its verdict passed; 0 without one."""
        return sum(field_of(self.critic, f"{name}_passed") is True for name in CRITERIA) if self.critic is not None \
            else 0

    @property
    def rank(self) -> tuple[Any, ...]:
        """How good the attempt is, to compare with others: an answer at all (not junk), then checks held,
        then the critic's verdict (approval, then its criteria met), then the reward."""
        checks = self.checks
        return (int(checks is None or checks.floor is None), checks.held if checks else 0, int(self.approved),
                self.criteria_met, self.reward if self.reward is not None else 0.0)


def judge(checks: CheckReport | None = None, critic: Any = None, reward: float | None = None, *,
          threshold: float | None = None) -> Verdict:
    """The one verdict rule.

    1. Checks first: a check that fails (or a floor that finds junk) means not approved, whatever the critic
       or the reward says; the failed rules are the feedback, with the critic's beside them when it was asked.
    2. With every check holding, the critic decides (`critic`: a bool, an (approved, feedback) pair, or a
       dict or object with `approved` and `feedback`, as `CREATOR_CRITIC` says). A verdict that contradicts
       its own criteria (`<criterion>_passed`, the built-in critic's) is not taken: approved with a criterion
       failed, or rejected with every criterion passed, counts as not approved and says so (`contradiction`).
    3. A `reward` (a number) approves when it reaches `threshold`, beside the critic when both are given. A
       critic's numeric verdict (`verdict_score`: a number, a (score, feedback) pair, a `score` field) is such
       a reward: it approves at `threshold` or above, and the best attempt is the highest; with a `reward`
       besides, the lower of the two counts.
    4. With neither, the checks alone decide: approved when every check holds.
    """
    if checks is None and critic is None and reward is None:
        raise ConfigurationError("nothing to judge by: give checks, a critic's verdict or a reward")
    approved = checks is None or checks.passed
    parts = [checks.feedback()] if checks is not None and not checks.passed else []
    contradiction = None
    score = None if critic is None else verdict_score(critic)
    if score is not None:  # a numeric verdict is a reward the critic gave: the same threshold, the same ranking
        if threshold is None:
            raise ContractError(f"the critic returned {short_repr(critic)}, a score: give the loop threshold= (the "
                                "score that approves), or have the critic return a verdict "
                                f"({CREATOR_CRITIC['critic'].returns})")
        feedback = verdict_feedback(critic).strip()
        if feedback and score < threshold:
            parts.append(feedback)
        reward = score if reward is None else min(reward, score)
    elif critic is not None:
        said = verdict_approved(critic)
        failed = [name for name in CRITERIA if field_of(critic, f"{name}_passed") is False]
        judged_all = all(isinstance(field_of(critic, f"{name}_passed"), bool) for name in CRITERIA)
        feedback = verdict_feedback(critic).strip()
        if said and failed:
            contradiction = f"approved, but {', '.join(failed)} failed"
        elif not said and judged_all and not failed:
            contradiction = "not approved, but every criterion passed"
        approved = approved and said and contradiction is None
        bare = feedback.lower() in _BARE_WORDS  # "True": no reason given
        if failed:
            parts.append(f"Failed criteria: {', '.join(failed)}.\n{feedback}".strip())
        elif feedback and not (contradiction and bare):
            parts.append(feedback)
        if contradiction and bare and not failed:
            parts.append("The critic gave no reason: check the draft against every requirement and revise what "
                         "falls short.")
    if reward is not None:
        if threshold is not None and reward < threshold:
            approved = False
            parts.append(f"The reward is {reward:g}; it must reach {threshold:g}.")
        elif threshold is None and critic is None and checks is None:
            raise ConfigurationError("a reward alone approves nothing: give a threshold it must reach")
    return Verdict(approved, "\n".join(part for part in parts if part), checks, critic, reward, contradiction)


def checked_threshold(threshold: Any) -> float | None:
    """A loop's `threshold=` (the score a numeric verdict or a reward must reach), checked when the loop is built."""
    if threshold is not None and not _is_number(threshold):
        raise ConfigurationError(f"threshold must be a number (the score that approves) or None, got {threshold!r}")
    return threshold


def attempt_rank(verdict: Verdict, order: int) -> tuple[Any, ...]:
    """The rank a run keeps its best attempt by (`Run.offer_candidate`): the verdict's rank, and of equal ones
    the earlier attempt (`order` counts the attempts of a run). A small model's later revisions of an
    equally judged text drift from the request (a good haiku was replaced by a 160-token essay), so a
    revision has to be judged better to displace what came first."""
    return (*verdict.rank, -order)

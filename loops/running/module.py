"""The base of every loop module: phases checked against their contracts and chosen once (`Phase`), budgets and
retries set once and overridable per call, one result shape."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import dspy

from loops.errors import ConfigurationError, a_or_an
from loops.identity import canonical, public_path
from loops.lm import resolve
from loops.observers.streaming import streamed
from loops.recording.checkpoint import CheckpointStore, Replay, stable_hash
from loops.running.drivers import outside_the_gate
from loops.running.person import Human, nobody_to_answer
from loops.running.roles import predictor_of
from loops.running.runtime import UNSET, RoleCalls, Run, adrive, drive
from loops.running.saving import encode, lm_reference, unnamed_lm_note
from loops.vocabulary import context
from loops.vocabulary.budget import Budget, RetryPolicy
from loops.vocabulary.checks import Check, checks_of_call
from loops.vocabulary.contracts import MISSING, InputContract, PhaseContract, not_text

__all__ = ["LoopModule", "Phase"]

T = TypeVar("T")


@dataclass(frozen=True)
class Phase:
    """One of a pattern's phases as it was chosen when the pattern was built (`LoopModule._set_phase`): its
    built-in LLM role (`builtin`; so too a person answering that role's fields), or the user's phase (a
    `dspy.Module`, a callable, a person answering the phase's contract). A pattern's steps call it the same way
    whichever it is, so each `_loop` reads like its spec: this is the one place that asks which it is. Data
    alone (the role's name and its kind): the module holds what answers it, and a run is never stored here."""

    role: str
    builtin: bool

    def call(self, run: Run, builtin: Callable[[], RoleCalls], /, **arguments: Any) -> RoleCalls:
        """The phase's value: what `builtin()` gives (the built-in role's own steps, e.g. an LLM call and what
        the pattern makes of its answer), else the user's phase called with its contract's `arguments`
        (`Run.call_phase`)."""
        if self.builtin:
            return (yield from builtin())
        return (yield from run.call_phase(self.role, **arguments))

    def turn(self, run: Run, builtin: Callable[[], RoleCalls], /, **arguments: Any) -> RoleCalls:
        """`call` for a phase whose value comes with the prediction it came from: `builtin()` gives both; the
        user's phase gives its value, and None for the prediction."""
        if self.builtin:
            return (yield from builtin())
        return (yield from run.call_phase(self.role, **arguments)), None

    def ask(self, run: Run, read: str, llm: Mapping[str, Any], options: Callable[[], Mapping[str, Any]] | None = None,
            *, step: str | None = None, **arguments: Any) -> RoleCalls:
        """`turn`, the built-in role answering in one LLM call (`Run.call`, as `step` if given) with the `llm`
        inputs and the options `options()` gives, its prediction read at `read`; else the user's phase, called
        with its contract's `arguments`. Returns the value and the prediction (None for a user's phase)."""
        def asked() -> RoleCalls:
            prediction = yield from run.call(step or self.role, **(options() if options else {}), **llm)
            return prediction[read], prediction
        return (yield from self.turn(run, asked, **arguments))

    def either(self, builtin: T, phase: T) -> T:
        """What the pattern takes with this phase: `builtin` with the built-in role, `phase` with the user's
        (e.g. the candidates a writer draws: a user's phase is called as it is, with no draw of its own)."""
        return builtin if self.builtin else phase


class LoopModule(dspy.Module):
    """A `dspy.Module` whose `forward` and `aforward` drive one loop, `_loop`, written once.

    Subclasses set `contracts` (their pluggable phases, `loops.vocabulary.contracts`), `input_contract` (what a call
    takes) and `aliases` (extra names for result fields, e.g. `final_draft` for `final`), define
    `_loop(self, run, **inputs)` (a generator; see `loops.running.runtime`) and call `self._forward(...)` /
    `self._aforward(...)` with the call's inputs checked by `self._checked_inputs(limits, inputs)`. Each
    pluggable phase is chosen in `__init__` by `self._set_phase(role, phase, builtin)`, which keeps it in
    `self._phases` as a `Phase`; the loop's steps call that (`call`, `turn`, `ask`), never asking whether the
    phase is the built-in one.

    Every prediction has `final`, `success`, `best_attempt`, `iterations` (1-based: the number of
    iterations run), `stop_reason`, `warnings`, `trace`, `histories`, `lm_calls` (the LM requests this
    process sent) and `error`, and beside them `replayed`, `cached`, `tokens` and `cost_usd`. Any
    `Budget` limit can be passed as a keyword to a call (`module(..., max_iterations=5,
    timeout_s=None)`), or a whole `budget=Budget(...)`; a limit passed by name (`max_iterations=` to the
    constructor too) replaces that limit of the budget given with it.
    """

    contracts: Mapping[str, PhaseContract] = {}
    input_contract: InputContract = InputContract()
    checks: tuple[Check, ...] = ()  # a program's own checks (`loops.vocabulary.checks`), when its pattern takes some
    aliases: Mapping[str, str] = {}
    _arguments: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each loop class records the arguments it was built with: a saved program is rebuilt from them."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)
        first, *_ = signature.parameters
        keywords = next((parameter.name for parameter in signature.parameters.values()
                         if parameter.kind is inspect.Parameter.VAR_KEYWORD), None)

        @functools.wraps(init)
        def recording_init(self: LoopModule, *args: Any, **options: Any) -> None:
            outermost = "_arguments" not in vars(self)  # the outermost constructor's arguments, not a base class's
            if outermost:
                arguments = dict(signature.bind(self, *args, **options).arguments)
                del arguments[first]
                extra = arguments.pop(keywords, {}) if keywords else {}
                self._arguments = {**arguments, **extra}
            init(self, *args, **options)
            if outermost:
                # Last among the attributes: DSPy names a predictor by the first path it finds to it, and a phase
                # given as an argument must be named by its role (`creator.predict`), in named_predictors() and
                # in saved files, not by the record of the arguments.
                self.__dict__["_arguments"] = self.__dict__.pop("_arguments")

        cls.__init__ = recording_init

    def __init__(
        self,
        *,
        max_iterations: int | None = None,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
        strict: bool = False,
        clock: Callable[[], float] = time.monotonic,
        history_window: int | Mapping[str, int | None] | None | object = UNSET,
        history_summary: bool = False,
        checkpoint: str | os.PathLike[str] | CheckpointStore | None = None,
    ):
        super().__init__()
        _check_window(history_window)
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigurationError(f"budget must be a loops.Budget, got {budget!r:.100}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a loops.RetryPolicy, got {retry!r:.100}")
        budget = budget or Budget()
        self.budget = budget if max_iterations is None else budget.override(max_iterations=max_iterations)
        self.retry = retry or RetryPolicy()
        self.strict = strict
        self.clock = clock
        self.history_window = history_window
        self.history_summary = history_summary
        self.checkpoint = checkpoint
        self._llm_roles: list[str] = []
        self._phases: dict[str, Phase] = {}  # each phase as chosen (`_set_phase`), by its role

    def _set_phase(self, role: str, phase: Any, builtin: Callable[[], dspy.Module]) -> Phase:
        """Set the role's phase: `phase` checked against its contract, or the built-in LLM role (built
        only when it will run). Returns the phase as chosen (`Phase`), kept in `_phases`: the built-in one
        is used for a person (`loops.human()`) too, who answers with the built-in role's fields in its place,
        unless the role's contract says what a person answers (a phase with no LLM role behind it)."""
        self._phases[role] = chosen = Phase(role, self._chosen_phase(role, phase, builtin))
        return chosen

    def _chosen_phase(self, role: str, phase: Any, builtin: Callable[[], dspy.Module]) -> bool:
        """Set the role's attribute (`_set_phase`); whether it is the built-in one."""
        if phase is None:
            setattr(self, role, builtin())
            self._llm_roles.append(role)
            return True
        if isinstance(phase, Human):
            contract = self.contracts.get(role)
            if contract is not None and contract.answers:
                setattr(self, role, phase.for_contract(contract))
                return False
            predictor, _ = predictor_of(builtin())
            setattr(self, role, phase.bound(predictor.signature))
            return True
        self.contracts[role].check(phase)
        setattr(self, role, phase)
        return False

    def input_problems(self, inputs: Mapping[str, Any]) -> list[str]:
        """Every reason this program would refuse to run on `inputs` (data: an example of a batch), each a sentence
        saying what to fix; [] when there is none. First its `input_contract` (an input missing, of the wrong kind,
        not UTF-8 text, a name it does not take, a limit: data hold inputs only), then what only the program can
        tell (`_check_inputs`: a test command's executable, a target file outside the workspace). No LM is called;
        `loops.batch` asks this of every example before any runs."""
        problems = self.input_contract.problems(inputs, self._builtin_phases(), self._call_options(),
                                                inputs_only=True)
        if not problems:
            try:
                self._prepared(self._with_defaults(inputs))
            except ConfigurationError as error:
                problems.append(str(error))
        return problems

    def _checked_inputs(self, limits: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
        """A call's inputs, its defaults filled in, once they fit `input_contract` with its options (`limits`) and
        `_check_inputs` finds nothing wrong: else a `ConfigurationError` (every problem the contract finds, listed),
        before any LM call."""
        given = {name: value for name, value in inputs.items() if value is not MISSING}
        problems = self.input_contract.problems({**given, **limits}, self._builtin_phases(), self._call_options())
        if problems:
            raise ConfigurationError("; ".join(problems))
        return self._prepared(self._with_defaults(given))

    def _prepared(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Inputs that fit the contract as the run takes them, once `_check_inputs` finds nothing wrong: a `checks`
        input becomes the run's checks, the program's own then the call's (`loops.vocabulary.checks.checks_of_call`)."""
        self._check_inputs(**inputs)
        if "checks" not in self.input_contract.inputs:  # a DSL program's variable may be called checks
            return inputs
        return {**inputs, "checks": checks_of_call(self.checks, inputs["checks"], alone=self._checks_alone())}

    def _checks_alone(self) -> str | None:
        """What approves by the checks alone when this program is so set (e.g. "critic='checks' approves a
        draft"): then a run must have some checks. None when the checks do not approve alone."""
        return None

    def _with_defaults(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        builtin = self._builtin_phases()
        defaults = {name: spec.default_in(builtin) for name, spec in self.input_contract.inputs.items()}
        return {**defaults, **{name: value for name, value in inputs.items() if name in defaults
                               or self.input_contract.open}}

    def _check_inputs(self, **inputs: Any) -> None:
        """What only this program can tell of inputs that fit its contract; raises `ConfigurationError`."""

    def _builtin_phases(self) -> frozenset[str]:
        """The phases of this program that are the built-in ones (which read their inputs as the contract says): the
        built-in LLM roles, and a person answering one's fields."""
        return frozenset(role for role, phase in self._phases.items() if phase.builtin)

    def _call_options(self) -> tuple[str, ...]:
        """The names a call takes beside its inputs: each limit of its budget, or a whole budget, and where it
        is recorded."""
        return (*(field.name for field in dataclasses.fields(Budget)), "budget", "checkpoint", "run_id")

    def __call__(self, *args: Any, **kwargs: Any) -> dspy.Prediction:
        with outside_the_gate():  # a loop run within a phase (a DSL loop form's) gates its own calls
            return super().__call__(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> dspy.Prediction:
        with outside_the_gate():
            return await super().acall(*args, **kwargs)

    def _forward(self, limits: dict[str, Any], **inputs: Any) -> dspy.Prediction:
        with streamed(self):  # under dspy.streamify: its chosen fields and status messages (nothing otherwise)
            run = self._run(limits, inputs)
            with run.active():
                return drive(run.program(self._loop, **inputs))

    async def _aforward(self, limits: dict[str, Any], **inputs: Any) -> dspy.Prediction:
        with streamed(self) as status:
            run = self._run(limits, inputs)
            with run.active():
                result = await adrive(run.program(self._loop, **inputs))
            await status.sent()  # every status message before the result
            return result

    def __repr__(self) -> str:
        """The loop's class and iteration budget, then each role: an LLM role by its module and fields, a custom
        phase by its name (DSPy's repr lists predictors alone, so a loop of custom phases showed nothing)."""
        lines = [f"{type(self).__name__}(max_iterations={self.budget.max_iterations})"]
        for role in dict.fromkeys([*self.contracts, *self._llm_roles]):
            phase = getattr(self, role, None)
            predictor, _ = predictor_of(phase)
            if predictor is not None:
                lines.append(f"  {role} = {type(phase).__name__}({predictor.signature.signature})")
            elif isinstance(phase, Human):
                lines.append(f"  {role} = {phase!r}")
            elif phase is not None:
                lines.append(f"  {role} = {getattr(phase, '__qualname__', type(phase).__qualname__)} (custom phase)")
        return "\n".join(lines)

    def fingerprint(self) -> str:
        """What identifies this program for a checkpoint: its class, its roles' prompts, its phases; then, after a
        space, who plays each role (`loops.recording.checkpoint.program_difference` reads it to say what differs)."""
        parts, roles = [], []
        for name in sorted({*self._llm_roles, *self.contracts}):
            role = getattr(self, name, None)
            predictor, _ = predictor_of(role)
            if predictor is not None:
                parts.append((name, predictor.signature.instructions, tuple(predictor.signature.fields)))
                roles.append(f"{name}=llm:{stable_hash(parts[-1][1:])[:8]}")
            elif isinstance(role, Human):
                parts.append((name, "human", tuple(role.signature.fields) if role.signature else ()))
                roles.append(f"{name}=person")
            elif role is not None:
                parts.append((name, getattr(role, "__qualname__", type(role).__qualname__)))
                roles.append(f"{name}=phase:{parts[-1][1]}")
        module, qualname = public_path(type(self))
        return f"{module}.{qualname}:{stable_hash(parts)} {','.join(roles)}"

    # Saving and loading (loops.running.saving) -----------------------------------------------------------------

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        """DSPy's state (demos, instructions) with the loop's class, the arguments it was built with and
        each role's LM as a model string, instead of the LM's endpoint settings."""
        state = super().dump_state(json_mode=json_mode)
        lms = self._lm_references()
        for name in lms:
            state[name]["lm"] = None
        state["loops"] = {
            "kind": ":".join(public_path(type(self))),
            "arguments": {name: encode(value) for name, value in getattr(self, "_arguments", {}).items()},
            "budget": dataclasses.asdict(self.budget),
            "retry": dataclasses.asdict(self.retry),
            "strict": self.strict,
            "history_window": None if self.history_window is UNSET else self.history_window,
            "history_window_set": self.history_window is not UNSET,
            "history_summary": self.history_summary,
            "lms": lms,
        }
        return state

    def save(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        """DSPy's save; a role that names no LM of its own is said now (a warning on the `loops` logger), not
        first when the loaded program cannot run."""
        saved = super().save(path, *args, **kwargs)
        note = unnamed_lm_note([name for name, _ in self.named_predictors()], self._lm_references())
        if note is not None:
            logging.getLogger("loops").warning("%s: %s", os.fspath(path), note)
        return saved

    def _lm_references(self) -> dict[str, str | None]:
        """Each role with an LM of its own, by the model string it is saved as (`lm_reference`)."""
        return {name: lm_reference(predictor.lm) for name, predictor in self.named_predictors()
                if predictor.lm is not None}

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> LoopModule:
        """DSPy's state, then the saved loop settings (budget, retry policy, strictness, histories) and
        the roles' LMs (`loops.lm.resolve` of the saved model strings)."""
        saved = state.get("loops") or {}
        state = {**state, **{name: {**state[name], "lm": None} for name, _ in self.named_predictors()
                             if name in saved.get("lms", {}) and name in state}}
        super().load_state(state, allow_unsafe_lm_state=allow_unsafe_lm_state)
        if not saved:
            return self
        kind = canonical(str(saved.get("kind")))
        if ":".join(public_path(type(self))) != kind:
            raise ConfigurationError(f"the saved state is {a_or_an(kind)}, not "
                                     f"{a_or_an(type(self).__qualname__)}: load it with loops.load(path)")
        self.budget = Budget(**saved["budget"])
        self.retry = RetryPolicy(**saved["retry"])
        self.strict = saved["strict"]
        self.history_window = saved["history_window"] if saved["history_window_set"] else UNSET
        self.history_summary = saved["history_summary"]
        predictors = dict(self.named_predictors())
        for name, model in saved.get("lms", {}).items():
            if model is not None and name in predictors:
                predictors[name].lm = resolve(model)
        return self

    def _run(self, limits: dict[str, Any], inputs: dict[str, Any]) -> Run:
        budget = limits.pop("budget", None) or self.budget
        if not isinstance(budget, Budget):
            raise ConfigurationError(f"budget must be a loops.Budget, got {budget!r:.100}")
        store, run_id = limits.pop("checkpoint", self.checkpoint), limits.pop("run_id", None)
        budget = budget.override(**limits)  # what is left of the call's options are the budget's limits
        if dspy.settings.lm is None:
            for role in self._roles_that_may_run(budget):
                predictor, _ = predictor_of(getattr(self, role))
                if predictor is None or predictor.lm is None:
                    raise ConfigurationError(
                        f"no LM is configured for the {role} role: call dspy.configure(lm=...) (e.g. "
                        "loops.lm.local_lm() for the embedded offline model), use dspy.context(lm=...), or "
                        f"{type(self).__name__}.{role}.set_lm(...)")
        if run_id is None:
            self._check_people_can_answer()
        replay = None
        if run_id is not None:
            if not isinstance(run_id, str) or not run_id.strip() or not_text(run_id):
                why = not_text(run_id) if isinstance(run_id, str) else None
                raise ConfigurationError(f"run_id must be a non-empty str of UTF-8 text, got {run_id!r:.100}"
                                         + (f" (it holds {why})" if why else ""))
            if store is None:
                raise ConfigurationError(f"run_id={run_id!r} needs a checkpoint: pass checkpoint='runs.db' (or a "
                                         "store) to the module or the call")
            # Last: it claims the run id, which the run gives up when it ends (`Run.active`).
            replay = Replay(store, run_id, self.fingerprint(), stable_hash(inputs))
        return Run(
            module=self,
            budget=budget,
            retry=self.retry,
            clock=self.clock,
            strict=self.strict,
            aliases=self.aliases,
            contracts=self.contracts,
            windows=self.history_window,
            history_summary=self.history_summary,
            replay=replay,
            parent=context.current_run(),
        )

    def _check_people_can_answer(self) -> None:
        """A run with no checkpoint cannot pause: each person in it must have someone to answer in this process
        (an answer function, an answerer of the context, a person at hand), or no LM call is made."""
        nobody = [name for name, value in vars(self).items() if isinstance(value, Human) and not value.can_answer()]
        if nobody:
            raise nobody_to_answer(nobody)

    def _roles_that_may_run(self, budget: Budget) -> list[str]:
        """The LLM roles a run within `budget` may call: each needs an LM before the run starts, and only
        these (a role that cannot run needs none). Every built-in role, unless no iteration may run."""
        return list(self._llm_roles) if budget.allows_iteration(1) else []

    def _loop(self, run: Run, **inputs: Any) -> RoleCalls:
        raise NotImplementedError


def _check_window(window: Any) -> None:
    values = window.values() if isinstance(window, Mapping) else [window]
    for value in values:
        if value is not UNSET and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigurationError(f"history_window must be a number of turns (an int >= 0), None for all of "
                                     f"them, or a {{role: turns}} dict; got {window!r}")

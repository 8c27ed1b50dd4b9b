"""The loop forms: the seeds' `iterative-loop` and `director-evaluator-loop`, and `creator-critic-loop`.

Each form runs its phase lambdas on the library's own module for the pattern, through its public
constructor and the phase contract tables of `loops.vocabulary.contracts` (iteration numbers 1-based, always
the last argument), so a DSL loop has the same budget, trace, retries and stop reasons as a Python
one; there is no second loop implementation here.

    (iterative-loop
      (max-iterations 3)
      (initial-input (list (list 'prompt "...")))
      (test-command "pytest -q")
      (executor   (lambda (input iteration) ...))
      (validator  (lambda (command iteration) ...))
      (controller (lambda (result validation input iteration) ... (list 'continue next-input))))

    (director-evaluator-loop
      (max-iterations 3)
      (initial-director-input "goal")
      (director   (lambda (input iteration) ...))           ; -> a plan
      (executor   (lambda (plan iteration) ...))            ; -> a result
      (evaluator  (lambda (result plan iteration) ...))     ; -> feedback
      (controller (lambda (feedback plan result iteration) ... (list 'stop result))))

    (creator-critic-loop
      (max-iterations 3)
      (requirements "a slogan")
      (context "")                                          ; optional
      (checks (check:max-words 8) (lambda (draft) ...))     ; optional: run on every draft first
      (creator  (lambda (requirements context iteration) ...))         ; -> a draft
      (critic   (lambda (requirements draft iteration) ...))           ; -> a verdict
      (iterator (lambda (requirements draft feedback iteration) ...)))  ; -> the revised draft

A `checks` clause (creator-critic and director loops) holds any number of checks (`loops.vocabulary.checks`): check
primitives or procedures of the draft; they run on every draft first and a failing one means no approval,
its message the feedback (`loops.vocabulary.contracts.judge`). Without a critic (evaluator) clause, the checks alone
approve.

A phase may be a person instead of a procedure, `(human)` or `(human "what to look for")`: e.g.
`(critic (human))`. A person answers in an LLM role's place with that role's fields (the critic's
`approved` and `feedback`, the evaluator's `status` and `feedback`, the Director's controller's `action`
and `next_input`), in the iterative loop's validator and controller with their contract's (`passed`;
`action` and `next_input`), exactly as `loops.human()` does in Python (`loops.running.person`); when nobody can
answer, the program pauses with the stop reason `awaiting_input` (it needs a checkpoint) and resumes
where it was.

Clauses are checked when the program is analysed (missing, duplicate, unknown) and the phases when
the form runs, before the loop starts (a procedure, of the contract's arity); each error points at
its clause. A controller decides with `(list 'continue next-input)` or `(list 'stop value)`; a
critic's verdict is `#t`/`#f`, `(list approved feedback)` or a record with `approved`; the iterator gets
its feedback as text ("" when the verdict has none). A malformed
decision or verdict, or any DSL error inside a phase, is a bug in the program: it propagates with
its position. A limit (max-iterations, the run's time, LM calls, tokens) ends the loop gracefully
with a warning; the form's value is then the last executor result (the last draft), nil when none
ran. Inside every phase `*loop-config*` is a record of the form's configuration (`max-iterations`
and its input clause), as in the seed project.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loops.errors import AwaitingInput, ConfigurationError, ContractError
from loops.running.person import Human, human
from loops.sexp.errors import ArityError, DslTypeError, DslValueError
from loops.sexp.evaluator import (
    Analyzer,
    Closure,
    Env,
    Evaluation,
    Exec,
    call_python,
    describe_callable,
    run_closure,
    special_form,
)
from loops.sexp.primitives import get_field
from loops.sexp.reader import Node
from loops.sexp.values import NIL, Symbol, is_list, to_dsl, to_source
from loops.vocabulary.budget import MAX_ITERATIONS_CAP, Budget
from loops.vocabulary.context import current_run
from loops.vocabulary.contracts import CREATOR_CRITIC, DIRECTOR, EXECUTE_VALIDATE, PhaseContract, verdict_approved

__all__ = ["LOOP_FORMS", "ProgramOutcome", "program_outcome"]


@dataclass(frozen=True)
class LoopForm:
    """One loop form: its clauses, which pattern runs it and with which contracts. `judge` is the phase a
    `checks` clause may stand in for (the critic, the evaluator): left out, the checks alone approve; `boxed` the
    phase whose value the module must not look into (the executor's, which it would take for files to write)."""

    name: str
    inputs: tuple[str, ...]  # value clauses (evaluated once), required
    optional: tuple[str, ...]  # value clauses that may be left out
    contracts: dict[str, PhaseContract]
    judge: str | None = None
    boxed: str | None = None  # the phase whose value goes through the module boxed (`_Attempt`)

    @property
    def clauses(self) -> tuple[str, ...]:
        return ("max-iterations", *self.inputs, *self.optional, *self.contracts)


LOOP_FORMS = {
    form.name: form for form in (
        LoopForm("iterative-loop", ("initial-input", "test-command"), (), dict(EXECUTE_VALIDATE), boxed="executor"),
        LoopForm("director-evaluator-loop", ("initial-director-input",), ("checks",), dict(DIRECTOR), "evaluator"),
        LoopForm("creator-critic-loop", ("requirements",), ("context", "checks"), dict(CREATOR_CRITIC), "critic"),
    )
}
_DECISION = "(list 'continue next-input) or (list 'stop value)"
_VERDICT = "#t or #f, (list approved feedback) or a record with approved"


class _Attempt:
    """An executor's value on its way through the Execute–Validate module: boxed, so the module treats
    it as an opaque attempt (the module writes a {path: text} dict as files, and a DSL record of
    strings is not one)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:  # what a checkpoint's digest of the controller's inputs sees
        return f"_Attempt({self.value!r})"

    def __str__(self) -> str:  # what a person in the controller's place reads
        return to_source(self.value)


def _unbox(value: Any) -> Any:
    return value.value if type(value) is _Attempt else value


def _person(analyzer: Analyzer, node: Node, clause: str) -> Human | None:
    """The person a phase clause's expression stands for, `(human)` or `(human "instructions")`; None when it is
    an expression (a procedure)."""
    items = node.value if node.is_list else ()
    if not items or items[0].symbol != "human":
        return None
    if len(items) > 2 or (len(items) == 2 and type(items[1].value) is not str):
        raise analyzer.syntax_error(f"{clause}: a person is (human) or (human \"what to look for\")", node)
    return human(instructions=items[1].value if len(items) == 2 else "")


@special_form("human")
def _human_elsewhere(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    raise analyzer.syntax_error("(human) is a person answering a loop form's phase: write it as the phase itself, "
                                "e.g. (critic (human)) in a creator-critic-loop", node)


def _analyze_clauses(analyzer: Analyzer, node: Node, form: LoopForm) -> dict[str, tuple[Node, Exec | Human]]:
    found: dict[str, tuple[Node, Exec | Human]] = {}
    for clause in node.value[1:]:
        key = clause.value[0].symbol if clause.is_list and clause.value else None
        if key not in form.clauses:
            shown = to_source(clause.to_value())
            raise analyzer.syntax_error(
                f"{form.name} has no clause {shown[:60]}{'...' if len(shown) > 60 else ''} "
                f"(its clauses: {' '.join(form.clauses)})", clause)
        if key in found:
            raise analyzer.syntax_error(f"{form.name}: clause '{key}' is given twice", clause)
        if key == "checks":  # any number of checks, or lists of them
            if len(clause.value) < 2:
                raise analyzer.syntax_error(f"{form.name}: clause 'checks' takes the checks: (checks (check:max-words "
                                            "40) (check:include \"BPA-free\") ...)", clause)
            found[key] = (clause, _checks_clause([analyzer.analyze(item) for item in clause.value[1:]]))
            continue
        if len(clause.value) != 2:
            raise analyzer.syntax_error(f"{form.name}: clause '{key}' takes one expression: ({key} expr)", clause)
        person = _person(analyzer, clause.value[1], f"{form.name}: {key}") if key in form.contracts else None
        found[key] = (clause, person or analyzer.analyze(clause.value[1]))
    judged_by_checks = "checks" in found and form.judge not in found  # the checks alone approve
    missing = [key for key in form.clauses if key not in found and key not in form.optional
               and not (judged_by_checks and key == form.judge)]
    if missing:
        raise analyzer.syntax_error(f"{form.name} is missing the clause ({missing[0]} ...) "
                                    f"(it needs: {' '.join(key for key in form.clauses if key not in form.optional)})",
                                    node)
    return found


def _checks_clause(items: list[Exec]) -> Exec:
    """The `checks` clause's expressions, each a check or a list of checks, as one list."""
    def run(env: Env, ev: Evaluation) -> Any:
        checks: list[Any] = []
        for item in items:
            value = item(env, ev)
            checks.extend(value if is_list(value) else [value])
        return tuple(checks)
    return run


def _checks(value: tuple[Any, ...], clause: Node, ev: Evaluation) -> list[Any]:
    """The checks the loop's module runs: built-in ones as they are, a procedure `(lambda (draft) ...)` run in
    this evaluation (its #t or nil holds, #f or a string fails); anything else is an error at the clause."""
    checks = []
    for check in value:
        if type(check) is Closure:
            if not check.accepts(1):
                raise ArityError(f"checks: a check takes one argument (the draft), but {check.describe()} takes "
                                 f"{_takes(check)}", clause)
            checks.append(_dsl_check(check, clause, ev))
        elif callable(check) and not isinstance(check, str):
            checks.append(check)
        else:
            raise DslTypeError(f"checks: {to_source(check, limit=61)[:60]} is not a check: use (check:max-words 40), "
                               "(check \"include=BPA-free\") or (lambda (draft) ...)", clause)
    return checks


def _dsl_check(closure: Closure, clause: Node, ev: Evaluation) -> Callable[[Any], Any]:
    def check(draft: Any) -> Any:
        value = run_closure(closure, (draft,), clause, ev)
        if value is NIL or value is True:
            return None
        if value is False or isinstance(value, str):
            return value
        raise DslValueError(f"the check {closure.describe()} returned {to_source(value, limit=61)[:60]}: a check "
                            "returns #t or nil when it holds, #f or a message when it fails", clause)

    check.__name__ = check.__qualname__ = closure.describe()  # its rule: "Pass the check <name>."
    return check


def _phase(form: LoopForm, role: str, clause: Node, procedure: Any, config: dict[str, Any]) -> Any:
    """A phase procedure as the module's phase runs it (`_dispatcher`): a DSL procedure with `*loop-config*` bound
    in its scope, else the Python callable; checked now, before the loop starts, against its contract's arity."""
    contract = form.contracts[role]
    count = len(contract.params)
    if type(procedure) is Closure:
        if not procedure.accepts(count):
            raise ArityError(f"{form.name}: the {role} must take {count} argument(s) "
                             f"({' '.join(contract.params)}), but {procedure.describe()} takes "
                             f"{_takes(procedure)}", clause)
        return Closure(procedure.params, procedure.rest, procedure.body, Env({"*loop-config*": config}, procedure.env),
                       procedure.name, procedure.node, procedure.interpreter)
    if not callable(procedure):
        raise DslTypeError(f"{form.name}: the {role} must be a procedure of {count} argument(s) "
                           f"({' '.join(contract.params)}), got {to_source(procedure)}", clause)
    try:  # a primitive, tool or host callable: its Python signature, where it has one, must fit too
        contract.check(procedure)
    except ContractError:
        raise ArityError(f"{form.name}: the {role} must take {count} argument(s) "
                         f"({' '.join(contract.params)}), but {describe_callable(procedure)} cannot be called "
                         f"with {count}", clause) from None
    return procedure


def _takes(closure: Closure) -> str:
    low, high = closure.arity
    return f"at least {low}" if high is None else str(low)


def _decision(clause: Node) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if type(value) is tuple and len(value) == 2 and isinstance(value[0], str) and value[0] in ("continue", "stop"):
            if type(value[0]) is Symbol:
                return (str(value[0]), value[1])
            raise DslValueError(f"the controller returned {to_source(value, limit=81)[:80]}: a decision starts with "
                                f"a symbol, not a string; write (list '{value[0]} ...)", clause)
        raise DslValueError(f"the controller returned {to_source(value, limit=81)[:80]}, which is not a decision: "
                            f"expected {_DECISION}", clause)
    return check


def _verdict(clause: Node) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        try:
            verdict_approved(value)
        except ConfigurationError:
            raise DslValueError(f"the critic returned {to_source(value)[:80]}, which is not a verdict: "
                                f"expected {_VERDICT}", clause) from None
        return value
    return check


def _iterations(value: Any, clause: Node) -> int:
    if type(value) is not int or not 0 <= value <= MAX_ITERATIONS_CAP:
        raise DslValueError(f"max-iterations must be an integer from 0 to {MAX_ITERATIONS_CAP}, got "
                            f"{to_source(value)}", clause)
    return value


def _test_command(value: Any, clause: Node) -> None:
    if type(value) is not str:
        raise DslTypeError(f"test-command must be a string, the command the validator runs (e.g. "
                           f"\"python -m pytest -q\"), got {to_source(value, limit=81)[:80]}", clause)


def _budget(max_iterations: int, ev: Evaluation, node: Node) -> Budget:
    """The loop's budget: its own iterations, within what is left of the enclosing run's."""
    outer = current_run()
    if outer is None:
        left = ev.deadline.left()
        return Budget(max_iterations=max_iterations, timeout_s=None if left is None else max(left, 0.001))
    return outer.budget.within(outer.spent(), outer.time_left(), node.location, max_iterations=max_iterations)


def _checkpoint(ev: Evaluation, node: Node) -> dict[str, Any]:
    """Where the loop's run is recorded when the enclosing run is (a compiled program with
    `checkpoint` and `run_id`): the same store, under a run id derived from the enclosing one, the
    form's position and how many times the form has run, so a resumed program replays its loops too."""
    count = ev.loop_runs[node] = ev.loop_runs.get(node, 0) + 1
    outer = current_run()
    if outer is None or outer.replay is None:
        return {}
    return {"checkpoint": outer.replay.store, "run_id": f"{outer.replay.run_id}/{node.line}:{node.col}#{count}"}


def _fold(prediction: Any, form: LoopForm, ev: Evaluation, node: Node) -> None:
    """The loop's run into the enclosing one: its trace, calls, tokens and histories; its warnings
    into the program's, at the form's position."""
    outer = current_run()
    if outer is not None:
        outer.trace.extend(prediction.trace)
        outer.counted.incr(requests=prediction.lm_calls, replayed=prediction.replayed, cached=prediction.cached)
        outer.usage.tokens += prediction.tokens
        top = min((step.depth for step in prediction.trace), default=0)
        for step in prediction.trace:  # the tokens of the call the form ran in (the program's step) count the loop's
            if step.depth == top and step.tokens and not step.replayed:
                outer.usage.entries.append({"prompt_tokens": step.tokens["input"],
                                            "completion_tokens": step.tokens["output"]})
        if outer.usage.cost_usd is not None and prediction.cost_usd is not None:
            outer.usage.cost_usd += prediction.cost_usd
        for role, history in prediction.histories.items():
            outer.histories.extend(role, history.messages)
    for warning in prediction.warnings:
        ev.warn(f"{form.name}: {warning}", node)


# The phases of the loop form running in this context, by role, with the run they are evaluated in: each form's
# module is built once, when the form is analysed, with dispatchers to these, so a run of the form builds no module.
_running_phases: contextvars.ContextVar[tuple[dict[str, Any], Evaluation]] = contextvars.ContextVar(
    "loops_sexp_running_phases")


def _dispatcher(form: LoopForm, role: str, clause: Node) -> Callable[..., Any]:
    """The module's phase `role`: called with its contract's arguments, it runs this run's procedure for the role
    in the program's evaluation and checks what it returned (a decision, a verdict)."""
    check = _decision(clause) if role == "controller" else _verdict(clause) if role == "critic" else None
    boxed = role == form.boxed

    def phase(*args: Any) -> Any:
        procedures, ev = _running_phases.get()
        procedure = procedures[role]
        if args and type(args[0]) is _Attempt:  # the controller's executor_result
            args = (args[0].value, *args[1:])
        if type(procedure) is Closure:
            value = run_closure(procedure, args, clause, ev)
        else:
            value = call_python(procedure, args, None, clause)
        if check is not None:
            value = check(value)
        return _Attempt(value) if boxed else value

    phase.__qualname__ = role
    return phase


def _loop_form(name: str, build: Callable[..., Any], inputs: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    form = LOOP_FORMS[name]

    @special_form(name)
    def analyze(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
        clauses = _analyze_clauses(analyzer, node, form)
        value_clauses = [key for key in ("max-iterations", *form.inputs, *form.optional) if key in clauses]
        roles = [role for role in form.contracts if role in clauses]  # a judge left out: the checks alone approve
        people = {role: clauses[role][1] for role in roles if isinstance(clauses[role][1], Human)}
        analyzer.people.extend(people.values())
        module = build({role: people.get(role) or _dispatcher(form, role, clauses[role][0]) if role in clauses
                        else "checks" for role in form.contracts}, analyzer.interpreter)

        def run(env: Env, ev: Evaluation) -> Any:
            ev.tick(node)
            values = {key: clauses[key][1](env, ev) for key in value_clauses}
            max_iterations = _iterations(values["max-iterations"], clauses["max-iterations"][0])
            if "test-command" in values:
                _test_command(values["test-command"], clauses["test-command"][0])
            config = {key: values[key] for key in value_clauses if key != "checks"}
            if "checks" in values:
                values["checks"] = _checks(values["checks"], clauses["checks"][0], ev)
            phases = {}
            for role in (role for role in roles if role not in people):  # in the contract's order
                clause, procedure = clauses[role]
                phases[role] = _phase(form, role, clause, procedure(env, ev), config)
            if max_iterations == 0:
                return NIL
            token = _running_phases.set((phases, ev))
            try:
                prediction = module(**inputs(values), budget=_budget(max_iterations, ev, node),
                                    **_checkpoint(ev, node))
            except AwaitingInput as pause:  # a person is to answer: the program pauses with the loop's work
                _fold(pause.prediction, form, ev, node)
                raise
            finally:
                _running_phases.reset(token)
            _fold(prediction, form, ev, node)
            ev.last_loop = (prediction.stop_reason, bool(prediction.success))
            final = _unbox(prediction.final)
            return NIL if final is None else to_dsl(final)

        return run


@dataclass(frozen=True)
class ProgramOutcome:
    """How a program run ended: its value, its stop reason and whether it succeeded (`program_outcome`)."""

    value: Any
    stop_reason: str
    success: bool


def program_outcome(ev: Evaluation) -> ProgramOutcome:
    """The one rule of a DSL program's success (docs/dsl.md): a program whose value is a record with a boolean
    `success` gives its own verdict (stop reason `completed`); else a program that ran a loop form ends as its
    last loop form did (`approved`, `stopped`, `max_iterations`, ... and that loop's success); else it
    succeeded by running to its end (`completed`)."""
    value = ev.value
    verdict = get_field(value, "success") if isinstance(value, dict) or is_list(value) else NIL
    if isinstance(verdict, bool):
        return ProgramOutcome(value, "completed", verdict)
    if ev.last_loop is not None:
        return ProgramOutcome(value, *ev.last_loop)
    return ProgramOutcome(value, "completed", True)


def _execute_validate(phases: dict[str, Any], interpreter: Any) -> Any:
    from loops.patterns.execute_validate import ExecuteValidateController

    # The phases work in the interpreter's workspace, where its shell tool runs. A person in the executor's place
    # writes the code as the built-in executor would; a procedure's value goes boxed (`LoopForm.boxed`).
    workspace = interpreter.workspace or os.getcwd()
    return ExecuteValidateController(executor=phases["executor"], validator=phases["validator"],
                                     controller=phases["controller"], workspace=workspace)


def _director(phases: dict[str, Any], interpreter: Any) -> Any:
    from loops.patterns.director import DirectorExecutorEvaluatorController

    return DirectorExecutorEvaluatorController(**phases)


def _creator_critic(phases: dict[str, Any], interpreter: Any) -> Any:
    from loops.patterns.creator_critic import CreatorCriticIterator

    return CreatorCriticIterator(**phases)


_loop_form("iterative-loop", _execute_validate,
           lambda values: {"initial_input": values["initial-input"], "test_command": values["test-command"]})
_loop_form("director-evaluator-loop", _director, lambda values: {"initial_input": values["initial-director-input"],
                                                                  "checks": values.get("checks")})
_loop_form("creator-critic-loop", _creator_critic,
           lambda values: {"requirements": values["requirements"], "context": values.get("context", ""),
                           "checks": values.get("checks")})

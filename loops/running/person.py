"""A person in the loop: a role answered by a human (`loops.human()`), at the terminal, in Jupyter, from an
answer function, or later, from another process.

`loops.human()` goes wherever a role or phase goes (`CreatorCriticIterator(critic=loops.human())`, a DSL
loop form's `(critic (human))`). A person in an LLM role's place answers with that role's own output
fields (the critic's `approved`, `feedback` and criteria; the evaluator's `status` and `feedback`; the
Director's controller's `action` and `next_input`); in a phase that has no LLM role (the Execute–Validate
validator and controller) with the answer fields of its contract (`loops.vocabulary.contracts`). Each answer is
checked like an LM's: every value is parsed to its field's type by the parser DSPy's adapters use, and an
answer that does not fit is refused (`AnswerError`, naming every field and its type).

A person's turn is a role call of the run like any other (`loops.running.runtime.Run.call`): traced (its `Step` is
marked `human`), kept in the role's history, recorded in the checkpoint and replayed on resume, with
nothing asked again. It sends no LM request. Who answers, first found:

1. the answer recorded for this question in the run's checkpoint (`answer`, `loops runs answer`);
2. the function given to `loops.human(answer=...)` (called with the `Question`; it returns the fields, or
   None when nobody can answer now);
3. unless `interactive=False`: the function of `answering(...)` in this context (the `loops` command's
   terminal prompt), else a person at hand (`person_at_hand`: stdin is a terminal, or a Jupyter kernel
   that takes input), asked with `input()` (`ask_at_terminal`);
4. nobody: the call raises `AwaitingInput`, and the run pauses with the stop reason "awaiting_input", its
   checkpoint holding the question (`pending_question`, `loops runs show`). A run with a person in it, no
   checkpoint and nobody to answer is a `ConfigurationError` before it starts.

While a person answers, no deadline fires, and the run's clock moves forward by the wait
(`loops.vocabulary.context.paused`): a person's time is not charged to the run.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import dspy
from dspy.adapters.utils import parse_value
from pydantic import BaseModel

from loops.errors import AnswerError, AwaitingInput, ConfigurationError
from loops.recording.checkpoint import CheckpointStore, QuestionRecord, opened, unknown_run
from loops.signatures.creator_critic import CRITERIA
from loops.signatures.results import CodeRequest, ControllerDecision
from loops.vocabulary.contracts import PhaseContract

__all__ = ["AnswerField", "Answerer", "Human", "Question", "answer", "answering", "ask_at_terminal", "human",
           "nobody_to_answer", "pending_question", "person_at_hand", "phase_value"]

# Fields a person may leave out because their `approved` says them: approving passes every criterion (the
# critic's own rule: approved only when all pass); a rejection that names none leaves them unsaid.
_FOLLOW_APPROVAL = frozenset(f"{name}_passed" for name in CRITERIA)
_SHOWN_CHARS = 20_000  # of one input shown to a person


@dataclass(frozen=True)
class AnswerField:
    """One field a person answers: its name, type (`annotation`) and description. A text field left out is
    empty; a criterion of the critic left out follows `approved`; every other field must be given."""

    name: str
    annotation: Any
    description: str

    @property
    def kind(self) -> str:
        """The type in a few words: "true or false", "PASS or FAIL", "text", "a number"."""
        annotation = self.annotation
        if annotation is bool:
            return "true or false"
        if annotation is str:
            return "text"
        if annotation is int:
            return "a whole number"
        if annotation is float:
            return "a number"
        if get_origin(annotation) is Literal:
            choices = [str(choice) for choice in get_args(annotation)]
            return " or ".join(choices) if len(choices) == 2 else "one of " + ", ".join(choices)
        return getattr(annotation, "__name__", str(annotation))

    @property
    def optional(self) -> bool:
        return self.annotation is str or self.name in _FOLLOW_APPROVAL

    def describe(self) -> str:
        """`name (type)`, with what leaving it out means."""
        left_out = "" if not self.optional else (
            "; left out: empty" if self.annotation is str else "; left out: true when approved")
        return f"{self.name} ({self.kind}{left_out})"

    def parse(self, value: Any) -> Any:
        """`value` (text as typed, or a Python value) as this field's type, as DSPy's adapters parse an LM's
        answer (a choice in any case: a person types "pass" for PASS); `ValueError` saying what was expected."""
        if get_origin(self.annotation) is Literal and isinstance(value, str):
            value = next((choice for choice in get_args(self.annotation)
                          if str(choice).lower() == value.strip().lower()), value)
        try:
            return parse_value(value, self.annotation)
        except Exception:  # pydantic's ValidationError, an enum's ValueError, a parser's own errors
            raise ValueError(f"{self.name} must be {self.kind}, got {value!r:.80}") from None


@dataclass(frozen=True)
class Question:
    """What a person is asked: the role, the iteration, the role's instructions, its inputs as text and the
    fields to answer. `text()` shows it; `answer_from(values)` checks an answer."""

    role: str
    iteration: int
    instructions: str
    inputs: dict[str, str]
    fields: tuple[AnswerField, ...]
    note: str = ""

    def answer_from(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The answer `values` make, each parsed to its field's type and the fields left out filled in;
        `AnswerError` naming every field and its type when one is unknown, missing or of another type."""
        if not isinstance(values, Mapping):
            raise AnswerError(f"the {self.role}'s answer must be a mapping of its fields, got {values!r:.100}; "
                              f"{self.fields_text()}")
        known = {field.name for field in self.fields}
        problems = [f"it has no field {name!r}" for name in values if name not in known]
        answer: dict[str, Any] = {}
        for field in self.fields:
            value = values.get(field.name)
            if value is None or (value == "" and field.optional):
                if not field.optional:
                    problems.append(f"{field.name} is missing")
                continue
            try:
                answer[field.name] = field.parse(value)
            except ValueError as error:
                problems.append(str(error))
        if problems:
            raise AnswerError(f"the {self.role}'s answer is refused: {'; '.join(problems)}. {self.fields_text()}")
        return self._completed(answer)

    def _completed(self, answer: dict[str, Any]) -> dict[str, Any]:
        for field in self.fields:
            if field.name not in answer and field.annotation is str:
                answer[field.name] = ""
            elif field.name not in answer and field.name in _FOLLOW_APPROVAL and answer.get("approved") is True:
                answer[field.name] = True
        return {field.name: answer[field.name] for field in self.fields if field.name in answer}

    def fields_text(self) -> str:
        return f"The {self.role} answers with: " + ", ".join(field.describe() for field in self.ordered()) + "."

    def ordered(self) -> tuple[AnswerField, ...]:
        """The fields as a person fills them: those that must be given, then text, then the critic's criteria."""
        return tuple(sorted(self.fields, key=lambda field: (field.optional, field.name in _FOLLOW_APPROVAL)))

    def asked(self) -> tuple[AnswerField, ...]:
        """The fields asked for at a prompt: all but the critic's criteria, which follow `approved` there (an
        answer function or `loops runs answer --set` may give them)."""
        return tuple(field for field in self.ordered() if field.name not in _FOLLOW_APPROVAL)

    def usage(self) -> str:
        """The `--set` options of `loops runs answer` for this question."""
        return " ".join(f"--set {field.name}={_placeholder(field)}" for field in self.asked())

    def text(self) -> str:
        """The question as a person reads it: whose turn, the instructions, each input, the fields."""
        lines = [f"The {self.role}'s turn (iteration {self.iteration}) is a person's.", "", self.instructions.strip()]
        if self.note:
            lines += ["", self.note.strip()]
        for name, shown in self.inputs.items():
            lines += ["", f"{name}:", *(f"  {line}" for line in shown.splitlines() or [""])]
        lines += ["", "Answer with:", *(f"  {field.describe()}: {field.description}" for field in self.ordered())]
        return "\n".join(lines)


def _placeholder(field: AnswerField) -> str:
    if field.annotation is bool:
        return "true|false"
    if get_origin(field.annotation) is Literal:
        return "|".join(str(choice) for choice in get_args(field.annotation))
    return "TEXT" if field.annotation is str else field.kind.upper().replace(" ", "_")


def _shown(value: Any) -> str:
    """An input as a person reads it: text as it is, a model's fields one per line, other values as JSON."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, BaseModel):
        text = "\n".join(f"{name}: {item}" for name, item in value.model_dump().items()
                         if item not in (None, "", [], {}))
    elif isinstance(value, Mapping | list | tuple):
        text = json.dumps(value, indent=2, default=str, ensure_ascii=False)
    else:
        text = str(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + " [...]"


# What answers a person's question: the fields, or None when nobody can answer now.
Answerer = Callable[[Question], Mapping[str, Any] | None]
_answerer: contextvars.ContextVar[Answerer | None] = contextvars.ContextVar("loops_answerer", default=None)


@contextlib.contextmanager
def answering(answerer: Answerer) -> Iterator[Answerer]:
    """Have `answerer(question)` answer every person's question of the runs in this context (unless a role's
    own `answer=` does, or it is not `interactive`): e.g. a prompt of your application's, or a function that
    returns None until someone has answered (then the run pauses)."""
    if not callable(answerer):
        raise ConfigurationError(f"answering takes a function of a loops.running.person.Question, got "
                                 f"{answerer!r:.100}")
    token = _answerer.set(answerer)
    try:
        yield answerer
    finally:
        _answerer.reset(token)


def person_at_hand() -> bool:
    """Whether a person can be asked in this process: in Jupyter, whether the front end takes input (it does not
    when a notebook runs unattended, as under nbmake); elsewhere, whether stdin is a terminal."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # a closed or detached stdin
        return False


_BLOCK = '"""'  # text over several lines, at a prompt: from a line starting with it to a line ending with it


def ask_at_terminal(question: Question, read: Callable[[str], str] | None = None,
                    write: Callable[[str], Any] = print) -> dict[str, Any]:
    """Ask a person with `read` (by default `input()`: a terminal, or Jupyter's input box): the question, then
    each field in turn, asked again until its value fits its type; text over several lines goes between
    \"\"\" and \"\"\". End of input (Ctrl-D) means nobody answers now: `AwaitingInput`."""
    # `input` as it is now: ipykernel puts its own (the cell's input box) in place for each cell it runs.
    read = read if read is not None else builtins.input
    write(question.text())
    write(f'(text over several lines: start it with {_BLOCK} and end it with {_BLOCK})')
    values: dict[str, Any] = {}
    for field in question.asked():
        while True:
            try:
                typed = _typed(read, f"{field.name} ({field.kind}): ")
            except EOFError:
                raise AwaitingInput(question) from None
            if not typed and field.optional:
                break
            try:
                values[field.name] = field.parse(typed)
                break
            except ValueError as error:
                write(f"  refused: {error}")
    return values


def _typed(read: Callable[[str], str], prompt: str) -> str:
    """One answer as typed: a line, or the lines of a block between \"\"\" and \"\"\" (kept as typed)."""
    line = read(prompt)
    if not line.lstrip().startswith(_BLOCK):
        return line.strip()
    lines = [line.lstrip()[len(_BLOCK):]]
    while not lines[-1].rstrip().endswith(_BLOCK) or len(lines) == 1 and lines[0].strip() == "":
        lines.append(read(""))
    lines[-1] = lines[-1].rstrip()[:-len(_BLOCK)]
    return "\n".join(lines).strip("\n")


class Human(dspy.Module):
    """A role answered by a person; build it with `loops.human()`. A loop binds it to the fields of the role
    it stands in for (`bound`, `for_contract`); it holds no run state and no predictor, so optimizers leave it
    alone and `named_predictors()` does not list it."""

    def __init__(self, answer: Answerer | None = None, *, instructions: str = "", interactive: bool = True):
        super().__init__()
        if answer is not None and not callable(answer):
            raise ConfigurationError(f"loops.human(answer=...) takes a function of the question, got {answer!r:.100}")
        if not isinstance(instructions, str):
            raise ConfigurationError(f"loops.human(instructions=...) takes text, got {instructions!r:.100}")
        self.answer = answer
        self.instructions = instructions
        self.interactive = interactive
        self.signature: type[dspy.Signature] | None = None

    def bound(self, signature: type[dspy.Signature]) -> Human:
        """This person in the place of the LLM role of `signature` (its chain-of-thought `reasoning` aside)."""
        twin = Human(self.answer, instructions=self.instructions, interactive=self.interactive)
        twin.signature = signature.delete("reasoning") if "reasoning" in signature.output_fields else signature
        return twin

    def for_contract(self, contract: PhaseContract) -> Human:
        """This person in the place of a phase with no LLM role: the contract's arguments in, its `answers` out."""
        if not contract.answers:
            raise ConfigurationError(f"the {contract.role} phase has no fields a person could answer with; give "
                                     "loops.human() in the place of an LLM role or of a phase whose contract has "
                                     "answers (loops.vocabulary.contracts)")
        fields = {name: (Any, dspy.InputField(desc=name.replace("_", " "))) for name in contract.params
                  if name != "iteration"}
        fields["history"] = (dspy.History, dspy.InputField(desc="Earlier answers in this run"))
        fields.update({name: (annotation, dspy.OutputField(desc=text))
                       for name, (annotation, text) in contract.answers.items()})
        return self.bound(dspy.Signature(fields, contract.ask or f"Answer as the {contract.role}."))

    @property
    def history_field(self) -> str | None:
        if self.signature is None:
            return None
        return next((name for name, info in self.signature.input_fields.items() if info.annotation is dspy.History),
                    None)

    def question(self, role: str, inputs: Mapping[str, Any], iteration: int) -> Question:
        if self.signature is None:
            raise ConfigurationError(f"the {role}'s loops.human() is not bound to the role's fields: give it to a "
                                     "loop, in a role's or phase's place")
        fields = tuple(AnswerField(name, info.annotation, (info.json_schema_extra or {}).get("desc", ""))
                       for name, info in self.signature.output_fields.items())
        shown = {name: _shown(value) for name, value in inputs.items() if name != self.history_field}
        return Question(role, iteration, self.signature.instructions, shown, fields, self.instructions)

    def forward(self, question: Question, answered: Mapping[str, Any] | None = None) -> dspy.Prediction:
        """The person's answer to `question` as a prediction of its fields: `answered` (recorded in the
        checkpoint) when given, else asked (see the module's docstring)."""
        return self._answer(question, answered)

    async def aforward(self, question: Question, answered: Mapping[str, Any] | None = None) -> dspy.Prediction:
        # A prompt blocks: on a worker thread, with this context (its answerer), the event loop stays free.
        return await asyncio.to_thread(contextvars.copy_context().run, self._answer, question, answered)

    def _answer(self, question: Question, answered: Mapping[str, Any] | None) -> dspy.Prediction:
        values = answered if answered is not None else self._ask(question)
        return dspy.Prediction(**question.answer_from(values))

    def _ask(self, question: Question) -> Mapping[str, Any]:
        answerer = self.answer or (_answerer.get() if self.interactive else None)
        if answerer is not None:
            values = answerer(question)
        elif self.interactive and person_at_hand():
            values = ask_at_terminal(question)
        else:
            values = None
        if values is None:
            raise AwaitingInput(question)
        return dict(values.items()) if isinstance(values, dspy.Prediction) else values

    def can_answer(self) -> bool:
        """Whether someone may answer in this process (an answer function, an answerer of this context, a
        person at hand); when not, the run must be able to pause (a checkpoint)."""
        return self.answer is not None or (self.interactive and (_answerer.get() is not None or person_at_hand()))

    def __repr__(self) -> str:
        fields = "" if self.signature is None else ": " + ", ".join(self.signature.output_fields)
        return f"human({'interactive' if self.interactive else 'not interactive'}{fields})"


def human(answer: Answerer | None = None, *, instructions: str = "", interactive: bool = True) -> Human:
    """A role answered by a person: give it in any role's or phase's place, e.g.
    `CreatorCriticIterator(critic=loops.human())`.

    `answer(question)` answers in code (a `loops.running.person.Question` in, a mapping of the fields out, or None
    when nobody can answer now: the run pauses); `instructions` are shown to the person with the role's own;
    `interactive=False` never asks in this process (no terminal or Jupyter prompt): the run pauses for an
    answer from elsewhere (`loops runs answer`, `loops.answer`)."""
    return Human(answer, instructions=instructions, interactive=interactive)


def nobody_to_answer(roles: list[str]) -> ConfigurationError:
    """The mistake of a run with a person in it, nobody to answer in this process and no checkpoint to wait in."""
    named = " and ".join(f"the {role}" for role in roles)
    return ConfigurationError(
        f"{named} {'is' if len(roles) == 1 else 'are'} answered by a person, but nobody can answer here (stdin is "
        "not a terminal, no answer function) and the run has no checkpoint to wait in: give the call checkpoint="
        "'runs.db' and a run_id (the loops command: --checkpoint FILE --run-id ID), so that it pauses with the stop "
        "reason awaiting_input until `loops runs answer` answers, or give loops.human(answer=...) a function")


def phase_value(contract: PhaseContract, answer: Mapping[str, Any], arguments: Mapping[str, Any]) -> Any:
    """What a person's answer in the place of a phase without an LLM role gives the loop: a decision for a
    controller (on `continue`, the next input is the current one with the person's words as its feedback, or
    the current one again when they wrote none; on `stop`, the attempt judged), else the one field's value."""
    if "action" in answer:
        attempt = arguments[contract.params[0]]
        if answer["action"] == "stop":
            return ControllerDecision.stop(attempt)
        current, words = arguments.get("current_input"), str(answer.get("next_input") or "").strip()
        if not words:
            return ControllerDecision.proceed(current)
        return ControllerDecision.proceed(current.retry(words) if isinstance(current, CodeRequest) else words)
    if len(answer) == 1:
        return next(iter(answer.values()))
    return dict(answer)


# --- answering a paused run from anywhere (`loops runs answer`, a notebook cell) ----------------------------


def _pending(store: CheckpointStore, run_id: str) -> QuestionRecord | None:
    """The question run `run_id` (or a run nested in it, a DSL loop form's) waits on, the latest asked."""
    questions = getattr(store, "questions", None)
    found = [] if questions is None else questions(run_id)
    return max(found, key=lambda record: record.asked) if found else None


def pending_question(checkpoint: str | os.PathLike[str] | CheckpointStore, run_id: str) -> Question | None:
    """The question the paused run `run_id` of `checkpoint` waits on (None when it waits on none)."""
    with opened(checkpoint) as store:
        record = _pending(store, run_id)
    return None if record is None else record.unpack()


def answer(checkpoint: str | os.PathLike[str] | CheckpointStore, run_id: str, /, *, replace: bool = False,
           **values: Any) -> dict[str, Any]:
    """Record a person's answer to the question the paused run `run_id` waits on (values as Python values or as
    text, e.g. `approved="true"`); returns the answer as recorded. Resuming the run (the same call with
    `run_id`) gives it to the role. `AnswerError` names every field and its type when the answer does not fit;
    `ConfigurationError` when the run is not in the checkpoint or waits on no question, and when its question
    has an answer already and `replace` is not true (a person's answer is not overwritten unawares)."""
    with opened(checkpoint) as store:
        record = _pending(store, run_id)
        if record is None:
            raise _waits_on_nothing(store, run_id)
        question = record.unpack()
        if record.answer is not None and not replace:
            earlier = ", ".join(f"{name}={value!r}" for name, value in json.loads(record.answer).items())
            raise ConfigurationError(
                f"run {run_id!r} already has an answer to the {question.role}'s question ({earlier}), which resuming "
                "it will use: to record this one instead, answer with --replace (`loops runs answer`) or replace=True "
                "(`loops.answer`)")
        recorded = question.answer_from(values)
        store.record_answer(record.run_id, json.dumps(recorded))
    return recorded


def _waits_on_nothing(store: CheckpointStore, run_id: str) -> ConfigurationError:
    """Why `run_id` has no question to answer: it is not in the checkpoint, or it ended (or waits) otherwise."""
    runs = {run.run_id: run for run in store.runs()}
    if run_id not in runs:
        return unknown_run(run_id, runs, getattr(store, "path", None))
    ended = runs[run_id].stop_reason
    how = f"it ended with stop reason {ended}" if ended else "it has not ended (it may be running)"
    return ConfigurationError(f"run {run_id!r} waits on no person's answer in {_where(store)}: {how}")


def _where(store: CheckpointStore) -> str:
    path = getattr(store, "path", None)
    return repr(str(path)) if path is not None else "the checkpoint"

"""`defatom`: an LLM task declared in the DSL, which becomes its own DSPy Signature and predictor.

    (defatom user:summarize
      (params (text string) (limit int) (style optional string))   ; `optional`: may be left out (nil)
      (instructions "Summarize {{text}} in at most {{limit}} words.")
      (returns (summary string) (keywords list))   ; optional: without it, one output `content`
      (description "One-paragraph summaries")      ; optional
      (model "openai/gpt-4o-mini"))                ; optional: the LM of this atom alone (unless the run
                                                   ; overrides every atom's: compile(..., atom_model=...))

`{{p}}` names the input field `p`; the value travels as that field (the instructions only refer to
it), so an optimizer may rewrite the instructions freely. `(output_format ((type "json") (schema
"StructuredAnalysisResult")))` takes the outputs from a known schema instead of `returns`: one of `SCHEMAS`
or a pydantic model the host registers (`compile(..., schemas={"DevelopmentPlan": DevelopmentPlan})`);
a dotted name such as `"src.system.models.DevelopmentPlan"`, as the seed project wrote them, names the
registered schema by its last part (nothing is imported). With either, the record also holds the
outputs under `parsedContent`, as the seed project's programs expect. The form's
value is the atom's name; a call `(user:summarize (text "...") (limit 50))` (named or positional
arguments) returns a record of the outputs plus `status` "COMPLETE".

Inside a loop run (a compiled program is one, and so is every loop form) a call is a role call of
that run: traced, budget-checked, retried, with the atom's own signature-keyed `dspy.History`. An
atom whose LM fails for good returns a record with `status` "FAILED" and `error`, plus a warning, so
the program can branch on it; a spent budget ends the run gracefully.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Mapping
from typing import Any

import dspy
from pydantic import BaseModel

from loops.errors import ConfigurationError, RoleFailed
from loops.sexp.errors import ArityError, DslValueError
from loops.sexp.evaluator import Analyzer, Env, Evaluation, Exec, special_form
from loops.sexp.reader import Node
from loops.sexp.values import NIL, Symbol, to_dsl, to_source
from loops.signatures.results import StructuredAnalysisResult, TaskResult, ValidationResult
from loops.vocabulary.context import current_run
from loops.vocabulary.profile import adapter_for

__all__ = ["SCHEMAS", "TYPES", "Atom", "atom_predictors"]

TYPES: Mapping[str, Any] = {
    "string": str, "str": str, "text": str,
    "int": int, "integer": int,
    "float": float, "number": float,
    "bool": bool, "boolean": bool,
    "list": list, "dict": dict, "object": dict, "record": dict,
    "any": Any,
}
SCHEMAS: Mapping[str, type[BaseModel]] = {
    model.__name__: model for model in (StructuredAnalysisResult, TaskResult, ValidationResult)
}
_CLAUSES = ("params", "instructions", "returns", "output_format", "description", "model")
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}\s]+)\s*\}\}")

# The predictors of the program being run, by atom name: a compiled program's own (possibly
# optimized) copies, which replace the ones made when the atom was analysed.
atom_predictors: contextvars.ContextVar[Mapping[str, dspy.Predict] | None] = contextvars.ContextVar(
    "loops_sexp_atom_predictors", default=None)


def _field_name(name: str) -> str:
    """A DSL name as a signature's field name: `next-input` as `next_input`, and a name DSPy's
    Signature class uses itself (`instructions`, `fields`, ...) with a trailing underscore."""
    field = re.sub(r"\W", "_", name.replace("-", "_"))
    return f"{field}_" if hasattr(dspy.Signature, field) else field


class Atom:
    """An LLM task: its signature, a predictor, and the mapping between DSL names and field names."""

    named_arguments = True  # `(atom (param value) ...)` passes named arguments

    def __init__(self, name: str, params: list[tuple[str, Any]], instructions: str,
                 outputs: list[tuple[str, Any]], description: str = "", lm: dspy.BaseLM | None = None,
                 structured: bool = False, optional: frozenset[str] = frozenset(), model: str | None = None):
        self.name = name
        self.model = model  # what its (model ...) clause names, if it has one
        self.structured = structured
        self.params = tuple(param for param, _ in params)
        self.optional = optional  # parameters a call may leave out: they travel as None
        self.outputs = tuple(output for output, _ in outputs)
        self._fields = {name: _field_name(name) for name in (*self.params, *self.outputs)}
        fields: dict[str, tuple[Any, Any]] = {}
        for param, kind in params:
            fields[_field_name(param)] = (kind | None if param in optional and kind is not Any else kind,
                                          dspy.InputField())
        fields["history"] = (dspy.History, dspy.InputField(desc="Your earlier calls in this run"))
        for output, kind in outputs:
            fields[_field_name(output)] = (kind, dspy.OutputField())
        text = instructions + (f"\n\n{description}" if description else "")
        class_name = "".join(part.capitalize() for part in re.split(r"\W+", name) if part) or "Atom"
        self.signature = dspy.make_signature(fields, text, signature_name=f"{class_name}Signature")
        self.predictor = dspy.Predict(self.signature)
        if lm is not None:
            self.predictor.set_lm(lm)

    @property
    def dsl_label(self) -> str:
        return f"atom '{self.name}'"

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        inputs = self._bind(args, kwargs)
        predictor = (atom_predictors.get() or {}).get(self.name, self.predictor)
        run = current_run()
        if run is None:  # a bare interpreter (a REPL, `evaluate`): one plain predictor call
            # The adapter the atom's LM needs, as the runtime picks it.
            adapter = dspy.settings.adapter or adapter_for(predictor.lm or dspy.settings.lm)
            with dspy.context(adapter=adapter):
                prediction = predictor(**inputs, history=dspy.History(messages=[]))
        else:
            try:
                prediction = run.call_now(self.name, predictor, **inputs)
            except RoleFailed as failure:
                run.warn(f"atom {self.name} failed: {failure}")
                return {"status": "FAILED", "error": str(failure)}
        record = {output: _value(prediction.get(self._fields[output])) for output in self.outputs}
        if self.structured:  # the seed project's programs read a structured atom's fields from here
            record["parsedContent"] = dict(record)
        record["status"] = "COMPLETE"
        return record

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.params):
            raise ArityError(f"atom '{self.name}' takes {len(self.params)} argument(s) "
                             f"({' '.join(self.params)}), got {len(args)}")
        values = dict(zip(self.params, args, strict=False))
        for key, value in kwargs.items():
            if key not in self.params:
                raise ArityError(f"atom '{self.name}' has no parameter '{key}' (its parameters: "
                                 f"{' '.join(self.params) or 'none'})")
            if key in values:
                raise ArityError(f"atom '{self.name}' got parameter '{key}' both by position and by name")
            values[key] = value
        missing = [param for param in self.params if param not in values and param not in self.optional]
        if missing:
            raise ArityError(f"atom '{self.name}' got no value for its parameter '{missing[0]}'")
        return {self._fields[param]: _plain(values.get(param)) for param in self.params}

    def __repr__(self) -> str:
        return f"<Atom {self.name} ({' '.join(self.params)})>"


def _plain(value: Any) -> Any:
    """A DSL value as the Python value a prompt shows: nil as None, lists as lists."""
    if value is NIL:
        return None
    if type(value) is tuple:
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        value = value.model_dump()
    return to_dsl(value)


def _fields(analyzer: Analyzer, clause: Node, what: str, optional: set[str] | None = None) -> list[tuple[str, Any]]:
    """`(params (name type) ...)` or `(returns (name type) ...)`: names and Python types.

    With `optional` (for params), `(name optional type)` is accepted too, as the seed project wrote
    it, and the name is added to `optional`."""
    found: list[tuple[str, Any]] = []
    for item in clause.value[1:]:
        entry = item.value if item.is_list else ()
        is_optional = optional is not None and len(entry) == 3 and entry[1].symbol == "optional"
        if is_optional:
            entry = (entry[0], entry[2])
        if not (len(entry) == 2 and entry[0].symbol and entry[1].symbol):
            shape = "(name type) or (name optional type)" if optional is not None else "(name type)"
            raise analyzer.syntax_error(f"a {what} entry is {shape}, e.g. (text string); got "
                                        f"{to_source(item.to_value())}", item)
        name, kind = entry[0].symbol, entry[1].symbol
        if kind not in TYPES:
            raise analyzer.syntax_error(f"unknown type '{kind}' (the types: {' '.join(TYPES)})", entry[1])
        if name in (entry for entry, _ in found):
            raise analyzer.syntax_error(f"{what} '{name}' is given twice", entry[0])
        if not _field_name(name).isidentifier() or _field_name(name).startswith("_"):
            raise analyzer.syntax_error(f"'{name}' cannot name a {what}: it becomes a signature's field, whose name "
                                        "starts with a letter (then letters, digits, - and _)", entry[0])
        if _field_name(name) == "history":
            raise analyzer.syntax_error(f"'history' is the atom's own history input: give the {what} another name",
                                        entry[0])
        if is_optional:
            optional.add(name)
        found.append((name, TYPES[kind]))
    return found


def _string(analyzer: Analyzer, clause: Node) -> str:
    if len(clause.value) != 2 or not isinstance(clause.value[1].value, str) or clause.value[1].symbol:
        raise analyzer.syntax_error(f'expected ({clause.value[0].symbol} "text")', clause)
    return clause.value[1].value


def _schema_outputs(analyzer: Analyzer, clause: Node) -> list[tuple[str, Any]]:
    options = {}
    spec = clause.value[1] if len(clause.value) == 2 and clause.value[1].is_list else None
    for item in spec.value if spec is not None else ():
        if item.is_list and len(item.value) == 2 and item.value[0].symbol and isinstance(item.value[1].value, str):
            options[item.value[0].symbol] = item.value[1].value
    known = {**SCHEMAS, **analyzer.interpreter.schemas}
    name = options.get("schema", "")
    schema = known.get(name) or known.get(name.rpartition(".")[2])  # "src.system.models.Plan" names "Plan"
    if spec is None or options.get("type") != "json" or schema is None:
        raise analyzer.syntax_error(
            f'expected (output_format ((type "json") (schema "NAME"))) with NAME one of {", ".join(known)} '
            "(the host registers more with compile(..., schemas={name: pydantic model}))", clause)
    return [(name, info.annotation) for name, info in schema.model_fields.items()]


@special_form("defatom")
def _defatom(analyzer: Analyzer, node: Node, tail: bool) -> Exec:
    items = node.value
    usage = '(defatom NAME (params (p type) ...) (instructions "... {{p}} ...") [(returns (field type) ...)] ...)'
    if len(items) < 2:
        raise analyzer.syntax_error(f"malformed defatom: expected {usage}", node)
    name = analyzer.name(items[1], "the atom's name")
    clauses: dict[str, Node] = {}
    for clause in items[2:]:
        key = clause.value[0].symbol if clause.is_list and clause.value else None
        if key not in _CLAUSES:
            raise analyzer.syntax_error(f"defatom has no clause {to_source(clause.to_value())[:40]} "
                                        f"(its clauses: {' '.join(_CLAUSES)})", clause)
        if key in clauses:
            raise analyzer.syntax_error(f"defatom clause '{key}' is given twice", clause)
        clauses[key] = clause
    if "instructions" not in clauses:
        raise analyzer.syntax_error(f"defatom {name} needs (instructions \"...\"): {usage}", node)
    optional: set[str] = set()
    params = _fields(analyzer, clauses["params"], "parameter", optional) if "params" in clauses else []
    instructions = _string(analyzer, clauses["instructions"])
    for placeholder in _PLACEHOLDER.findall(instructions):
        if placeholder not in dict(params):
            raise analyzer.syntax_error(f"the instructions name {{{{{placeholder}}}}}, which is not a parameter "
                                        f"of {name} (its parameters: {' '.join(dict(params)) or 'none'})",
                                        clauses["instructions"].value[1])
    # The value travels as its field: the instructions only point at it.
    instructions = _PLACEHOLDER.sub(lambda match: f"`{_field_name(match.group(1))}`", instructions)
    if "returns" in clauses and "output_format" in clauses:
        raise analyzer.syntax_error("give either (returns ...) or (output_format ...), not both", clauses["returns"])
    if "output_format" in clauses:
        outputs = _schema_outputs(analyzer, clauses["output_format"])
    elif "returns" in clauses:
        outputs = _fields(analyzer, clauses["returns"], "output")
    else:
        outputs = [("content", str)]
    if not outputs:
        raise analyzer.syntax_error("(returns ...) needs at least one (field type)", clauses["returns"])
    shared = sorted({_field_name(name) for name, _ in params} & {_field_name(name) for name, _ in outputs})
    if shared:
        raise analyzer.syntax_error(f"{name}: '{shared[0]}' is both a parameter and an output; an LLM task's "
                                    "outputs need names of their own (e.g. improved-text)",
                                    clauses.get("returns", clauses.get("output_format", node)))
    description = _string(analyzer, clauses["description"]) if "description" in clauses else ""
    model = _string(analyzer, clauses["model"]) if "model" in clauses else None
    lm = analyzer.interpreter.atom_model  # the run's override of every atom's model, if any
    if lm is None and model is not None:
        from loops.lm import resolve  # checked now: an unknown model fails before the program runs

        try:
            lm = resolve(model)
        except ConfigurationError as error:
            raise DslValueError(str(error), clauses["model"].value[1]) from None
    atom = Atom(name, params, instructions, outputs, description, lm,
                structured="output_format" in clauses or "returns" in clauses, optional=frozenset(optional),
                model=model)
    # Later forms call it with named arguments, and a compiled program lists it among its predictors.
    analyzer.interpreter.named_operators.add(name)
    analyzer.interpreter.atoms[name] = atom
    symbol = Symbol(name)

    def defatom(env: Env, ev: Evaluation) -> Any:
        env.vars[name] = atom
        return symbol

    return defatom

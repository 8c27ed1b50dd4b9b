"""`defatom`: each atom its own Signature and predictor; calls by name or position; records back."""

from __future__ import annotations

import subprocess
import sys
from typing import Literal

import dspy
import pytest
from pydantic import BaseModel

from loops.sexp import ArityError, Atom, DslSyntaxError, DslValueError, Interpreter
from tests.scripted import scripted_lm

ANALYZE = """(defatom user:analyze
  (params (goal string) (tries int))
  (instructions "Judge {{goal}} after {{tries}} tries.")
  (output_format ((type "json") (schema "StructuredAnalysisResult")))
  (description "One verdict per iteration"))"""


def atom(source: str) -> Atom:
    interpreter = Interpreter()
    name = interpreter.eval_source(source)
    return interpreter.globals.vars[name]


def test_an_atom_is_its_own_signature_with_typed_fields_a_history_and_the_schemas_outputs():
    analyze = atom(ANALYZE)
    signature = analyze.predictor.signature
    assert signature.__name__ == "UserAnalyzeSignature"
    assert signature.instructions == "Judge `goal` after `tries` tries.\n\nOne verdict per iteration"
    assert {name: field.annotation for name, field in signature.input_fields.items()} == {
        "goal": str, "tries": int, "history": dspy.History}
    assert list(signature.output_fields) == ["success", "analysis", "next_input", "new_files"]


def test_without_returns_an_atom_answers_content():
    signature = atom('(defatom ask (params (q string)) (instructions "Answer {{q}}"))').predictor.signature
    assert list(signature.output_fields) == ["content"]


def test_names_dspy_signatures_use_themselves_are_fields_with_an_underscore():
    plan = atom('(defatom plan (params (goal string)) (instructions "Plan {{goal}}") '
                '(returns (instructions string) (files list)))')
    assert list(plan.predictor.signature.output_fields) == ["instructions_", "files"]
    lm = scripted_lm([{"instructions_": "do it", "files": ["a.py"]}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        record = plan(goal="x")
    assert record == {"instructions": "do it", "files": ("a.py",), "status": "COMPLETE",
                      "parsedContent": {"instructions": "do it", "files": ("a.py",)}}


def test_a_call_binds_named_and_positional_arguments_and_returns_a_record():
    interpreter = Interpreter()
    lm = scripted_lm([{"content": "first"}, {"content": "second"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        value = interpreter.eval_source('(defatom ask (params (q string) (n int)) (instructions "{{q}} {{n}}"))\n'
                                        '(list (get-field (ask (q "why") (n 1)) "content") '
                                        '(get-field (ask "how" 2) "status"))')
    assert value == ("first", "COMPLETE")
    assert "[[ ## q ## ]]\nhow" in lm.engine.requests[1].messages[-1].text


@pytest.mark.parametrize("call, message", [
    ('(ask (q "x"))', "atom 'ask' got no value for its parameter 'n'"),
    ('(ask (q "x") (n 1) (z 2))', "atom 'ask' has no parameter 'z' (its parameters: q n)"),
    ('(ask "x" 1 2)', "atom 'ask' takes 2 argument(s) (q n), got 3"),
    ('(ask "x" (q "y"))', "atom 'ask' got parameter 'q' both by position and by name"),
])
def test_wrong_arguments_are_arity_errors_at_the_call(call, message):
    with pytest.raises(ArityError) as raised:
        Interpreter().eval_source(f'(defatom ask (params (q string) (n int)) (instructions "{{{{q}}}}"))\n{call}')
    assert str(raised.value).startswith(f"<string>:2:1: {message}")


@pytest.mark.parametrize("source, message", [
    ('(defatom a (params (q string)))', "defatom a needs (instructions \"...\")"),
    ('(defatom a (instructions "{{p}}"))', "the instructions name {{p}}, which is not a parameter of a"),
    ('(defatom a (params (q strin)) (instructions "x"))', "unknown type 'strin'"),
    ('(defatom a (params (q string)) (instructions "x") (returns (q string)))',
     "a: 'q' is both a parameter and an output"),
    ('(defatom a (params (history string)) (instructions "x"))', "'history' is the atom's own history input"),
    ('(defatom a (instructions "x") (temperature 0))', "defatom has no clause (temperature 0)"),
    ('(defatom a (instructions "x") (output_format ((type "json") (schema "Nope"))))',
     'expected (output_format ((type "json") (schema "NAME")))'),
])
def test_malformed_atoms_are_syntax_errors_before_anything_runs(source, message):
    with pytest.raises(DslSyntaxError, match=message.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")
                       .replace("}", r"\}").replace(".", r"\.")):
        Interpreter().analyze(source)


def test_an_unknown_model_fails_when_the_program_is_read_at_its_position():
    with pytest.raises(DslValueError) as caught:
        Interpreter().analyze('(defatom a (instructions "x")\n  (model "nosuchprovider/model"))', "m.sexp")
    assert str(caught.value) == ("m.sexp:2:10: unknown model 'nosuchprovider/model': LiteLLM knows no provider for "
                                 "it; use 'local' (the embedded model) or a LiteLLM model string such as "
                                 "'openai/gpt-4o-mini'\n      (model \"nosuchprovider/model\"))\n             ^")


SEED_STYLE = """(defatom user:hello (params (name string)) (instructions "Greet {{name}}.") (returns (greeting string))
  (model "gpt-4-turbo"))
(get-field (user:hello (name who)) "greeting")"""


def test_a_bare_hosted_model_is_checked_without_loading_litellm():
    # A seed-style (model "gpt-4-turbo") is known from LiteLLM's price map, read as data: no 3-4 s import.
    program = f"import loops.sexp, sys; loops.sexp.compile({SEED_STYLE!r}); print('litellm' in sys.modules)"
    checked = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)

    assert checked.stdout.strip() == "False", checked.stderr


def test_the_run_may_override_every_atoms_own_model():
    from loops.sexp import compile as compile_program

    lm = scripted_lm([{"greeting": "Hello, Ada"}])
    own = compile_program(SEED_STYLE)
    overridden = compile_program(SEED_STYLE, atom_model=lm)

    assert own.atom_models == {"user:hello": "gpt-4-turbo"} and own.named_predictors()[0][1].lm.model == "gpt-4-turbo"
    assert overridden.named_predictors()[0][1].lm is lm
    assert overridden(who="Ada").result == "Hello, Ada" and len(lm.engine.requests) == 1


def test_an_optional_parameter_may_be_left_out_and_travels_as_none():
    ask = atom('(defatom ask (params (q string) (context optional string))\n'
               '  (instructions "Answer {{q}} ({{context}})"))')
    assert ask.predictor.signature.input_fields["context"].annotation == str | None
    lm = scripted_lm([{"content": "one"}, {"content": "two"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert ask(q="why")["content"] == "one"
        assert ask(q="why", context="docs")["content"] == "two"
    assert "[[ ## context ## ]]\nNone" in lm.engine.requests[0].messages[-1].text
    assert "[[ ## context ## ]]\ndocs" in lm.engine.requests[1].messages[-1].text
    with pytest.raises(ArityError, match="got no value for its parameter 'q'"):
        ask(context="docs")


class Verdict(BaseModel):
    decision: Literal["CONTINUE", "STOP"]
    notes: str


@pytest.mark.parametrize("schema", ["Verdict", "src.system.models.Verdict"])
def test_a_schema_the_host_registers_gives_the_outputs_also_by_its_dotted_name(schema):
    interpreter = Interpreter(schemas={"Verdict": Verdict})
    name = interpreter.eval_source(f'(defatom judge (params (x string)) (instructions "Judge {{{{x}}}}")'
                                   f' (output_format ((type "json") (schema "{schema}"))))')
    judge = interpreter.globals.vars[name]
    assert {field: info.annotation for field, info in judge.predictor.signature.output_fields.items()} == {
        "decision": Literal["CONTINUE", "STOP"], "notes": str}
    lm = scripted_lm([{"decision": "STOP", "notes": "done"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert judge(x="it") == {"decision": "STOP", "notes": "done", "status": "COMPLETE",
                                 "parsedContent": {"decision": "STOP", "notes": "done"}}


def test_an_unknown_schema_names_the_known_ones_and_bad_schemas_are_a_configuration_error():
    from loops import ConfigurationError

    with pytest.raises(DslSyntaxError, match=r"with NAME one of StructuredAnalysisResult, TaskResult, "
                                             r"ValidationResult, Verdict \(the host registers more"):
        Interpreter(schemas={"Verdict": Verdict}).analyze(
            '(defatom a (instructions "x") (output_format ((type "json") (schema "Plan"))))')
    with pytest.raises(ConfigurationError, match="schemas must map names"):
        Interpreter(schemas={"Verdict": dict})

"""A user's checks (`loops.vocabulary.checks`): each built-in states its rule and its failure precisely, holds on what
meets it, pickles and compares by value, never changes the draft; the short form; custom checks; the report."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pydantic
import pytest

from loops import ConfigurationError, ContractError
from loops.vocabulary.checks import (
    SPEC_FORMS,
    Avoid,
    CapitalizedLines,
    CheckReport,
    CheckResult,
    Count,
    EndsWith,
    Include,
    ListOf,
    Matches,
    MatchesModel,
    MatchesSchema,
    Mentions,
    StartsWith,
    ValidJson,
    as_checks,
    parse_check,
    rule_of,
    run_checks,
    stated_rules,
)


class Product(pydantic.BaseModel):
    name: str
    price: float


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

# (check, its rule, a draft that fails it, the message, a draft that meets it)
BUILT_INS = [
    (Count("word", max=40), "Use at most 40 words.", "word " * 63, "has 63 words; use at most 40", "A short one."),
    (Count("word", min=10), "Use at least 10 words.", "Too short.", "has 2 words; use at least 10",
     "one two three four five six seven eight nine ten"),
    (Count("word", 3, 5), "Use between 3 and 5 words.", "Just one", "has 2 words; use between 3 and 5",
     "Don't stop, well-known friend."),  # a contraction and a hyphenated word are one word each
    (Count("sentence", 2, 2), "Use exactly 2 sentences.", "One is here. Two is here! Is three here?",
     "has 3 sentences; use exactly 2", "It rains. At 9.30 it stops!"),
    (Count("line", 3, 3), "Use exactly 3 lines.", "First line\n\nSecond line", "has 2 lines; use exactly 3",
     "One\n\n  \nTwo\nThree\n"),
    (Count("character", max=20), "Use at most 20 characters.", "This is longer than twenty.",
     "has 27 characters; use at most 20", "  Short  \n"),
    (Count("word", max=1), "Use at most 1 words.", "Two words", "has 2 words; use at most 1", "One"),
    (Include("wheel"), "Include the word 'wheel'.", "Wheels spin all day.", "does not include the word 'wheel'",
     "A WHEEL, true."),
    (Include("BPA-free"), "Include the word 'BPA-free'.", "Free of BPA.", "does not include the word 'BPA-free'",
     "A bpa-free bottle."),
    (Include("made in Italy"), "Include the phrase 'made in Italy'.", "Made in France.",
     "does not include the phrase 'made in Italy'", "Shoes MADE in\nItaly."),
    (Avoid("cheap"), "Do not use the word 'cheap'.", "So CHEAP and cheerful.", "uses the forbidden word 'cheap'",
     "Cheaply made? Never."),  # a whole word only
    (ListOf(3), "Format it as a numbered list of exactly 3 items (1., 2., 3.), one per line.", "1. Apples\n2. Pears",
     "has 2 numbered items; use exactly 3", "Bring these:\n1. Apples\n2) Pears\n3. Plums\nThat is all."),
    (ListOf(3), "Format it as a numbered list of exactly 3 items (1., 2., 3.), one per line.",
     "1. Apples\n3. Pears\n4. Plums", "numbers its items 1, 3, 4; number them 1 to 3", "1. A\n2. B\n3. C"),
    (ListOf(3, "bulleted"), "Format it as a bulleted list of exactly 3 items, one per line, each starting with '- '.",
     "1. Apples\n2. Pears\n3. Plums", "has 0 bulleted items; use exactly 3", "- Apples\n* Pears\n• Plums"),
    (StartsWith("Dear"), "Start with 'Dear'.", "Hello Sam", "starts with 'Hello Sam', not 'Dear'", "  Dear Sam,"),
    (EndsWith("?"), "End with a question mark (?).", "How are you.",
     "ends with 'How are you.', not a question mark (?)", "Ready?  \n"),
    (EndsWith("Cheers"), "End with 'Cheers'.", "", "is empty, so it does not end with 'Cheers'", "Thanks. Cheers"),
    (Matches(r"\b\d{4}\b"), "Match the regular expression '\\b\\d{4}\\b'.", "In 99 ways",
     "does not match the regular expression '\\b\\d{4}\\b'", "Since 1987"),
    (CapitalizedLines(), "Start every line with a capital letter.", "Fine line\nbad line",
     "has 1 of 2 lines not starting with a capital letter (e.g. 'bad line')", "1. Apples\n- Pears\nPlums"),
    (Mentions(9), "Mention the number 9.", "Doors open at 19 o'clock, 9.5 hours later.",
     "does not mention the number 9", "Nine lives."),
    (ValidJson(), "Answer with valid JSON only (no code fence, nothing before or after it).", '```json\n{"a": 1}\n```',
     "is not valid JSON: Expecting value: line 1 column 1 (char 0)", ' {"a": [1, 2]} '),
    (MatchesSchema(SCHEMA), "Answer with JSON only, matching this JSON schema: "
     + json.dumps(SCHEMA, separators=(",", ":")), '{"title": "x"}',
     "does not match the schema at the top level: 'name' is a required property", '{"name": "x"}'),
    (MatchesModel(Product), None, '{"name": "Mug", "price": "cheap"}',
     "is not a valid Product: price: Input should be a valid number, unable to parse string as a number",
     '{"name": "Mug", "price": 4.5}'),
]


@pytest.mark.parametrize(("check", "rule", "failing", "message", "holding"), BUILT_INS,
                         ids=[f"{type(row[0]).__name__}-{n}" for n, row in enumerate(BUILT_INS)])
def test_each_built_in_states_its_rule_and_its_failure_precisely(check, rule, failing, message, holding):
    if rule is not None:
        assert check.rule == rule
    assert check(failing) == message
    assert check(holding) is None
    assert run_checks([check], failing) == CheckReport((CheckResult(check.rule, message),))


@pytest.mark.parametrize("check", [row[0] for row in BUILT_INS], ids=lambda check: type(check).__name__)
def test_each_built_in_pickles_and_compares_by_value(check):
    copy = pickle.loads(pickle.dumps(check))
    assert copy == check and hash(copy) == hash(check) and copy is not check
    assert copy(BUILT_INS[0][2]) == check(BUILT_INS[0][2])


def test_every_field_of_a_check_appears_in_its_rule():
    for check, *_ in BUILT_INS:
        if dataclasses.is_dataclass(check) and not isinstance(check, MatchesSchema):
            for field in dataclasses.fields(check):
                value = getattr(check, field.name)
                if value is not None:
                    assert str(value) in check.rule, (check, field.name)
    assert "Product" in MatchesModel(Product).rule and '"price"' in MatchesModel(Product).rule


def test_a_check_never_changes_the_draft():
    draft = "word " * 63
    for check, *_ in BUILT_INS:
        check(draft)
    assert draft == "word " * 63  # a str is immutable; a check returns a message, never a text
    assert all(isinstance(check(draft), str | type(None)) for check, *_ in BUILT_INS)


@pytest.mark.parametrize("build", [
    lambda: Count("page", max=1), lambda: Count("word"), lambda: Count("word", 5, 2), lambda: Count("word", max=-1),
    lambda: ListOf(0), lambda: ListOf(3, "roman"), lambda: Include(""), lambda: Avoid("  "), lambda: EndsWith(""),
    lambda: Matches("("), lambda: Mentions(-2), lambda: MatchesSchema({"type": "nope"}), lambda: MatchesModel(dict),
])
def test_a_check_that_cannot_be_checked_is_refused_when_built(build):
    with pytest.raises(ConfigurationError):
        build()


# --- the short form (CLI, DSL, batch files) ----------------------------------------------------------------


@pytest.mark.parametrize(("spec", "check"), [
    ("max-words=40", Count("word", max=40)),
    ("min-words=10", Count("word", min=10)),
    ("words=10..40", Count("word", 10, 40)),
    ("sentences=2", Count("sentence", 2, 2)),
    ("max-lines=4", Count("line", max=4)),
    ("max-chars=140", Count("character", max=140)),
    ("include=BPA-free", Include("BPA-free")),
    ("include=made in Italy", Include("made in Italy")),
    ("exclude=cheap", Avoid("cheap")),
    ("starts-with=Dear", StartsWith("Dear")),
    ("ends-with=?", EndsWith("?")),
    ("regex=^[A-Z]", Matches("^[A-Z]")),
    ("regex=a=b", Matches("a=b")),  # only the first = splits
    ("bullets=3", ListOf(3, "bulleted")),
    ("numbered=4", ListOf(4, "numbered")),
    ("mentions=7", Mentions(7)),
    ("capitalized-lines", CapitalizedLines()),
    ("json", ValidJson()),
    ("MAX-WORDS=5", Count("word", max=5)),
])
def test_the_short_form_makes_the_built_in_check(spec, check):
    assert parse_check(spec) == check


def test_json_schema_takes_a_file_or_the_schema_inline(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    inline = parse_check(f"json-schema={json.dumps(SCHEMA)}")
    assert parse_check(f"json-schema={path}") == MatchesSchema(SCHEMA) == inline
    with pytest.raises(ConfigurationError, match="cannot read the schema file"):
        parse_check(f"json-schema={tmp_path / 'missing.json'}")


@pytest.mark.parametrize(("spec", "message"), [
    ("max-wordz=40", "unknown check 'max-wordz'.*did you mean max-words"),
    ("max-words=forty", "'forty' is not N \\(write it as max-words=N\\)"),
    ("max-words", "write it as max-words=N"),
    ("json=yes", "write it as json"),
    ("words=40..10", "Count min 40 is above max 10"),
    ("regex=(", "not a regular expression"),
    ("include=", "Include needs a non-empty text"),
])
def test_a_bad_short_form_says_how_to_write_it(spec, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_check(spec)


def test_every_short_form_is_documented_in_the_checks_page_and_the_cli_help():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "checks.md").read_text()
    assert all(f"`{key}" in page for key in SPEC_FORMS)
    from loops.cli.options import CheckOption

    help_text = CheckOption.__metadata__[0].help
    stems = {key.removeprefix("max-").removeprefix("min-") for key in SPEC_FORMS}
    assert all(stem in help_text for stem in stems), sorted(stem for stem in stems if stem not in help_text)


# --- custom checks, the report ------------------------------------------------------------------------------


def test_a_custom_check_holds_with_true_or_none_and_fails_with_false_or_a_message():
    def friendly(draft):
        """Sound friendly."""
        return "hello" in draft.lower() or "has no greeting"

    def short(draft):
        return len(draft) < 10

    report = run_checks([friendly, short, lambda draft: None], "Dear customer, we regret to inform you")
    assert [result.rule for result in report.results] == ["Sound friendly.", "Pass the check short.",
                                                          "Pass the check <lambda>."]
    assert report.failures == ["has no greeting", "fails the rule: Pass the check short."]
    assert (report.held, report.total, report.passed, report.summary()) == (1, 3, False, "1/3 checks")
    assert run_checks([friendly], "Hello there").passed


def test_a_check_returning_something_else_is_a_contract_error():
    with pytest.raises(ContractError, match="a check returns True or None when it holds, False or a message"):
        run_checks([lambda draft: 0.5], "text")


def test_the_report_names_junk_first_and_says_what_to_fix():
    report = run_checks([Count("word", max=2), Include("rain")], "Your original content", floor="a placeholder")
    assert not report.passed and report.summary() == "0/2 checks (junk)"
    assert report.failures == ["junk: a placeholder", "has 3 words; use at most 2", "does not include the word 'rain'"]
    assert report.feedback() == ("The draft is not the content asked for (a placeholder): write the content itself.\n"
                                 "Fix these problems of the draft:\n- has 3 words; use at most 2\n"
                                 "- does not include the word 'rain'")
    assert report.to_dict()["failed"][0] == {"rule": "Use at most 2 words.", "message": "has 3 words; use at most 2"}
    assert run_checks([], "anything").passed and run_checks([], "x").feedback() == ""


def test_as_checks_takes_callables_and_short_forms_and_refuses_the_rest():
    assert as_checks(None) == () and as_checks("json") == (ValidJson(),)
    assert as_checks(["max-words=3", Include("x")]) == (Count("word", max=3), Include("x"))
    with pytest.raises(ConfigurationError, match="neither a check"):
        as_checks([42])
    with pytest.raises(ConfigurationError, match="checks must be a list"):
        as_checks(42)


def test_the_rules_are_stated_once_after_the_requirements():
    checks = [Count("word", max=40), Include("BPA-free")]
    assert stated_rules(checks, "A product description.") == ("A product description. Use at most 40 words. "
                                                              "Include the word 'BPA-free'.")
    already = "A slogan. Use at most 40 words."
    assert stated_rules(checks, already) == f"{already} Include the word 'BPA-free'."
    assert stated_rules([], "As it is.") == "As it is."
    assert rule_of(Count("word", max=40)) == "Use at most 40 words."

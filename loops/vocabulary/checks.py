"""Checks: what a program can tell about a draft for free, the ground truth a writing loop is judged by.

A check is any callable `value -> True | None` (it holds) or `-> False | str` (it fails; the string says
what is wrong). It gets the value of the judged field (a draft, a result) and never changes it: no
check truncates a draft or inserts a word, so every text a loop returns is one a writing role produced.

The built-in checks cover what users write most, each a frozen dataclass that states its rule as a
sentence (`rule`, what the writer is told) and its failure precisely ("has 63 words; use at most 40"),
pickles (a saved program, a Ray worker) and compares by value:

    Count(unit, min, max)     words, sentences, lines or characters (list markers are not words)
    ListOf(items, style)      a numbered or bulleted list of exactly that many items
    Include(text), Avoid(text)    a word or phrase that must or must not appear (whole words, any case)
    StartsWith(text), EndsWith(text)    how the text begins or ends (EndsWith("?"): a question)
    Matches(pattern)          a regular expression found in the text
    CapitalizedLines()        every line starts with a capital letter
    Mentions(number)          the number, in digits or (up to twelve) in words
    ValidJson()               the text is one JSON value
    MatchesSchema(schema)     ... that a JSON schema accepts (jsonschema)
    MatchesModel(model)       ... that a pydantic model validates (saved by name: give it again to load)

`run_checks(checks, value)` runs them all, a custom check beside the built-ins, into a `CheckReport`;
`parse_check("max-words=40")` reads the short form the CLI, the DSL and batch files use (`SPEC_FORMS`);
`as_checks` accepts both forms. What the loop makes of a report is `loops.vocabulary.contracts.judge`'s rule.

The built-in checks themselves live in `loops.vocabulary.builtin_checks`, re-exported here.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from loops.errors import ConfigurationError, ContractError
from loops.vocabulary.builtin_checks import (
    Avoid,
    CapitalizedLines,
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
    _text,
)

__all__ = ["SPEC_FORMS", "Avoid", "CapitalizedLines", "Check", "CheckReport", "CheckResult", "Count", "EndsWith",
           "Include", "ListOf", "Matches", "MatchesModel", "MatchesSchema", "Mentions", "StartsWith", "ValidJson",
           "as_checks", "checks_of_call", "parse_check", "rule_of", "run_checks", "stated_rules"]

Check = Callable[[Any], "bool | str | None"]
"""Any callable of the judged value: True or None when it holds, False or a message saying what is wrong."""

# ---------------------------------------------------------------- running checks


@dataclass(frozen=True)
class CheckResult:
    """One check on one value: its rule, and what is wrong (`message`), None when it held."""

    rule: str
    message: str | None = None

    @property
    def held(self) -> bool:
        return self.message is None


@dataclass(frozen=True)
class CheckReport:
    """Every check on one value, in the order given, and `floor`: why the value is no answer at all (junk,
    `loops.vocabulary.junk.is_junk`), whatever the checks say, when the caller looked (None: it is an answer)."""

    results: tuple[CheckResult, ...] = ()
    floor: str | None = None

    @property
    def held(self) -> int:
        return sum(result.held for result in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def passed(self) -> bool:
        """Every check held, and the value is an answer."""
        return self.floor is None and self.held == self.total

    @property
    def failures(self) -> list[str]:
        """One line per failed check, the floor's first."""
        return ([f"junk: {self.floor}"] if self.floor else []) + [
            result.message for result in self.results if result.message is not None]

    def summary(self) -> str:
        """A few words: "2/3 checks", and "junk" when the floor failed it."""
        return f"{self.held}/{self.total} checks" + (" (junk)" if self.floor else "")

    def feedback(self) -> str:
        """What the next draft must fix, for a writing role: junk named first, then each failed check's message."""
        lines = [f"The draft is not the content asked for ({self.floor}): write the content itself."] if self.floor \
            else []
        failed = [f"- {result.message}" for result in self.results if not result.held]
        if failed:
            lines += ["Fix these problems of the draft:", *failed]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what a trace step shows."""
        return {"held": self.held, "total": self.total, "passed": self.passed, "floor": self.floor,
                "failed": [{"rule": result.rule, "message": result.message} for result in self.results
                           if not result.held],
                "held_rules": [result.rule for result in self.results if result.held]}


def rule_of(check: Check) -> str:
    """The sentence a check states its rule in: its `rule`, else its docstring's first line, else its name."""
    rule = getattr(check, "rule", None)
    if isinstance(rule, str) and rule.strip():
        return rule.strip()
    doc = inspect.getdoc(check)
    return doc.strip().splitlines()[0] if doc and doc.strip() else f"Pass the check {_name(check)}."


def _name(check: Check) -> str:
    return getattr(check, "__name__", None) or type(check).__qualname__


def _result(check: Check, value: Any) -> CheckResult:
    rule = rule_of(check)
    outcome = check(value)
    if outcome is None or outcome is True:
        return CheckResult(rule)
    if outcome is False:
        return CheckResult(rule, f"fails the rule: {rule}")
    if isinstance(outcome, str):
        return CheckResult(rule, outcome.strip() or f"fails the rule: {rule}")
    raise ContractError(f"the check {_name(check)} returned {outcome!r:.100}; a check returns True or None when it "
                        "holds, False or a message saying what is wrong when it fails")


def run_checks(checks: Any, value: Any, *, floor: str | None = None) -> CheckReport:
    """Every check on `value`, in order (a check never changes it); `checks` as `as_checks` takes them (short
    forms too). A check that raises propagates, as does one that returns something else than True, None,
    False or a message (`ContractError`)."""
    return CheckReport(tuple(_result(check, value) for check in as_checks(checks)), floor)


def checks_of_call(own: tuple[Check, ...], given: Any, *, alone: str | None = None) -> tuple[Check, ...]:
    """A run's checks: a loop's own, then those its call gives (`as_checks`). `alone` says what approves by
    the checks alone when it is so set (e.g. "critic='checks' approves a draft"): then there must be some."""
    checks = (*own, *as_checks(given))
    if alone and not checks:
        raise ConfigurationError(f"{alone} when every check holds, and no checks were given: pass checks=[...] "
                                 "(e.g. ['max-words=40']) to the module or the call")
    return checks


def stated_rules(checks: Iterable[Check], requirements: str) -> str:
    """`requirements` with the rule of each check that it does not state already, one sentence each: what a
    writer is told, so it knows the target before its first draft."""
    text = _text(requirements)
    missing = [rule for rule in dict.fromkeys(rule_of(check) for check in checks) if rule not in text]
    return f"{text.rstrip()} {' '.join(missing)}" if missing else text


# ---------------------------------------------------------------- the short form (CLI, DSL, batch files)


def _range(text: str) -> tuple[int, int]:
    low, dots, high = text.partition("..")
    if not dots:
        low = high = text
    return int(low), int(high)


def _schema_file(text: str) -> MatchesSchema:
    from pathlib import Path

    inline = text.lstrip().startswith("{")
    try:
        return MatchesSchema(json.loads(text if inline else Path(text).read_text(encoding="utf-8")))
    except OSError as error:
        raise ConfigurationError(f"cannot read the schema file ({error.strerror or error})") from None
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"the schema {'given' if inline else 'file'} is not JSON ({error})") from None


def _counts(unit: str) -> dict[str, tuple[str, Callable[[str], Check]]]:
    name = {"word": "words", "sentence": "sentences", "line": "lines", "character": "chars"}[unit]
    return {
        f"max-{name}": ("N", lambda text: Count(unit, max=int(text))),
        f"min-{name}": ("N", lambda text: Count(unit, min=int(text))),
        name: ("N or N..M", lambda text: Count(unit, *_range(text))),
    }


@dataclass(frozen=True)
class _Form:
    value: str  # what follows `=`, "" for none
    build: Callable[[str], Check] = field(repr=False)
    meaning: str = ""


SPEC_FORMS: dict[str, _Form] = {
    **{key: _Form(value, build, f"{unit}s: at most N, at least N, exactly N or between N and M")
       for unit in ("word", "sentence", "line", "character") for key, (value, build) in _counts(unit).items()},
    "bullets": _Form("N", lambda text: ListOf(int(text), "bulleted"), "a bulleted list of exactly N items"),
    "numbered": _Form("N", lambda text: ListOf(int(text), "numbered"), "a numbered list of exactly N items"),
    "include": _Form("TEXT", Include, "a word or phrase that must appear (whole words, any case)"),
    "exclude": _Form("TEXT", Avoid, "a word or phrase that must not appear (whole words, any case)"),
    "starts-with": _Form("TEXT", StartsWith, "the text starts with TEXT"),
    "ends-with": _Form("TEXT", EndsWith, "the text ends with TEXT (ends-with=? : a question)"),
    "regex": _Form("PATTERN", Matches, "a Python regular expression found in the text"),
    "mentions": _Form("N", lambda text: Mentions(int(text)), "the number N, in digits or in words"),
    "capitalized-lines": _Form("", lambda text: CapitalizedLines(), "every line starts with a capital letter"),
    "json": _Form("", lambda text: ValidJson(), "the text is valid JSON"),
    "json-schema": _Form("FILE", _schema_file, "JSON that the JSON schema in FILE (or given inline) accepts"),
}


def spec_help() -> str:
    """The short forms, one per line, for `--help` and the docs."""
    return "\n".join(f"{key}{'=' + form.value if form.value else ''}: {form.meaning}"
                     for key, form in SPEC_FORMS.items())


def parse_check(spec: str) -> Check:
    """A built-in check from its short form, `name=value` or a bare `name` (`SPEC_FORMS`): `max-words=40`,
    `include=BPA-free`, `sentences=2..3`, `ends-with=?`, `json`. A mistake raises `ConfigurationError`
    naming the form and the fix."""
    if not isinstance(spec, str):
        raise ConfigurationError(f"a check's short form is a str such as 'max-words=40', got {spec!r:.100}")
    name, equals, value = spec.partition("=")
    key = name.strip().lower()
    form = SPEC_FORMS.get(key)
    if form is None:
        near = difflib.get_close_matches(key, SPEC_FORMS, n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigurationError(f"check {spec!r}: unknown check {key!r}; {hint}the checks are {', '.join(SPEC_FORMS)} "
                                 "(e.g. max-words=40, include=BPA-free)")
    if bool(form.value) != bool(equals):
        wanted = f"{key}={form.value}" if form.value else key
        raise ConfigurationError(f"check {spec!r}: write it as {wanted}")
    try:
        return form.build(value)
    except ValueError as error:  # ConfigurationError included: a bound out of range, a bad pattern
        detail = str(error) if isinstance(error, ConfigurationError) else f"{value!r} is not {form.value}"
        raise ConfigurationError(f"check {spec!r}: {detail} (write it as {key}={form.value})") from None


def as_checks(checks: Any) -> tuple[Check, ...]:
    """`checks` as a tuple of callables: each a check (any callable) or its short form (`parse_check`); None
    is none. Anything else raises `ConfigurationError`, before any LM call."""
    if checks is None:
        return ()
    if isinstance(checks, str) or callable(checks):
        checks = [checks]
    if not isinstance(checks, Iterable):
        raise ConfigurationError(f"checks must be a list of checks (callables, or short forms such as "
                                 f"'max-words=40'), got {checks!r:.100}")
    found = []
    for item in checks:
        if isinstance(item, str):
            found.append(parse_check(item))
        elif callable(item):
            found.append(item)
        else:
            raise ConfigurationError(f"checks: {item!r:.100} is neither a check (a callable of the draft) nor a "
                                     "short form such as 'max-words=40'")
    return tuple(found)

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
`as_checks` accepts both forms. What the loop makes of a report is `loops.contracts.judge`'s rule.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loops.errors import ConfigurationError, ContractError

__all__ = ["SPEC_FORMS", "Avoid", "CapitalizedLines", "Check", "CheckReport", "CheckResult", "Count", "EndsWith",
           "Include", "ListOf", "Matches", "MatchesModel", "MatchesSchema", "Mentions", "StartsWith", "ValidJson",
           "as_checks", "checks_of_call", "parse_check", "rule_of", "run_checks", "stated_rules"]

Check = Callable[[Any], "bool | str | None"]
"""Any callable of the judged value: True or None when it holds, False or a message saying what is wrong."""

# ---------------------------------------------------------------- measuring text

_LIST_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")  # "don't", "well-known" and "15-inch" are one word each
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)]*\s+")


def _lines(text: str) -> list[str]:
    """The non-blank lines, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _words(text: str) -> list[str]:
    """The words, list markers ("1.", "-") left out: they number or mark words, they are not words."""
    return [word for line in _lines(text) for word in _WORD.findall(_LIST_MARKER.sub("", line))]


def _sentences(text: str) -> list[str]:
    """Pieces ended by . ! or ? and a space (or the end); a piece without letters is no sentence."""
    return [piece for piece in _SENTENCE_END.split(text.strip()) if any(char.isalpha() for char in piece)]


_COUNTERS: dict[str, Callable[[str], int]] = {
    "word": lambda text: len(_words(text)),
    "sentence": lambda text: len(_sentences(text)),
    "line": lambda text: len(_lines(text)),
    "character": lambda text: len(text.strip()),
}


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}{'' if count == 1 else 's'}"


def _has(text: str, words: str) -> bool:
    """Whether `words` (a word or a phrase) occurs in `text` as whole words, in any case; any whitespace
    between a phrase's words."""
    pattern = r"\s+".join(re.escape(word) for word in words.split())
    return re.search(rf"(?<![^\W_])(?:{pattern})(?![^\W_])", text, re.IGNORECASE) is not None


def _word_or_phrase(text: str) -> str:
    return f"the phrase '{text}'" if len(text.split()) > 1 else f"the word '{text}'"


def _non_empty(kind: str, text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"{kind} needs a non-empty text, got {text!r}")
    return text.strip()


def _count(kind: str, value: Any, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(f"{kind} must be an integer >= {least}, got {value!r}")
    return value

# ---------------------------------------------------------------- the built-in checks
# Each is a frozen dataclass with `rule` (the sentence the writer is told) and `__call__(value)` (None
# when it holds, else one line saying what is wrong). Every field of a check appears in its rule.


@dataclass(frozen=True)
class Count:
    """Between `min` and `max` (either may be None) words, sentences, lines or characters."""

    unit: str
    min: int | None = None
    max: int | None = None

    def __post_init__(self) -> None:
        if self.unit not in _COUNTERS:
            raise ConfigurationError(f"Count unit {self.unit!r}: choose one of {', '.join(_COUNTERS)}")
        if self.min is None and self.max is None:
            raise ConfigurationError("Count needs a min, a max or both")
        for bound in (self.min, self.max):
            if bound is not None:
                _count(f"a {self.unit} count", bound)
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ConfigurationError(f"Count min {self.min} is above max {self.max}")

    @property
    def _range(self) -> str:
        if self.min == self.max:
            return f"exactly {self.min}"
        if self.max is None:
            return f"at least {self.min}"
        return f"at most {self.max}" if self.min is None else f"between {self.min} and {self.max}"

    @property
    def rule(self) -> str:
        return f"Use {self._range} {self.unit}s."

    def __call__(self, value: Any) -> str | None:
        count = _COUNTERS[self.unit](_text(value))
        if (self.min is None or count >= self.min) and (self.max is None or count <= self.max):
            return None
        return f"has {_plural(count, self.unit)}; use {self._range}"


@dataclass(frozen=True)
class Include:
    """The word or phrase, as whole words, in any case ('wheel' is not in 'wheels')."""

    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _non_empty("Include", self.text))

    @property
    def rule(self) -> str:
        return f"Include {_word_or_phrase(self.text)}."

    def __call__(self, value: Any) -> str | None:
        return None if _has(_text(value), self.text) else f"does not include {_word_or_phrase(self.text)}"


@dataclass(frozen=True)
class Avoid:
    """Not the word or phrase (as whole words, in any case)."""

    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _non_empty("Avoid", self.text))

    @property
    def rule(self) -> str:
        return f"Do not use {_word_or_phrase(self.text)}."

    def __call__(self, value: Any) -> str | None:
        return f"uses the forbidden {_word_or_phrase(self.text).removeprefix('the ')}" if _has(
            _text(value), self.text) else None


_LIST_STYLES = {"numbered": re.compile(r"(\d+)[.)]\s+"), "bulleted": re.compile(r"[-*•]\s+")}


@dataclass(frozen=True)
class ListOf:
    """A list of exactly `items` items, one per line: `numbered` (1. or 1)) or `bulleted` (-, * or •).
    Lines that are not items (a heading, a closing line) are allowed."""

    items: int
    style: str = "numbered"

    def __post_init__(self) -> None:
        if self.style not in _LIST_STYLES:
            raise ConfigurationError(f"list style {self.style!r}: choose one of {', '.join(_LIST_STYLES)}")
        _count("a list's items", self.items, least=1)

    @property
    def rule(self) -> str:
        if self.style == "numbered":
            numbers = ", ".join(f"{number}." for number in range(1, self.items + 1))
            return f"Format it as a numbered list of exactly {self.items} items ({numbers}), one per line."
        return f"Format it as a bulleted list of exactly {self.items} items, one per line, each starting with '- '."

    def __call__(self, value: Any) -> str | None:
        found = [match for line in _lines(_text(value)) if (match := _LIST_STYLES[self.style].match(line))]
        if len(found) != self.items:
            return f"has {len(found)} {self.style} items; use exactly {self.items}"
        numbers = [int(match.group(1)) for match in found] if self.style == "numbered" else []
        if numbers and numbers != list(range(1, self.items + 1)):
            return f"numbers its items {', '.join(map(str, numbers))}; number them 1 to {self.items}"
        return None


_MARKS = {"?": "a question mark", "!": "an exclamation mark", ".": "a full stop"}


def _ending(text: str) -> str:
    return f"{_MARKS[text]} ({text})" if text in _MARKS else f"'{text}'"


@dataclass(frozen=True)
class StartsWith:
    """The text (after leading whitespace) starts with `text`, exactly as written."""

    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _non_empty("StartsWith", self.text))

    @property
    def rule(self) -> str:
        return f"Start with '{self.text}'."

    def __call__(self, value: Any) -> str | None:
        start = _text(value).lstrip()
        if start.startswith(self.text):
            return None
        return f"starts with {start[:len(self.text) + 20]!r}, not '{self.text}'" if start else \
            f"is empty, so it does not start with '{self.text}'"


@dataclass(frozen=True)
class EndsWith:
    """The text (before trailing whitespace) ends with `text`, exactly as written: `?` asks a question."""

    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _non_empty("EndsWith", self.text))

    @property
    def rule(self) -> str:
        return f"End with {_ending(self.text)}."

    def __call__(self, value: Any) -> str | None:
        end = _text(value).rstrip()
        if end.endswith(self.text):
            return None
        return f"ends with {end[-(len(self.text) + 20):]!r}, not {_ending(self.text)}" if end else \
            f"is empty, so it does not end with {_ending(self.text)}"


@dataclass(frozen=True)
class Matches:
    """The regular expression (Python's `re`) is found somewhere in the text."""

    pattern: str

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except (re.error, TypeError) as error:
            raise ConfigurationError(f"Matches pattern {self.pattern!r} is not a regular expression: {error}") from None

    @property
    def rule(self) -> str:
        return f"Match the regular expression '{self.pattern}'."

    def __call__(self, value: Any) -> str | None:
        found = re.search(self.pattern, _text(value))
        return None if found else f"does not match the regular expression '{self.pattern}'"


@dataclass(frozen=True)
class CapitalizedLines:
    """Every line (after a list marker) starts with a capital letter."""

    @property
    def rule(self) -> str:
        return "Start every line with a capital letter."

    def __call__(self, value: Any) -> str | None:
        lines = _lines(_text(value))
        lower = [line for line in lines if not _LIST_MARKER.sub("", line)[:1].isupper()]
        if not lower:
            return None
        return f"has {len(lower)} of {len(lines)} lines not starting with a capital letter (e.g. {lower[0][:30]!r})"


_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve")


@dataclass(frozen=True)
class Mentions:
    """The number, in digits ("9 am", "9:00") or, up to twelve, in words ("nine")."""

    number: int

    def __post_init__(self) -> None:
        _count("Mentions' number", self.number)

    @property
    def rule(self) -> str:
        return f"Mention the number {self.number}."

    def __call__(self, value: Any) -> str | None:
        text = _text(value)
        digits = re.search(rf"(?<![\d.,]){self.number}(?!\d|[.,]\d)", text)
        spelled = self.number < len(_NUMBER_WORDS) and _has(text, _NUMBER_WORDS[self.number])
        return None if digits or spelled else f"does not mention the number {self.number}"


def _json_error(value: Any) -> tuple[Any, str | None]:
    """The JSON value `value` holds (a str of JSON, or an already parsed value), or the reason it holds none."""
    if not isinstance(value, str):
        return value, None
    try:
        return json.loads(value), None
    except json.JSONDecodeError as error:
        return None, f"is not valid JSON: {error}"


@dataclass(frozen=True)
class ValidJson:
    """The text is one JSON value, nothing before or after it (a code fence included)."""

    @property
    def rule(self) -> str:
        return "Answer with valid JSON only (no code fence, nothing before or after it)."

    def __call__(self, value: Any) -> str | None:
        return _json_error(value)[1]


@dataclass(frozen=True)
class MatchesSchema:
    """The text is JSON that the JSON schema `schema` (a dict) accepts, checked by `jsonschema`."""

    schema: Mapping[str, Any]

    def __post_init__(self) -> None:
        import jsonschema

        if not isinstance(self.schema, Mapping):
            raise ConfigurationError(f"MatchesSchema needs a JSON schema (a dict), got {self.schema!r:.100}")
        try:
            jsonschema.validators.validator_for(self.schema).check_schema(self.schema)
        except jsonschema.SchemaError as error:
            raise ConfigurationError(f"MatchesSchema: not a valid JSON schema: {error.message}") from None

    def __hash__(self) -> int:  # the schema is a dict: hash its text
        return hash(json.dumps(self.schema, sort_keys=True, default=str))

    @property
    def rule(self) -> str:
        return f"Answer with JSON only, matching this JSON schema: {json.dumps(self.schema, separators=(',', ':'))}"

    def __call__(self, value: Any) -> str | None:
        import jsonschema

        parsed, error = _json_error(value)
        if error:
            return error
        problem = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(self.schema)(
            self.schema).iter_errors(parsed))
        if problem is None:
            return None
        where = problem.json_path if problem.json_path != "$" else "the top level"
        return f"does not match the schema at {where}: {problem.message}"


class MatchesModel:
    """The text is JSON that the pydantic model `model` validates. Not a dataclass: a saved program names
    it and `loops.load` asks for the checks again, as for any Python object (`loops.saving`)."""

    __slots__ = ("model",)

    def __init__(self, model: type) -> None:
        from pydantic import BaseModel

        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigurationError(f"MatchesModel needs a pydantic model class, got {model!r:.100}")
        self.model = model

    def __eq__(self, other: object) -> bool:
        return type(other) is MatchesModel and other.model is self.model

    def __hash__(self) -> int:
        return hash((MatchesModel, self.model))

    def __repr__(self) -> str:
        return f"MatchesModel({self.model.__qualname__})"

    def __reduce__(self) -> tuple[Any, ...]:
        return MatchesModel, (self.model,)

    @property
    def rule(self) -> str:
        schema = json.dumps(self.model.model_json_schema(), separators=(",", ":"))
        return f"Answer with JSON only: a {self.model.__name__} object, as this JSON schema says: {schema}"

    def __call__(self, value: Any) -> str | None:
        from pydantic import ValidationError

        parsed, error = _json_error(value)
        if error:
            return error
        try:
            self.model.model_validate(parsed)
        except ValidationError as invalid:
            first = invalid.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the top level"
            more = f" (and {invalid.error_count() - 1} more)" if invalid.error_count() > 1 else ""
            return f"is not a valid {self.model.__name__}: {where}: {first['msg']}{more}"
        return None


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
    `loops.junk.is_junk`), whatever the checks say, when the caller looked (None: it is an answer)."""

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

"""The built-in checks: how text is measured (words, sentences, lines, characters, list markers left out) and
the checks users write most, each a frozen dataclass that states its rule (`rule`, what the writer is told) and
its failure precisely, pickles and compares by value (the table is `loops.vocabulary.checks`'s docstring).

Its own room because each check is a rule about text that grows with what users check; running checks into a
report, and reading their short forms, is `loops.vocabulary.checks`'s, which re-exports every check here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loops.errors import ConfigurationError

__all__ = ["Avoid", "CapitalizedLines", "Count", "EndsWith", "Include", "ListOf", "Matches", "MatchesModel",
           "MatchesSchema", "Mentions", "StartsWith", "ValidJson"]

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
    it and `loops.load` asks for the checks again, as for any Python object (`loops.running.saving`)."""

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

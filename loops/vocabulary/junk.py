"""A programmatic floor under LLM judges: drafts that no judge may approve, whatever it says.

A small model as critic approves junk: an empty answer, the requirements read back, the text "Your
original content". `is_junk(requirements, draft)` names what makes a draft junk whatever was asked
for, and returns None for every other draft; whether a real draft is *good* stays the judge's call.

The rules, in the order they are tried:

1. empty: nothing but whitespace;
2. no letters: "][", "...", "42", or only code fences and punctuation (a JSON answer's debris);
3. a placeholder: one of `PLACEHOLDERS` anywhere (any case), or `TODO` as a word in capitals
   (in prose, "todo" and "to-do" are ordinary words);
4. an echo: the draft has at least 3 words and at least `ECHO_SHARE` (80 %) of its word triples
   (3-grams, lower-cased, punctuation ignored) occur in the requirements. This catches the
   requirements read back whole, a prefix or a piece of them, and the same with a few words added.
   A draft of one or two words is never an echo: "Blue" may be the right answer to "Pick red or
   blue". Known false positive: a draft that rightly repeats a run of three or more of the
   requirements' words and nearly nothing else (a list copied from "Choose from: ...").

This module imports nothing of `loops`, so any pattern (or a user's own critic) can use it.
"""

from __future__ import annotations

import re

__all__ = ["ECHO_SHARE", "PLACEHOLDERS", "is_junk"]

PLACEHOLDERS = ("your original content", "lorem ipsum", "[draft]", "{draft}", "<draft>")
"""Texts that stand for a draft instead of being one (matched anywhere, in any case)."""

ECHO_SHARE = 0.8
"""The share of a draft's word triples found in the requirements from which it counts as an echo."""

_TODO = re.compile(r"\bTODO\b")
_FENCE = re.compile(r"```[\w-]*")  # a fence's language tag ("json") is markup, not text
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def _triples(text: str) -> list[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return [tuple(words[i:i + 3]) for i in range(len(words) - 2)]


def is_junk(requirements: str, draft: str) -> str | None:
    """Why `draft` is junk whatever `requirements` asked for, in a few words; None when it is not."""
    draft = "" if draft is None else str(draft)
    if not draft.strip():
        return "empty"
    if not any(char.isalpha() for char in _FENCE.sub("", draft)):
        return "no letters"
    lowered = draft.lower()
    placeholder = next((text for text in PLACEHOLDERS if text in lowered), None)
    if placeholder or _TODO.search(draft):
        return f"a placeholder ({placeholder or 'TODO'!r}), not a draft"
    triples = _triples(draft)
    if triples:
        asked = set(_triples(str(requirements or "")))
        echoed = sum(triple in asked for triple in triples)
        if echoed >= ECHO_SHARE * len(triples):
            return f"repeats the requirements ({echoed} of its {len(triples)} word triples are theirs)"
    return None

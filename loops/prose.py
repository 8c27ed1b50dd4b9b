"""How the writing roles write on each kind of model: refine's creator and iterator, direct's executor.

The embedded 135M model writes a short text well enough when asked plainly, and badly when the text
must sit inside a JSON object next to its reasoning: there it echoes the requirements, writes "Your
original content", leaks the prompt's format ("Your output fields are: ...") or answers `][`. So, as the
code loop's executor does, on the embedded model these roles answer in plain text (the text itself is
the answer), are shown worked examples (small writing requests and a text that meets them: a small
model follows an example's shape better than an instruction) and are capped in length. Chosen on the
train split of `loops.optimize.writing`'s checkable tasks and measured on its held-out split
(benchmarks/README.md). On any other model the roles answer as the context's adapter asks, untaught.

`prose_defaults(lm)` is the one rule; `CreatorCriticIterator` and `DirectorExecutorEvaluatorController`
follow it for the options their caller leaves unset (`plain_text=`, `examples=`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import dspy

from loops.adapters import PlainTextAdapter
from loops.lm import is_embedded

__all__ = ["EMBEDDED_PROSE", "HOSTED_PROSE", "PLAIN_DRAFT", "PLAIN_PROSE", "WORKED_DRAFTS", "ProseDefaults",
           "prose_defaults", "worked_drafts"]


@dataclass(frozen=True)
class ProseDefaults:
    """How the writing roles write on a kind of model: the text as a plain answer (`plain_text`), shown
    the worked examples (`examples`), at most `max_tokens` tokens per text (None: the model's own cap)."""

    plain_text: bool
    examples: bool
    max_tokens: int | None = None


EMBEDDED_PROSE = ProseDefaults(plain_text=True, examples=True, max_tokens=160)
HOSTED_PROSE = ProseDefaults(plain_text=False, examples=False)

# One adapter object each, so that the runtime's per-adapter twins are built once. Both drop what imitates
# the prompt's format ("Here is the improved draft:", a "Feedback: ..." section), which the small model adds.
PLAIN_PROSE = PlainTextAdapter(strip_format=True)  # the first output field: the iterator's, the executor's text
PLAIN_DRAFT = PlainTextAdapter("draft", strip_format=True)  # the creator is a ChainOfThought: its draft alone

# Requests in the form `loops refine` users write them (a brief, then its rules) and a text that meets
# every rule; from the train split of loops.optimize.writing, never from its held-out split.
WORKED_DRAFTS: tuple[tuple[str, str], ...] = (
    ("A slogan for a bicycle repair shop. Use at most 8 words. Include the word 'wheel'.",
     "Every wheel true, every ride new."),
    ("A haiku about rain. Use exactly 3 lines. Include the word 'rain'.",
     "Soft rain on the roof\nThe garden drinks in silence\nPuddles hold the sky"),
    ("A packing list for a day hike. Format it as a numbered list of exactly 3 items (1., 2., 3.), one per line. "
     "Include the word 'water'.",
     "1. Two litres of water\n2. A light rain jacket\n3. Snacks and a map"),
)


def prose_defaults(lm: object) -> ProseDefaults:
    """How the writing roles write on the model that will run them: the embedded model's way, or a capable
    (hosted) model's."""
    return EMBEDDED_PROSE if is_embedded(lm) else HOSTED_PROSE


@functools.cache
def worked_drafts(role: str) -> tuple[dspy.Example, ...]:
    """`WORKED_DRAFTS` as demos of the built-in `creator` (requirements → draft) or the director's
    `executor` (the request as its plan → result)."""
    if role == "creator":
        return tuple(dspy.Example(requirements=request, context="", reasoning="", draft=text)
                     .with_inputs("requirements", "context") for request, text in WORKED_DRAFTS)
    if role == "executor":
        return tuple(dspy.Example(plan=request, result=text).with_inputs("plan") for request, text in WORKED_DRAFTS)
    raise ValueError(f"no worked drafts for the role {role!r}: creator or executor")

"""How the writing roles write on each kind of model: refine's creator and iterator, direct's executor.

The embedded 135M model writes a short text well enough when asked plainly, and badly when the text
must sit inside a JSON object next to its reasoning: there it echoes the requirements, writes "Your
original content", leaks the prompt's format ("Your output fields are: ...") or answers `][`. So, as the
code loop's executor does, on the embedded model these roles answer in plain text (the text itself is
the answer), are shown worked examples (small writing requests and a text that meets them: a small
model follows an example's shape better than an instruction) and are capped in length. Chosen on the
train split of `loops.optimize.writing`'s checkable tasks and measured on its held-out split
(benchmarks/README.md). Any other small model (its profile says so: a SmolLM behind a server, a model declared
small with `loops.lm.resolve(..., profile="small")` or `--profile small`) is written for the same way; on a
capable model the roles answer as the context's adapter asks, untaught.

`prose_defaults(lm)` is the one rule; `CreatorCriticIterator` and `DirectorExecutorEvaluatorController`
follow it for the options their caller leaves unset (`plain_text=`, `examples=`): `prose_settings` settles
them for a run, `prose_call` says how a writing role is called.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import dspy

from loops.adapters import PlainTextAdapter
from loops.profile import profile_of
from loops.runtime import predictor_of

__all__ = ["EMBEDDED_PROSE", "HOSTED_PROSE", "PLAIN_DRAFT", "PLAIN_PROSE", "WORKED_DRAFTS", "ProseDefaults",
           "prose_call", "prose_defaults", "prose_settings", "worked_drafts"]


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
    """How the writing roles write on the model that will run them: a small model's way (the embedded model's,
    and any model whose profile is small: `loops.profile`), or a capable (hosted) model's."""
    return EMBEDDED_PROSE if profile_of(lm).small else HOSTED_PROSE


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


def prose_settings(role: Any, plain_text: bool | None, examples: bool | None) -> dict[str, Any]:
    """How a writing role (the module's attribute `role`) writes in a run started now: the explicit
    choices, else `prose_defaults` of the role's model (its own LM, else the context's)."""
    predictor, _ = predictor_of(role)
    defaults = prose_defaults(predictor.lm if predictor is not None and predictor.lm is not None else dspy.settings.lm)
    plain = plain_text if plain_text is not None else defaults.plain_text
    return {"plain_text": plain, "examples": examples if examples is not None else defaults.examples,
            "max_tokens": defaults.max_tokens if plain else None}


def prose_call(name: str, role: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """The options of `Run.call` for the built-in writing role `name` (`creator`, `iterator`, `executor`):
    plain text and its cap, and for the creator and the executor the worked examples, unless the role
    has demos of its own (an optimized one)."""
    call: dict[str, Any] = {}
    if settings["plain_text"]:
        call["adapter"] = PLAIN_DRAFT if name == "creator" else PLAIN_PROSE
        if settings["max_tokens"]:
            call["config"] = {"max_tokens": settings["max_tokens"]}
    predictor, _ = predictor_of(role)
    if name in ("creator", "executor") and settings["examples"] and predictor is not None and not predictor.demos:
        call["demos"] = worked_drafts(name)
    return call

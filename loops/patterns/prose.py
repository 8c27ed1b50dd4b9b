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

With a user's checks (`loops.vocabulary.checks`) a writing loop can judge drafts for free, so on the embedded model
it draws several candidates per iteration (`samples`, each a `loops.patterns.code.Draw` as the code loop's are:
greedy, with or without the worked examples, or a seeded sample; `prose_draws`) and, its critic's verdict
being noise (benchmarks/README.md: ROC AUC 0.44-0.55), lets the checks alone approve (`critic="checks"`).

`prose_defaults(lm)` is the one rule; `CreatorCriticIterator` and `DirectorExecutorEvaluatorController`
follow it for the options their caller leaves unset (`plain_text=`, `examples=`, `samples=`, `critic=`):
`prose_settings` settles them for a run, `prose_call` says how a writing role is called.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import dspy

from loops.errors import ConfigurationError
from loops.patterns.code.draws import Draw
from loops.running.roles import lm_of, predictor_of
from loops.vocabulary.adapters import PlainTextAdapter
from loops.vocabulary.profile import profile_of

__all__ = ["EMBEDDED_PROSE", "HOSTED_PROSE", "PLAIN_DRAFT", "PLAIN_PROSE", "WORKED_DRAFTS", "ProseDefaults",
           "prose_call", "prose_defaults", "prose_draws", "prose_settings", "worked_drafts"]


@dataclass(frozen=True)
class ProseDefaults:
    """How the writing roles write on a kind of model: the text as a plain answer (`plain_text`), shown
    the worked examples (`examples`), at most `max_tokens` tokens per text (None: the model's own cap);
    and, when the caller gives checks, `samples` candidates per iteration and who approves (`critic`:
    "checks" alone, or the "llm" critic once every check holds)."""

    plain_text: bool
    examples: bool
    max_tokens: int | None = None
    samples: int = 1
    critic: str = "llm"


EMBEDDED_PROSE = ProseDefaults(plain_text=True, examples=True, max_tokens=160, samples=6, critic="checks")
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
    and any model whose profile is small: `loops.vocabulary.profile`), or a capable (hosted) model's."""
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


def prose_draws(samples: int, examples: bool) -> tuple[Draw, ...]:
    """The `samples` candidates of a writing role's iteration, in the order they are drawn: the greedy
    answers there are (shown the worked examples without the engine's repeat penalty; untaught; shown them
    with it: other prompts and other decoding, which pass other tasks), then seeded samples, every second one
    shown the examples. Without `examples`, none is shown them. Chosen on the train split of
    `loops.optimize.writing` (benchmarks/README.md): the first greedy answer passes 11 of its 30 tasks, the
    three together 15, with four samples besides 24."""
    shown = tuple(range(len(WORKED_DRAFTS))) if examples else ()
    greedy = [Draw(examples=shown, frequency_penalty=0.0), Draw(), Draw(examples=shown)] if examples else [Draw()]
    sampled = [Draw(sampled=True, examples=shown if number % 2 == 0 else ()) for number in range(samples)]
    return tuple([*greedy, *sampled][:samples])


def prose_settings(role: Any, plain_text: bool | None, examples: bool | None, samples: int | None = None,
                   critic: str | None = None, checks: bool = False) -> dict[str, Any]:
    """How a writing role (the module's attribute `role`) writes in a run started now: the explicit
    choices, else `prose_defaults` of the role's model (its own LM, else the context's). Without `checks`
    nothing judges candidates for free, so one is drawn unless `samples` says otherwise, and the LLM
    critic approves."""
    defaults = prose_defaults(lm_of(role))
    plain = plain_text if plain_text is not None else defaults.plain_text
    shown = examples if examples is not None else defaults.examples
    count = samples if samples is not None else defaults.samples if checks else 1
    return {"plain_text": plain, "examples": shown, "max_tokens": defaults.max_tokens if plain else None,
            "samples": count, "critic": critic or (defaults.critic if checks else "llm"),
            "draws": prose_draws(count, shown)}


def prose_call(name: str, role: Any, settings: dict[str, Any], draw: Draw | None = None,
               rollout: int = 0) -> dict[str, Any]:
    """The options of `Run.call` for the built-in writing role `name` (`creator`, `iterator`, `executor`):
    plain text and its cap, and for the creator and the executor the worked examples, unless the role
    has demos of its own (an optimized one). `draw` (candidate number `rollout` of the run) says which
    examples are shown and how the candidate is decoded (`loops.patterns.code.Draw.decoding`); without one, all the
    examples, greedily."""
    call: dict[str, Any] = {}
    predictor, _ = predictor_of(role)
    own_demos = predictor is not None and bool(predictor.demos)
    config = draw.decoding(rollout, own_demos=own_demos) if draw is not None else {}
    if settings["plain_text"]:
        call["adapter"] = PLAIN_DRAFT if name == "creator" else PLAIN_PROSE
        if settings["max_tokens"]:
            config["max_tokens"] = settings["max_tokens"]
    if config:
        call["config"] = config
    shown = draw.examples if draw is not None else tuple(range(len(WORKED_DRAFTS)))
    if name in ("creator", "executor") and settings["examples"] and shown and predictor is not None and not own_demos:
        call["demos"] = _worked(name, shown)
    return call


def _worked(role: str, indices: tuple[int, ...]) -> tuple[dspy.Example, ...]:
    if not all(0 <= index < len(WORKED_DRAFTS) for index in indices):
        raise ConfigurationError(f"a writing role's draw shows worked drafts {indices!r}: give indices of "
                                 f"WORKED_DRAFTS, 0 to {len(WORKED_DRAFTS) - 1}")
    drafts = worked_drafts(role)
    return tuple(drafts[index] for index in indices)

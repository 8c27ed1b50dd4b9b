"""What the runtime needs to know of a model, told by the model: its profile.

The runtime reads four things of the LM a role runs on: the adapter it answers in shape with, how many
earlier turns of a role its context holds, what a request costs, and whether it is a small model, whose
roles need the small-model ways (the writing roles' plain text and worked examples, `loops.patterns.prose`; the code
loop's candidates, `loops.patterns.code.code_loop_defaults`). A model says them through a `ModelProfile`, so the
runtime never imports a model module: the embedded engine carries its own (`loops.lm.embedded`),
`loops.lm.resolve(adapter=..., profile=...)` sets one on the LM it builds (`with_adapter`, `with_size`), a
model string that names a small model is known as one (`is_small_model_name`), and any other LM gets `HOSTED`'s
(DSPy's default adapter, every turn, LiteLLM's prices, a capable model).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loops.choices import PROFILE_NAMES
from loops.errors import ConfigurationError
from loops.vocabulary.adapters import ADAPTERS

__all__ = ["HOSTED", "PROFILE_ATTRIBUTE", "SMALL", "SMALL_HISTORY_WINDOW", "ModelProfile", "adapter_for", "cost_usd",
           "free", "is_small_model_name", "litellm_price", "price_of", "profile_of", "register", "with_adapter",
           "with_size"]

# The attribute of an LM (or of its engine) holding its profile: it travels wherever the LM goes (per-role
# LMs, copies, optimizers' deep copies, Ray workers) with no dspy.context around every call.
PROFILE_ATTRIBUTE = "loops_profile"

Price = Callable[[str, Mapping[str, Any]], float | None]


def litellm_price(model: str, usage: Mapping[str, Any]) -> float | None:
    """LiteLLM's price of one request in US dollars, None where it knows no price for the model."""
    try:
        import litellm  # only for hosted models: the embedded model's path never imports it

        prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                                                    completion_tokens=int(usage.get("completion_tokens") or 0))
    except Exception:  # LiteLLM raises a variety of errors for a model it has no price for
        return None
    return float(prompt) + float(completion)


def free(model: str, usage: Mapping[str, Any]) -> float:
    """The price of a model run on this machine."""
    return 0.0


@dataclass(frozen=True)
class ModelProfile:
    """What the runtime needs of a model."""

    adapter: str | None = None
    """A name in `loops.vocabulary.adapters.ADAPTERS` the model's roles answer in; None: the context's, else DSPy's
    default."""

    history_window: int | None = None
    """The earlier turns a role sees when the module sets none; None: all of them."""

    price: Price = litellm_price
    """A request's cost in US dollars from its usage (None when unknown); LiteLLM's prices by default."""

    small: bool = False
    """A small model (such as the embedded 135M one): every default that depends on the model takes its
    small-model value."""


HOSTED = ModelProfile()
# A small model's context holds few turns well: a role sees its last few (the embedded model's 8k context, with
# prompts of 1-2k tokens, holds about four).
SMALL_HISTORY_WINDOW = 4
SMALL = ModelProfile(history_window=SMALL_HISTORY_WINDOW, small=True)
_by_model: dict[str, ModelProfile] = {}
# Model names that say the model is small: the SmolLM families (135M to 1.7B parameters), and a size of a billion
# parameters or less in the name ("qwen2.5-0.5b-instruct", "llama3.2:1b", "smollm2-360m"), as servers and
# providers name their models.
_SMALL_NAME = re.compile(r"smollm2?(?!\d)|(?<![\d.])(?:0?\.\d+|1(?:\.0)?)b\b|(?<![\d.])\d{1,3}m\b", re.IGNORECASE)


@functools.cache
def is_small_model_name(model: str) -> bool:
    """Whether the model string `model` names a small model: a SmolLM (`openai/smollm2`, as llama.cpp's server
    serves the embedded model's GGUF), or a model whose name gives a size of at most a billion parameters."""
    return bool(_SMALL_NAME.search(model.rpartition("/")[2]))


def register(model: str, profile: ModelProfile) -> None:
    """Make `profile` the one of every LM whose model string is `model` (for its price, which DSPy's usage
    records know by model string alone)."""
    _by_model[model] = profile


def profile_of(lm: Any) -> ModelProfile:
    """The profile of an LM: its own, else its engine's, else its model string's (registered, or `SMALL` for a
    name that says the model is small, `is_small_model_name`), else `HOSTED`."""
    for holder in (lm, getattr(lm, "engine", None)):
        profile = getattr(holder, PROFILE_ATTRIBUTE, None)
        if isinstance(profile, ModelProfile):
            return profile
    model = getattr(lm, "model", None)
    if model in _by_model:
        return _by_model[model]
    return SMALL if isinstance(model, str) and is_small_model_name(model) else HOSTED


def with_adapter(lm: Any, adapter: str) -> Any:
    """`lm`, its profile answering in the adapter named `adapter` from now on."""
    setattr(lm, PROFILE_ATTRIBUTE, dataclasses.replace(profile_of(lm), adapter=adapter))
    return lm


def with_size(lm: Any, profile: str) -> Any:
    """`lm`, declared a small model (`profile="small"`) or a capable one (`"capable"`) from now on, whatever its
    name says: every default that depends on the model follows. A small model's roles see their last
    `SMALL_HISTORY_WINDOW` turns unless its profile sets another window; a model declared capable keeps the window
    it had (what its context holds: the embedded model's 8k, however its roles write)."""
    if profile not in PROFILE_NAMES:
        raise ConfigurationError(f"unknown profile {profile!r} (--profile): use one of "
                                 f"{', '.join(map(repr, PROFILE_NAMES))}: what the model is, over what its name says")
    found = profile_of(lm)
    small = profile == "small"
    window = found.history_window if found.history_window is not None or not small else SMALL_HISTORY_WINDOW
    setattr(lm, PROFILE_ATTRIBUTE, dataclasses.replace(found, small=small, history_window=window))
    return lm


def adapter_for(lm: Any) -> Any:
    """The adapter an LM needs when the context sets none (its profile's), None for DSPy's default: the
    one rule the runtime, the DSL and the benchmarks follow."""
    name = profile_of(lm).adapter
    return None if name is None else ADAPTERS[name]


def price_of(model: str) -> Price:
    """How a request to the model string `model` is priced: its registered profile's price, else LiteLLM's."""
    return _by_model.get(model, HOSTED).price


def cost_usd(model: str, usage: Mapping[str, Any]) -> float | None:
    """What one request to `model` cost in US dollars; None where nobody knows."""
    return price_of(model)(model, usage)

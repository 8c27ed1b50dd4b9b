"""What the runtime needs to know of a model, told by the model: its profile.

The runtime reads three things of the LM a role runs on: the adapter it answers in shape with, how many
earlier turns of a role its context holds, and what a request costs. A model says them through a
`ModelProfile`, so the runtime never imports a model module: the embedded engine carries its own
(`loops.lm.embedded`), `loops.lm.resolve(adapter=...)` sets one on the LM it builds, and any other LM
gets `HOSTED`'s (DSPy's default adapter, every turn, LiteLLM's prices).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loops.adapters import ADAPTERS

__all__ = ["HOSTED", "PROFILE_ATTRIBUTE", "ModelProfile", "adapter_for", "cost_usd", "free", "litellm_price",
           "profile_of", "register", "with_adapter"]

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
    """What the runtime needs of a model: `adapter`, a name in `loops.adapters.ADAPTERS` (None: the
    context's, else DSPy's default); `history_window`, the earlier turns a role sees when the module sets
    none (None: all of them); `price`, a request's cost from its usage."""

    adapter: str | None = None
    history_window: int | None = None
    price: Price = litellm_price


HOSTED = ModelProfile()
_by_model: dict[str, ModelProfile] = {}


def register(model: str, profile: ModelProfile) -> None:
    """Make `profile` the one of every LM whose model string is `model` (for its price, which DSPy's usage
    records know by model string alone)."""
    _by_model[model] = profile


def profile_of(lm: Any) -> ModelProfile:
    """The profile of an LM: its own, else its engine's, else its model string's, else `HOSTED`."""
    for holder in (lm, getattr(lm, "engine", None)):
        profile = getattr(holder, PROFILE_ATTRIBUTE, None)
        if isinstance(profile, ModelProfile):
            return profile
    return _by_model.get(getattr(lm, "model", None), HOSTED)


def with_adapter(lm: Any, adapter: str) -> Any:
    """`lm`, its profile answering in the adapter named `adapter` from now on."""
    setattr(lm, PROFILE_ATTRIBUTE, dataclasses.replace(profile_of(lm), adapter=adapter))
    return lm


def adapter_for(lm: Any) -> Any:
    """The adapter an LM needs when the context sets none (its profile's), None for DSPy's default: the
    one rule the runtime, the DSL and the benchmarks follow."""
    name = profile_of(lm).adapter
    return None if name is None else ADAPTERS[name]


def cost_usd(model: str, usage: Mapping[str, Any]) -> float | None:
    """What one request to `model` cost in US dollars; None where nobody knows."""
    return _by_model.get(model, HOSTED).price(model, usage)

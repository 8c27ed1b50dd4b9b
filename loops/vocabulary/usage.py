"""What a loop run has spent, as one value: LM requests sent, replayed and cached, tokens, cost, context.

`Usage` is the shape pydantic-ai's `RunUsage` has: a plain value with arithmetic, so that what one role call
used is `after - before` of the run's usage, and what a run nested in another spent is added to the outer
one with `incr`. `loops.vocabulary.budget.Budget.check` reads it to say whether a limit is reached; nothing else
compares it with a limit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["Usage"]


@dataclass(slots=True)
class Usage:
    """What a run (or a part of it: one role call, a nested run) has spent."""

    requests: int = 0
    """LM requests this process sent (first tries, retries, re-asks and engines' re-sends alike)."""

    replayed: int = 0
    """LM requests a checkpoint's record answered instead (sent by the process that recorded them)."""

    cached: int = 0
    """LM calls DSPy's cache answered: no request was sent."""

    tokens: int = 0
    """Input plus output tokens, as the LMs report them (those of replayed calls included)."""

    cost_usd: float | None = 0.0
    """US dollars the requests cost; None when a price is unknown and no cost budget asks for it."""

    context_chars: int = 0
    """Characters the role histories put in the prompts now (a level, not a sum: `-` keeps the later one)."""

    unpriced: frozenset[str] = field(default_factory=frozenset)
    """Models whose requests had no known price, counted as free against a cost budget."""

    @property
    def lm_calls(self) -> int:
        """LM requests the run's limits count: those sent and those replayed."""
        return self.requests + self.replayed

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.requests + other.requests, self.replayed + other.replayed, self.cached + other.cached,
                     self.tokens + other.tokens, _cost(self.cost_usd, other.cost_usd, 1),
                     max(self.context_chars, other.context_chars), self.unpriced | other.unpriced)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.requests - other.requests, self.replayed - other.replayed, self.cached - other.cached,
                     self.tokens - other.tokens, _cost(self.cost_usd, other.cost_usd, -1), self.context_chars,
                     self.unpriced - other.unpriced)

    def incr(self, other: Usage | None = None, /, **counts: int | float) -> None:
        """Add `other` (or the given fields) to this usage, in place: a nested run's into the run it ran in."""
        added = other if other is not None else Usage(**counts)
        for name in ("requests", "replayed", "cached", "tokens"):
            setattr(self, name, getattr(self, name) + getattr(added, name))
        self.cost_usd = _cost(self.cost_usd, added.cost_usd, 1)
        self.context_chars = max(self.context_chars, added.context_chars)
        self.unpriced |= added.unpriced

    def replace(self, **fields: object) -> Usage:
        """This usage with the given fields replaced."""
        return dataclasses.replace(self, **fields)


def _cost(mine: float | None, theirs: float | None, sign: int) -> float | None:
    """A cost stays unknown (None) once one side of it is; the unknown side of a difference is left out."""
    if mine is None:
        return None
    return mine if theirs is None else mine + sign * theirs

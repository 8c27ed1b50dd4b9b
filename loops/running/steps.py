"""One role call of a run, as its trace shows it (`Step`), and the token counts of the LM requests it sent.

A value of its own room: the runtime records steps, the replay layer restores them from a checkpoint, and
displays, `--trace`, the CLI and optimizers read them, without importing the runtime.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from loops.vocabulary import display

__all__ = ["Step", "tokens_of"]


@dataclass(slots=True)
class Step:
    """One role call of a run, as it appears in `prediction.trace` (and reaches observers and `--trace`)."""

    role: str
    """The role (or phase) called."""
    iteration: int
    """The iteration the call was made in (0 before the first)."""
    inputs: dict[str, Any]
    """The inputs the role was given (its history apart)."""
    outputs: dict[str, Any] | None
    """What it answered; None when it failed."""
    seconds: float
    """How long it took (a person's call: the person's time)."""
    attempts: int = 1
    """Attempts made: first try, retries and re-asks."""
    lm_calls: int = 0
    """LM requests the call sent, those of the calls made within it included."""
    tokens: dict[str, int] | None = None
    """Input and output tokens its requests used (`{"input": ..., "output": ...}`), as the LMs report them."""
    error: str | None = None
    """Why it failed, when it did."""
    note: str | None = None
    """What the loop made of it (a verdict it did not take at its word, code it did not test again)."""
    cached: int = 0
    """LM calls DSPy's cache answered instead of a request."""
    cost_usd: float | None = None
    """What its requests cost; None when unknown."""
    replayed: bool = False
    """Answered from a checkpoint's record: its counts are those of the process that recorded it."""
    human: bool = False
    """A person's answer (`loops.running.person`)."""
    depth: int = 0
    """How many calls it ran within: 0 for a call of the pattern, 1 for a role call a phase made (a DSL atom
    called in a loop's phase, a call of a loop form's run within its program)."""
    started_at: float | None = None
    """When the call started (`time.time()`; a replayed step keeps the time it first ran): a run's timeline."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (values JSON cannot hold are rendered as text)."""
        return json.loads(json.dumps(asdict(self), default=_jsonable))

    def __repr__(self) -> str:
        # One short line: a trace holds dozens of steps, and their inputs hold whole histories of drafts.
        tokens = f", tokens={self.tokens['input']}/{self.tokens['output']}" if self.tokens else ""
        return (f"Step({self.role!r}, iteration={self.iteration}, {self.seconds:.1f}s{tokens}, "
                f"{display.step_outcome(self)!r})")

    def _repr_html_(self) -> str:
        return display.step_html(self)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "toDict"):
        return value.toDict()
    return str(value)


def tokens_of(entries: Any) -> dict[str, int]:
    tokens = {"input": 0, "output": 0}
    for entry in entries:
        tokens["input"] += int(entry.get("prompt_tokens") or 0)
        tokens["output"] += int(entry.get("completion_tokens") or 0)
    return tokens

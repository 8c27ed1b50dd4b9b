"""Each role's history in a run: the turns it took, what of them its next prompt shows (`shown`), and how
many characters the histories put in the prompts (what `max_context_chars` bounds).

A value the run owns and asks, which never calls back into it: adding a turn returns the characters the
histories now hold, and the run hands that to its budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import dspy

__all__ = ["Histories", "condense_turns"]


class Histories:
    """The roles' turns, each role shown all of them or its last `window` (after a digest of the older ones when
    `summary`)."""

    def __init__(self, summary: bool = False):
        self.turns: dict[str, list[dict[str, Any]]] = {}
        self.summary = summary
        self.chars = 0  # what the histories put in the prompts now
        self._windows: dict[str, int | None] = {}
        self._sizes: dict[str, list[int]] = {}
        self._shown_chars: dict[str, int] = {}

    def has_window(self, role: str) -> bool:
        return role in self._windows

    def set_window(self, role: str, window: int | None) -> None:
        """Show `role` its last `window` turns (None: all of them)."""
        self._windows[role] = window

    def shown(self, role: str) -> list[dict[str, Any]]:
        """The turns `role` sees: all of them, or the last `window`, after a digest of the older ones when
        `summary` is set."""
        turns = self.turns.get(role, ())
        window = self._windows.get(role)
        if window is None or len(turns) <= window:
            return list(turns)
        older, kept = turns[:len(turns) - window], list(turns[len(turns) - window:])
        return [condense_turns(older), *kept] if self.summary else kept

    def add(self, role: str, turn: dict[str, Any]) -> int:
        """Add a turn to the role's history; returns the characters the histories now put in the prompts."""
        self.turns.setdefault(role, []).append(turn)
        sizes = self._sizes.setdefault(role, [])
        sizes.append(sum(len(value) if isinstance(value, str) else len(str(value)) for value in turn.values()))
        window = self._windows.get(role)
        shown = sum(sizes if window is None else sizes[len(sizes) - window:] if window else ())
        previous, self._shown_chars[role] = self._shown_chars.get(role, 0), shown
        self.chars += shown - previous
        return self.chars

    def extend(self, role: str, turns: Iterable[dict[str, Any]]) -> None:
        """Add turns a nested run took (a DSL loop form's) to the role's history."""
        self.turns.setdefault(role, []).extend(turns)

    def forget(self, role: str) -> None:
        """Start `role` over with an empty history."""
        self.turns.pop(role, None)

    def as_dspy(self) -> dict[str, dspy.History]:
        """Each role's turns as the `dspy.History` a result shows."""
        return {role: dspy.History(messages=list(turns)) for role, turns in self.turns.items()}


_CONDENSED_CHARS = 160


def condense_turns(turns: Any) -> dict[str, str]:
    """Older turns folded into one, field by field, so it renders like any turn: for each field, how many
    turns are folded and the start of each one's value."""
    fields: dict[str, list[str]] = {}
    for turn in turns:
        for name, value in turn.items():
            fields.setdefault(name, []).append(" ".join(str(value).split())[:_CONDENSED_CHARS])
    return {name: f"[{len(values)} earlier turn(s), condensed] " + " | ".join(values)
            for name, values in fields.items()}

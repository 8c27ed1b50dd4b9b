"""The one lookup of what answers a role: its predictor, the name of its `dspy.History` input, and its LM.

A role is an attribute of a loop module (a `dspy.Predict`, a module with one predictor, a user's program);
the runtime, the writing defaults (`loops.patterns.prose`) and the patterns ask here, once per call, rather than each
working out "the role's LM, else the context's" again.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import dspy

__all__ = ["Role", "lm_for", "lm_of", "lookup", "predictor_of"]


_predictors: weakref.WeakKeyDictionary[Any, tuple[dspy.Predict | None, str | None]] = weakref.WeakKeyDictionary()


def predictor_of(target: Any) -> tuple[dspy.Predict | None, str | None]:
    """A role's one predictor and the name of its signature's `dspy.History` input, if it has them.

    Resolved once per role object: walking `predictors()` walks each one's growing call history."""
    try:
        return _predictors[target]
    except KeyError:
        pass
    except TypeError:
        return None, None  # not weak-referenceable, so not a dspy.Module
    found = [target] if isinstance(target, dspy.Predict) else (
        target.predictors() if isinstance(target, dspy.Module) else [])
    predictor = found[0] if len(found) == 1 else None
    history = None if predictor is None else next(
        (name for name, info in predictor.signature.input_fields.items() if info.annotation is dspy.History), None)
    _predictors[target] = predictor, history
    return predictor, history


def lm_of(target: Any) -> Any:
    """The LM a role's calls go to: its one predictor's own (DSPy's `Module.get_lm()`, for a module with one
    predictor), else the context's (`dspy.settings.lm`), else None."""
    predictor, _ = predictor_of(target)
    return lm_for(predictor)


def lm_for(predictor: dspy.Predict | None) -> Any:
    """The LM `predictor` calls: its own, else the context's."""
    return predictor.lm if predictor is not None and predictor.lm is not None else dspy.settings.lm


@dataclass(frozen=True, slots=True)
class Role:
    """What answers a role's call: the role object (`target`), its one predictor and the name of that one's
    `dspy.History` input (None when it has none), and the LM the call goes to."""

    target: Any
    predictor: dspy.Predict | None
    history: str | None
    lm: Any


def lookup(target: Any) -> Role:
    """The role `target` as a call of it now needs it, looked up once (its LM may be the context's)."""
    predictor, history = predictor_of(target)
    return Role(target, predictor, history, lm_for(predictor))

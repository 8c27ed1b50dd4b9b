"""A class of the library by its public name, the one a user imports it by: `loops.CreatorCriticIterator`, not
the module that defines it today (`loops.creator_critic`).

What is recorded of a program (its fingerprint in a checkpoint, the `kind` of a saved program, a dataclass among
its saved arguments) names its class. Named by its defining module, a class that moves to another module (the
rooms of docs/architecture.md) would no longer match what was recorded before the move: a checkpoint would not
resume and a saved program would not load. Named by the shortest module of `loops` that exports it, it does not
change when the class moves; a name recorded before (`loops.creator_critic.CreatorCriticIterator`) is read as the
class it names (`canonical`). A user's class keeps its own module's name: it is neither looked up nor changed.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["canonical", "ours", "public_path"]


def public_path(cls: type) -> tuple[str, str]:
    """(module, qualname) of `cls` by its public name: the shortest module of the library that exports it under its
    own name (`("loops", "CreatorCriticIterator")`, `("loops.sexp", "SexpProgram")`), else its defining module.
    A class outside the library keeps its defining module."""
    module = cls.__module__
    if not ours(module):
        return module, cls.__qualname__
    parts = module.split(".")
    for end in range(1, len(parts)):
        if _attribute(sys.modules.get(".".join(parts[:end])), cls.__qualname__) is cls:
            return ".".join(parts[:end]), cls.__qualname__
    return module, cls.__qualname__


def canonical(name: str) -> str:
    """The public name of the library's class `name` names, written as `name` is (`module:qualname` or dotted):
    `loops.creator_critic:CreatorCriticIterator` is `loops:CreatorCriticIterator`, and
    `loops.creator_critic.CreatorCriticIterator` is `loops.CreatorCriticIterator`. A name outside the library, or
    one that names no class of it (a class since removed), is returned as it is."""
    module, colon, qualname = name.partition(":")
    candidates = [(module, qualname)] if colon else [(name[:dot], name[dot + 1:]) for dot in _dots(name)]
    for module, qualname in candidates:
        if not ours(module):
            return name
        try:
            found = _attribute(importlib.import_module(module), qualname)
        except ImportError:
            continue
        if isinstance(found, type):
            public_module, public_qualname = public_path(found)
            return f"{public_module}{':' if colon else '.'}{public_qualname}"
    return name


def ours(module: str) -> bool:
    """Whether `module` is the library's (`loops` or a module under it)."""
    return module == "loops" or module.startswith("loops.")


def _dots(name: str) -> list[int]:
    """Where a dotted name may split into a module and a qualname, the longest module first."""
    return sorted((index for index, character in enumerate(name) if character == "."), reverse=True)


def _attribute(module: Any, qualname: str) -> Any:
    value = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value

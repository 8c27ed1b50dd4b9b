"""A loop program saved with its configuration, and loaded back as it was.

DSPy's `module.save("x.json")` keeps each predictor's demos and instructions. A loop module's state adds
what makes it the same loop (`LoopModule.dump_state`): its class, the arguments it was built with
(budget, policy, samples, a DSL program's source, ...) and each role's LM as a model string (`local`
for the embedded model), never as an endpoint's settings. So:

- `loops.load("x.json")` rebuilds the program from the file alone (a person in a role's place,
  `loops.human()`, included); phases, tools or clocks that are
  Python objects cannot be written to JSON, so the file names them and `load` asks for them again
  as keywords (`load("x.json", executor=my_executor)`), before any LM call;
- `module.load("x.json")` on an already-built module of that class restores its demos, instructions,
  budget, retry policy, strictness and history settings, and its roles' LMs;
- neither needs `allow_unsafe_lm_state`: no LM endpoint settings are saved.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dspy
import orjson

from loops.errors import ConfigurationError
from loops.identity import ours, public_path
from loops.lm import is_embedded
from loops.running.person import Human
from loops.vocabulary.adapters import ADAPTER_CLASSES

__all__ = ["decode", "encode", "lm_reference", "load", "objects_to_give", "saved_class", "unnamed_lm_note",
           "unnamed_roles"]

_RUNTIME_SETTINGS = ("budget", "retry", "strict", "history_window", "history_summary")
_JSON_SCALARS = (str, int, float, bool, type(None))


def lm_reference(lm: Any) -> str | None:
    """The model string an LM is rebuilt from (`loops.lm.resolve`): `local` for the embedded model,
    a `dspy.LM`'s model otherwise; None for another kind of LM, and for a model behind a server of one's
    own (`api_base`): its name alone would send the role's prompts to the provider's public address."""
    if lm is None:
        return None
    if is_embedded(lm):
        return "local"
    if not isinstance(lm, dspy.LM) or lm.kwargs.get("api_base") or getattr(lm, "api_base", None):
        return None
    return lm.model


def unnamed_roles(roles: Iterable[str], lms: Mapping[str, str | None]) -> list[str]:
    """The LLM roles among `roles` a saved program names no LM for (`lms`, by role): they run on the context's."""
    return [role for role in roles if lms.get(role) is None]


def unnamed_lm_note(roles: Iterable[str], lms: Mapping[str, str | None]) -> str | None:
    """What a saved program does not say about its models, in one sentence: the LLM roles it names no LM for
    (they run on the context's LM, `dspy.configure`, which is not the program's to save); None when every
    role names one."""
    unnamed = unnamed_roles(roles, lms)
    if not unnamed:
        return None
    return (f"the saved program names no LM for {', '.join(unnamed)}: they run on the context's LM "
            "(dspy.configure, --model), which a saved program does not record; configure one where it is loaded, "
            "or give the roles LMs of their own (role.set_lm) before saving")


def encode(value: Any) -> Any:
    """A constructor argument as JSON: plain values as they are, loops' dataclasses (Budget, RetryPolicy,
    Limits) by their fields, adapters and workspaces by name; anything else is named, to be given again."""
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        return {key: encode(item) for key, item in value.items()}
    cls = type(value)
    if dataclasses.is_dataclass(value) and cls.__module__.startswith("loops."):
        return {"__dataclass__": ":".join(public_path(cls)), "fields": dataclasses.asdict(value)}
    if cls.__name__ in ADAPTER_CLASSES and isinstance(value, ADAPTER_CLASSES[cls.__name__]):
        return {"__adapter__": cls.__name__}
    if cls.__name__ == "Workspace" and cls.__module__ == "loops.tools.workspace":
        return os.fspath(value.path)
    if isinstance(value, Human) and value.answer is None:  # a person, not a function that answers for them
        return {"__human__": {"instructions": value.instructions, "interactive": value.interactive}}
    name = getattr(value, "__qualname__", None) or cls.__qualname__
    return {"__given__": f"{getattr(value, '__module__', cls.__module__)}.{name}"}


def decode(value: Any, name: str, given: Mapping[str, Any]) -> Any:
    if isinstance(value, list):
        return [decode(item, name, given) for item in value]
    if not isinstance(value, dict):
        return value
    if "__dataclass__" in value:
        module, _, qualname = value["__dataclass__"].partition(":")
        if not ours(module):
            raise ConfigurationError(f"{name}: {value['__dataclass__']!r} is not one of loops' classes")
        return getattr(importlib.import_module(module), qualname)(**value["fields"])
    if "__adapter__" in value:
        return ADAPTER_CLASSES[value["__adapter__"]]()
    if "__human__" in value:
        return Human(**value["__human__"])
    if "__given__" in value:
        if name not in given:
            raise ConfigurationError(
                f"the saved program was built with {name}={value['__given__']}, a Python object a JSON file cannot "
                f"hold: pass it again, e.g. loops.load(path, {name}=...)")
        return given[name]
    return {key: decode(item, f"{name}.{key}", given) for key, item in value.items()}


def saved_class(path: str | os.PathLike[str]) -> type:
    """The loop class of the program saved at `path`, read before anything is built."""
    return _read(path)[1]


def objects_to_give(path: str | os.PathLike[str]) -> dict[str, str]:
    """The arguments of the program saved at `path` that were Python objects a JSON file cannot hold (a custom
    phase, a DSL tool), by name, with the object's name: `load` needs each given again."""
    arguments = _read(path)[0]["loops"].get("arguments", {})
    return {name: value["__given__"] for name, value in arguments.items()
            if isinstance(value, dict) and "__given__" in value}


def load(path: str | os.PathLike[str], **given: Any) -> Any:
    """The loop program saved at `path` (by `save`, or `loops.optimize.run`), rebuilt with its class, its
    configuration, its demos and instructions and its roles' LMs. `given` supplies the arguments that
    were Python objects (custom phases, DSL tools) and overrides any saved argument."""
    state, cls = _read(path)
    arguments = {name: decode(value, name, given) for name, value in state["loops"].get("arguments", {}).items()}
    arguments.update(given)
    program = cls(**arguments)
    # The arguments (saved, and `given` over them) already set the runtime settings: keep those.
    settings = {name: getattr(program, name) for name in _RUNTIME_SETTINGS}
    program.load_state(state)
    for name, value in settings.items():
        setattr(program, name, value)
    return program


def _read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], type]:
    """The saved state at `path` and the loop class it names; a file that is not one raises."""
    try:
        state = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigurationError(f"cannot read the saved program {os.fspath(path)!r}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigurationError(f"{os.fspath(path)!r} is not a saved program (not JSON: {exc})") from None
    saved = state.get("loops") if isinstance(state, dict) else None
    if not isinstance(saved, dict) or "kind" not in saved:
        raise ConfigurationError(f"{os.fspath(path)!r} holds no loop program's configuration: it was not saved by "
                                 "a loops module (load a plain DSPy state with module.load(path) instead)")
    module_name, _, qualname = saved["kind"].partition(":")
    if not ours(module_name):
        raise ConfigurationError(f"{os.fspath(path)!r}: {saved['kind']!r} is not one of loops' programs")
    return state, getattr(importlib.import_module(module_name), qualname)

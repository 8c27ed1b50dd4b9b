"""Adapters that suit small models (plain text for one free-form answer, compact JSON for the rest), and
the one table of adapters a user can name (`ADAPTERS`: `--adapter`, `resolve(adapter=...)`, a model's
profile)."""

from __future__ import annotations

import contextlib
import copy
import functools
import re
import textwrap
import weakref
from typing import Any

from dspy.adapters import ChatAdapter, JSONAdapter, XMLAdapter
from dspy.adapters.utils import format_field_value
from dspy.signatures.signature import Signature

from loops.choices import ADAPTER_NAMES
from loops.errors import ConfigurationError

__all__ = ["ADAPTERS", "ADAPTER_CLASSES", "CompactJSONAdapter", "PlainTextAdapter", "historyless_once", "mixed_in"]


class PlainTextAdapter(ChatAdapter):
    """Asks plainly for one output field of a signature (`field`, by default the first) and takes the
    whole answer as its value.

    Small models write far better code and prose as free text than inside a JSON string or between
    field markers, and free text never fails to parse. The signature's other output fields must be
    `str`; they are left empty (`PlainTextAdapter("draft")` on a ChainOfThought role asks for the draft
    alone, its reasoning left empty). Demos and histories render the same way, so the role stays
    optimizable.

    With `strip_format=True` the answer is cut to what is not an imitation of the prompt's own format,
    which a small model writing prose often adds: a leading "Here is the improved draft:" line, and
    sections headed by the prompt's field labels ("Feedback: ..."); an answer that heads its text with
    the answer's own label keeps that section alone.
    """

    def __init__(self, field: str | None = None, callbacks: list[Any] | None = None, strip_format: bool = False):
        super().__init__(callbacks=callbacks, use_json_adapter_fallback=False)
        self.field = field
        self.strip_format = strip_format

    def format_system_message(self, signature: type[Signature]) -> str:
        return textwrap.dedent(signature.instructions).strip()

    def format_user_message_content(
        self,
        signature: type[Signature],
        inputs: dict[str, Any],
        prefix: str = "",
        suffix: str = "",
        main_request: bool = False,
    ) -> str:
        parts = [prefix]
        for name, field in signature.input_fields.items():
            value = inputs.get(name)
            if value not in (None, ""):
                parts.append(f"{_label(name)}:\n{format_field_value(field_info=field, value=value)}")
        if main_request:
            parts.append(f"Answer with the {_label(_answer_field(signature, self.field)).lower()} only.")
        parts.append(suffix)
        return "\n\n".join(part for part in parts if part).strip()

    def format_assistant_message_content(
        self, signature: type[Signature], outputs: dict[str, Any], missing_field_message: str | None = None
    ) -> str:
        return str(outputs.get(_answer_field(signature, self.field), missing_field_message) or "")

    def parse(self, signature: type[Signature], completion: str) -> dict[str, Any]:
        answer = _answer_field(signature, self.field)
        text = _without_format(completion, signature, answer) if self.strip_format else completion.strip()
        return {**dict.fromkeys(signature.output_fields, ""), answer: text}


class CompactJSONAdapter(JSONAdapter):
    """JSONAdapter without its template of placeholder values.

    JSONAdapter shows the answer's shape as `{"draft": "{draft}"}`, and small models copy the
    placeholders verbatim; the JSON schema sent with the request already fixes the shape, so the
    prompt only names the keys. The embedded model's default adapter.
    """

    def format_field_structure(self, signature: type[Signature]) -> str:
        return "Answer with one JSON object whose keys are the output fields, each holding your real answer."

    def format_task_description(self, signature: type[Signature]) -> str:
        return textwrap.dedent(signature.instructions).strip()

    def user_message_output_requirements(self, signature: type[Signature]) -> str:
        keys = ", ".join(f"`{name}`" for name in signature.output_fields)
        return f"Respond with a JSON object with the keys {keys}."


# The adapters a user names (`--adapter`, `resolve(adapter=...)`), one instance each: adapters keep no per-call state.
ADAPTERS: dict[str, Any] = dict(zip(ADAPTER_NAMES, (ChatAdapter(), JSONAdapter(), CompactJSONAdapter()), strict=True))
# The adapter classes a saved program may name as a constructor argument (`loops.running.saving`).
ADAPTER_CLASSES: dict[str, type] = {cls.__name__: cls for cls in (PlainTextAdapter, CompactJSONAdapter, ChatAdapter,
                                                                   JSONAdapter, XMLAdapter)}


class _HistorylessOnce:
    """Formats with the signature less its `dspy.History` field built once per signature: DSPy's
    `Adapter.format` builds it (`Signature.delete`, a new pydantic model: ~0.5 ms, as much as the rest of
    a role call) on every call of a role that has a history. The system message, a function of the
    signature alone for the adapters of DSPy and loops (~0.2-0.3 ms), is rendered once per signature too."""

    def format(self, signature: type[Signature], demos: list[dict[str, Any]], inputs: dict[str, Any]) -> Any:
        return super().format(_deleting_once(signature), demos, inputs)

    def format_system_message(self, signature: type[Signature]) -> str:
        if not _fixed_system_message(type(self)):
            return super().format_system_message(signature)
        return _system_message(type(self), signature, lambda: super(_HistorylessOnce, self).format_system_message(
            signature))


_SYSTEM_MESSAGE_PARTS = ("format_system_message", "format_field_description", "format_field_structure",
                         "format_task_description")


@functools.cache
def _fixed_system_message(cls: type) -> bool:
    """Whether `cls` renders the system message as DSPy's and loops' adapters do: from the signature alone.
    An adapter of one's own that renders any part of it differently is asked every time."""
    from dspy.adapters import Adapter, XMLAdapter

    ours = {Adapter, ChatAdapter, JSONAdapter, XMLAdapter, CompactJSONAdapter, PlainTextAdapter, _HistorylessOnce}
    return all(next(klass for klass in cls.__mro__ if name in vars(klass)) in ours for name in _SYSTEM_MESSAGE_PARTS)


_system_messages: dict[tuple[type, type], str] = {}


def _system_message(cls: type, signature: type[Signature], render: Any) -> str:
    key = (cls, signature)
    message = _system_messages.get(key)
    if message is None:
        if len(_system_messages) >= 512:  # bounded like `_deleting_once`, whose signatures are the keys here
            _system_messages.clear()
        message = _system_messages[key] = render()
    return message


@functools.lru_cache(maxsize=512)  # bounded: optimizers make a new signature per instruction they try
def _deleting_once(signature: type[Signature]) -> type[Signature]:
    """`signature` itself, but for `delete`, which builds each smaller signature once."""
    built: dict[str, type[Signature]] = {}

    def delete(cls: type[Signature], name: str) -> type[Signature]:
        if name not in built:
            built[name] = signature.delete(name)
        return built[name]

    return type(signature)(signature.__name__, (signature,), {
        "__doc__": signature.__doc__, "__module__": signature.__module__, "delete": classmethod(delete)})


_once_twins: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def historyless_once(adapter: Any) -> Any:
    """`adapter` (a twin of it; the adapter itself is unchanged) for a role with a history: it renders
    the same messages, with the signature less the history built once per signature, not per call."""
    if isinstance(adapter, _HistorylessOnce):
        return adapter
    try:
        return _once_twins[adapter]
    except (KeyError, TypeError):  # TypeError: an adapter that cannot be weakly keyed gets a new twin each call
        pass
    twin = mixed_in(adapter, _HistorylessOnce)
    with contextlib.suppress(TypeError):
        _once_twins[adapter] = twin
    return twin


_mixed_classes: dict[tuple[type, type], type] = {}


def mixed_in(adapter: Any, mixin: type) -> Any:
    """A copy of `adapter` whose class puts `mixin` first (the adapter itself is unchanged): how loops
    changes one step of any adapter's rendering, DSPy's or a user's. Each class is built once."""
    if isinstance(adapter, mixin):
        return adapter
    cls = type(adapter)
    mixed = _mixed_classes.get((mixin, cls))
    if mixed is None:
        mixed = _mixed_classes[(mixin, cls)] = type(cls.__name__, (mixin, cls), {"__module__": cls.__module__})
    twin = copy.copy(adapter)
    twin.__class__ = mixed
    return twin


def _answer_field(signature: type[Signature], field: str | None = None) -> str:
    fields = signature.output_fields
    answer = field if field is not None else next(iter(fields), None)
    if answer not in fields or any(info.annotation is not str for name, info in fields.items() if name != answer):
        raise ConfigurationError(
            f"PlainTextAdapter needs a signature with the output field {answer!r} whose other output fields are "
            f"all str; {signature.__name__} has {[(name, info.annotation) for name, info in fields.items()]}"
        )
    return answer


_PREAMBLE = re.compile(r"^\s*(here is|here's|here are|sure\b)[^\n]*:\s*$", re.IGNORECASE)


def _without_format(completion: str, signature: type[Signature], answer: str) -> str:
    """`completion` less what imitates the prompt: a "Here is ...:" line first, sections under field labels."""
    lines = completion.strip().splitlines()
    if lines and _PREAMBLE.match(lines[0]):
        lines = lines[1:]
    labels = {_label(name).lower(): name for name in [*signature.input_fields, *signature.output_fields]}
    heading = re.compile(rf"^\s*({'|'.join(map(re.escape, labels))})\s*:\s*", re.IGNORECASE)
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in lines:
        found = heading.match(line)
        if found:
            sections.append((labels[found.group(1).lower()], [line[found.end():]]))
        else:
            sections[-1][1].append(line)
    texts = [(name, "\n".join(body).strip()) for name, body in sections]
    own = next((text for name, text in texts if name == answer and text), None)
    return own or texts[0][1] or next((text for _, text in texts if text), "")


def _label(name: str) -> str:
    return name.replace("_", " ").capitalize()

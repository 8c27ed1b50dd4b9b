"""Adapters that suit small models: plain text for one free-form answer, compact JSON for the rest."""

from __future__ import annotations

import textwrap
from typing import Any

from dspy.adapters import ChatAdapter, JSONAdapter
from dspy.adapters.utils import format_field_value
from dspy.signatures.signature import Signature

from loops.errors import ConfigurationError


class PlainTextAdapter(ChatAdapter):
    """Asks plainly for a signature's first output field and takes the whole answer as its value.

    Small models write far better code as free text than inside a JSON string or between field
    markers, and free text never fails to parse. The signature's other output fields must be `str`;
    they are left empty. Demos and histories render the same way, so the role stays optimizable.
    """

    def __init__(self, callbacks: list[Any] | None = None):
        super().__init__(callbacks=callbacks, use_json_adapter_fallback=False)

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
            parts.append(f"Answer with the {_label(_answer_field(signature)).lower()} only.")
        parts.append(suffix)
        return "\n\n".join(part for part in parts if part).strip()

    def format_assistant_message_content(
        self, signature: type[Signature], outputs: dict[str, Any], missing_field_message: str | None = None
    ) -> str:
        return str(outputs.get(_answer_field(signature), missing_field_message) or "")

    def parse(self, signature: type[Signature], completion: str) -> dict[str, Any]:
        answer, *others = signature.output_fields
        return {answer: completion.strip(), **dict.fromkeys(others, "")}


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


def _answer_field(signature: type[Signature]) -> str:
    fields = signature.output_fields
    if not fields or any(info.annotation is not str for info in list(fields.values())[1:]):
        raise ConfigurationError(
            f"PlainTextAdapter needs a signature whose output fields after the first are all str; "
            f"{signature.__name__} has {[(name, info.annotation) for name, info in fields.items()]}"
        )
    return next(iter(fields))


def _label(name: str) -> str:
    return name.replace("_", " ").capitalize()

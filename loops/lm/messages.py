"""What the embedded engine and the server engines share: a DSPy request as chat-completion messages, and
its sampling settings by the names llama.cpp and OpenAI-compatible servers use."""

from __future__ import annotations

from typing import Any

from dspy.lm15 import Request

__all__ = ["SAMPLING", "chat_messages", "sampling_options"]

# Sampling settings by the same names in DSPy's request config, llama.cpp and OpenAI-compatible servers.
SAMPLING = ("temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty")


def chat_messages(request: Request, roles: dict[str, str], text_of: Any) -> list[dict[str, str]]:
    """A request's system text and messages as chat-completion messages: roles renamed by `roles`, each
    message's parts joined to one text by `text_of`."""
    messages = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else text_of(request.system)
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages.append({"role": roles.get(message.role, message.role), "content": text_of(message.parts)})
    return messages


def sampling_options(config: Any) -> dict[str, Any]:
    """The sampling settings a request's config sets, by the names llama.cpp and servers share."""
    return {name: getattr(config, name) for name in SAMPLING if getattr(config, name) is not None}

"""Which LM: the one spelling of a model for every part of loops (the CLI's --model and its options, a
saved program's model strings, a DSL atom's `(model ...)`).

`resolve` takes None/"local" (the embedded model), an LM object, or a LiteLLM model string, with or
without the address of an OpenAI-compatible server of one's own (`api_base`), and checks everything
it can before any LM call.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import dspy
import orjson
from dspy.utils import exceptions as dspy_errors

from loops.errors import ConfigurationError
from loops.lm.embedded import local_lm
from loops.lm.server import ServerLM
from loops.vocabulary.adapters import ADAPTERS
from loops.vocabulary.profile import with_adapter, with_size

__all__ = ["REMOTE_MAX_TOKENS", "SERVED_ADAPTER", "resolve"]

# The adapter of a model behind a server of one's own (`api_base`), unless told: the output's JSON schema goes with
# every request, so a small model's decoding is held to it. With DSPy's field markers (`chat`) the embedded GGUF
# behind llama-cpp-python's server answered out of shape every time and DSPy asked again in JSON: 2 requests per
# role call instead of 1, 2.8x the time (benchmarks/parse_rate.py --server-defaults).
SERVED_ADAPTER = "compact"
# A finite default for every model but the embedded one: one answer from a slow server cannot run for minutes.
REMOTE_MAX_TOKENS = 1024
_REASONING_MAX_TOKENS = 16000  # the least DSPy accepts for OpenAI's reasoning models (gpt-5, o3, ...)


def resolve(
    model: str | dspy.BaseLM | None,
    *,
    api_base: str | None = None,
    api_key_env: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    adapter: str | None = None,
    profile: str | None = None,
) -> dspy.BaseLM:
    """One spelling for "which LM" across loops: None/"local" is the embedded model, an LM is used as
    it is, and a string is a LiteLLM model string, checked now so that an unknown provider fails
    before any LM call.

    `api_base` is the address of an OpenAI-compatible server (llama.cpp, vLLM, ...) that serves the string's model
    (`openai/<name>`; see `ServerLM`); `api_key_env` names the environment variable holding its key, read now.
    `max_tokens` (per request) and `temperature` default per kind of model: the embedded model's own (512, 0.0); else
    `REMOTE_MAX_TOKENS` and the model's own temperature. `adapter` ('chat', 'json' or 'compact', see `ADAPTERS`) travels
    with the LM: every role on it uses that adapter unless the context or the role sets another (its profile,
    `loops.vocabulary.profile`); with `api_base` it defaults to `SERVED_ADAPTER`, else to the model's own (the embedded
    model's `compact`, DSPy's `chat`). `profile` ('small' or 'capable') declares what the model is, over what its name
    says (`loops.vocabulary.profile`: the embedded model and a SmolLM or a model of at most a billion parameters by its
    name are small): a small model's writing roles answer in plain text with worked examples, its code loop draws
    several candidates, its roles see their last few turns. A given LM is copied before settings are applied to it.
    Every mistake is a `ConfigurationError`, raised before any call.

    A string's LM gets `num_retries=0`: the loop's `RetryPolicy` retries transient errors itself,
    within the run's budget, and DSPy's own retries underneath would multiply every request unseen.
    """
    _check_request_settings(max_tokens, temperature, adapter)
    settings = {name: value for name, value in (("max_tokens", max_tokens), ("temperature", temperature))
                if value is not None}
    if model is None or model == "local" or isinstance(model, dspy.BaseLM):
        if api_base is not None or api_key_env is not None:
            what = "the embedded model runs in this process" if not isinstance(model, dspy.BaseLM) else (
                "an LM object brings its own connection")
            raise ConfigurationError(
                f"api_base/api_key_env (--api-base/--api-key-env) need a model string, and {what}; give the "
                "server's model as a string such as 'openai/<name>'")
        if isinstance(model, dspy.BaseLM):
            lm = model.copy(**settings) if settings or adapter is not None or profile is not None else model
        else:
            lm = local_lm(**settings)
        return _declared(lm, adapter, profile)
    if not isinstance(model, str):
        raise ConfigurationError(
            f"model must be None, 'local', a model string or a dspy.LM, not {type(model).__name__}")
    fix = "use 'local' (the embedded model) or a LiteLLM model string such as 'openai/gpt-4o-mini'"
    provider = model.partition("/")[0].replace("_", "-")
    declared = {spelling for registered in dspy.lm15.registered_providers()
                for spelling in registered.definition.spellings}
    # A provider declared to DSPy's native engine, or a model in LiteLLM's price map, is known without importing
    # LiteLLM (3-4 s): a DSL atom's (model "gpt-4-turbo") is checked when the program compiles. So is any
    # 'openai/<name>' at an api_base: ServerLM speaks OpenAI's API to the server, whatever name it serves.
    served = api_base is not None and provider == "openai"
    if not served and provider not in declared and model not in _litellm_models():
        import contextlib
        import io

        import litellm  # only here: the embedded model's path never loads LiteLLM

        try:
            with contextlib.redirect_stdout(io.StringIO()):  # LiteLLM prints a banner on a miss
                litellm.get_llm_provider(model)
        except litellm.exceptions.BadRequestError:
            if api_base is not None:  # a server of one's own: its models are OpenAI's spelling of the name it serves
                fix = (f"a model behind an OpenAI-compatible server (--api-base) is 'openai/<the name it serves>': "
                       f"use 'openai/{model}'")
            raise ConfigurationError(f"unknown model {model!r}: LiteLLM knows no provider for it; {fix}") from None
    settings.setdefault("max_tokens", _default_max_tokens(model))
    api_base = None if api_base is None else _checked_api_base(api_base)
    api_key = _api_key(api_key_env)
    if api_key is not None:
        settings["api_key"] = api_key
    try:
        if api_base is None:
            lm = dspy.LM(model, num_retries=0, **settings)
        else:
            lm = ServerLM(model, api_base=api_base, num_retries=0, **settings)
            adapter = adapter or SERVED_ADAPTER
    except (ValueError, dspy_errors.LMConfigurationError) as exc:
        raise ConfigurationError(f"model {model!r} is not usable: {exc}; {fix}") from exc
    return _declared(lm, adapter, profile)


@functools.cache
def _litellm_models() -> frozenset[str]:
    """The models in the price map LiteLLM ships (each with its provider), read as data, without importing it."""
    spec = importlib.util.find_spec("litellm")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            return frozenset(orjson.loads((Path(folder) / "model_prices_and_context_window_backup.json").read_bytes()))
        except (OSError, orjson.JSONDecodeError):
            continue
    return frozenset()


def _check_request_settings(max_tokens: object, temperature: object, adapter: object) -> None:
    if adapter is not None and (not isinstance(adapter, str) or adapter not in ADAPTERS):
        raise ConfigurationError(
            f"unknown adapter {adapter!r} (--adapter): use one of {', '.join(map(repr, ADAPTERS))}, or set an "
            "adapter object with dspy.context(adapter=...)")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ConfigurationError(
            f"max_tokens (--max-tokens) must be a positive whole number of tokens per answer, got {max_tokens!r}")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, int | float)
                                    or not 0 <= temperature <= 2):
        raise ConfigurationError(f"temperature (--temperature) must be a number from 0 to 2, got {temperature!r}")


def _default_max_tokens(model: str) -> int:
    from dspy.clients.lm import _is_openai_reasoning_model  # DSPy's own test for the models it holds to 16000

    return _REASONING_MAX_TOKENS if _is_openai_reasoning_model(model) else REMOTE_MAX_TOKENS


def _api_key(variable: str | None) -> str | None:
    """The key in the environment variable `variable`, read now so that a missing one fails before any call."""
    if variable is None:
        return None
    if not isinstance(variable, str) or not variable.strip():
        raise ConfigurationError(
            f"api_key_env (--api-key-env) is the name of an environment variable holding the key, got {variable!r}")
    value = os.environ.get(variable)
    if not value:
        state = "is empty" if value == "" else "is not set"
        raise ConfigurationError(f"the environment variable {variable} named by --api-key-env {state}: export "
                                 f"{variable}=<the API key> first, or name the variable that holds the key")
    return value


def _checked_api_base(url: object) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        schemed = urlsplit(f"http://{url}") if isinstance(url, str) and "://" not in url else None
        if schemed is not None and schemed.hostname and schemed.port:  # a host and a port: the scheme left out
            raise ConfigurationError(f"api_base (--api-base) must be an http(s) address, got {url!r}: did you mean "
                                     f"http://{url}?")
        raise ConfigurationError(f"api_base (--api-base) must be an http(s) address such as "
                                 f"http://127.0.0.1:8080/v1, got {url!r}")
    return url.rstrip("/")


def _declared(lm: dspy.BaseLM, adapter: str | None, profile: str | None) -> dspy.BaseLM:
    """`lm` with the adapter and the profile it was given, when given (`loops.vocabulary.profile`)."""
    if adapter is not None:
        with_adapter(lm, adapter)
    return lm if profile is None else with_size(lm, profile)

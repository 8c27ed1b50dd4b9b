"""The models loops runs on, one module per reason to change:

- `loops.lm.embedded`: the embedded default LM (SmolLM2-135M in this process, by llama.cpp): `local_lm`;
- `loops.lm.prefix_cache`: what the embedded model keeps of the prompts it read, so that a later prompt
  sharing their beginning reads only the rest (`LOOPS_LLAMA_CACHE_MB`);
- `loops.lm.cores`: how many threads it runs on: the cores other processes leave free to read
  prompts, one to generate (`LOOPS_LLAMA_THREADS`);
- `loops.lm.server`: a model behind an OpenAI-compatible server of one's own (`ServerLM` and its engines);
- `loops.lm.resolution`: which LM a model string, `local` or an LM object names (`resolve`);
- `loops.lm.messages`: what the engines share (a request as chat messages, its sampling settings).

What the runtime needs of a model (its adapter, its history window, its price) it reads from the
model's profile (`loops.vocabulary.profile`), never from here.
"""

import os

# Before DSPy is imported: LiteLLM's price map is read from the installed package, not fetched.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from loops.lm.embedded import (
    CONTEXT_TOKENS,
    DEFAULT_MAX_TOKENS,
    EMBEDDED_HISTORY_WINDOW,
    EMBEDDED_PROFILE,
    MODEL,
    AsyncLlamaEngine,
    LlamaEngine,
    is_embedded,
    local_lm,
    model_path,
)
from loops.lm.resolution import REMOTE_MAX_TOKENS, resolve
from loops.lm.server import SERVER_TIMEOUT_S, AsyncServerEngine, ServerEngine, ServerLM

__all__ = [
    "CONTEXT_TOKENS",
    "DEFAULT_MAX_TOKENS",
    "EMBEDDED_HISTORY_WINDOW",
    "EMBEDDED_PROFILE",
    "MODEL",
    "REMOTE_MAX_TOKENS",
    "SERVER_TIMEOUT_S",
    "AsyncLlamaEngine",
    "AsyncServerEngine",
    "LlamaEngine",
    "ServerEngine",
    "ServerLM",
    "is_embedded",
    "local_lm",
    "model_path",
    "resolve",
]

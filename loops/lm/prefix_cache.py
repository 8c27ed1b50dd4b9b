"""Prefix reuse for the embedded model: llama.cpp's state after prompts it has read, kept in memory up to a
bound, so that a call reads only what follows the longest prefix its prompt shares with one of them.

Reading a prompt is most of a call's time on a CPU, and a loop's prompts repeat: every call of a role starts
with the role's system message and field descriptions, and a loop calls each role again and again. But
between two calls of a role come the other roles' calls, so the model's live context (which llama.cpp reuses
only as far as it matches the next prompt) holds another role's prompt when the role comes back.

The states are kept through llama-cpp-python's own cache protocol (`Llama.set_cache`): before a completion
the model asks the cache for the state that shares the longest token prefix with the prompt and loads it when
that prefix is longer than the one its live context shares; `Llama.generate` then drops what follows the
shared prefix and reads only the rest; after the completion it hands the cache its state. So the state of a
role's earlier call serves the role's next call as far as the two prompts agree (the system message, the
field descriptions, the history both hold), not only a prompt that extends it: no state needs saving at the
end of a system message.

Answers stay what they would be from a prompt read whole (`PrefixCachingLlama`): only tokens read in
batches are reused, never those generated one by one, and the last batch read is as long as a whole
read's. What differs from llama-cpp-python's `LlamaRAMCache`, and why:
- its states carry a copy of the logits of the last batch, n_batch x n_vocab floats (100 MB for SmolLM2),
  copied at every save and every load, and not counted against its bound; a model without `logits_all`
  never reads them (sampling reads llama.cpp's own logits). `PrefixCachingLlama` saves and loads llama.cpp's
  state and the tokens it read, nothing more;
- `PrefixStates` counts every byte it keeps, and a state whose tokens another one extends is dropped (the
  longer one serves every prompt the shorter one would).

A state costs what llama.cpp's KV cache holds for its tokens: 30 layers x (K + V) x 192 values x 2 bytes,
22.5 KiB a token for SmolLM2-135M (a 400-token role prompt: 9 MB; the full 8k context: 185 MB).
"""

from __future__ import annotations

import ctypes
import math
import os
from collections import OrderedDict

import llama_cpp
import numpy as np
from llama_cpp.llama_cache import BaseLlamaCache

from loops.errors import ConfigurationError
from loops.lm.cores import thread_counts

__all__ = ["CACHE_MB_VARIABLE", "DEFAULT_CACHE_MB", "PrefixCachingLlama", "PrefixStates", "cache_bytes"]

CACHE_MB_VARIABLE = "LOOPS_LLAMA_CACHE_MB"
# About thirty role prompts of 400 tokens, or one prompt filling the whole 8k context, next to the model's own
# ~400 MB: room for every role of a few loops on a laptop.
DEFAULT_CACHE_MB = 256


def cache_bytes() -> int:
    """The bound of the embedded model's prefix cache, in bytes: `LOOPS_LLAMA_CACHE_MB` (0 turns it off)."""
    text = os.environ.get(CACHE_MB_VARIABLE, "").strip()
    if not text:
        return DEFAULT_CACHE_MB << 20
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = math.nan
    if not 0 <= megabytes < math.inf:
        raise ConfigurationError(f"{CACHE_MB_VARIABLE}={text!r} is not a size in megabytes. Fix: set it to a "
                                 f"number >= 0 (0 turns the prefix cache off; unset, it is {DEFAULT_CACHE_MB})")
    return int(megabytes * (1 << 20))


def _shared_prefix(tokens: np.ndarray, prompt: np.ndarray) -> int:
    """How many leading tokens `tokens` and `prompt` have in common."""
    length = min(len(tokens), len(prompt))
    differ = np.flatnonzero(tokens[:length] != prompt[:length])
    return int(differ[0]) if len(differ) else length


class PrefixStates(BaseLlamaCache):
    """States of a llama.cpp model by the tokens they hold, at most `capacity_bytes` of them, the least
    recently used dropped first; a lookup answers the state sharing the longest prefix with the tokens asked
    for. Only the model that holds it reads or writes it, under that model's lock."""

    def __init__(self, capacity_bytes: int):
        super().__init__(capacity_bytes)
        self._states: OrderedDict[bytes, tuple[np.ndarray, llama_cpp.LlamaState, int]] = OrderedDict()

    @property
    def cache_size(self) -> int:
        """The bytes its states take: llama.cpp's state and the tokens of each."""
        return sum(size for _, _, size in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def __bool__(self) -> bool:
        return True  # Llama checks `if self.cache:` before each lookup and save: an empty cache is still one

    def longest_prefix(self, tokens) -> tuple[int, llama_cpp.LlamaState | None]:
        """The state sharing the longest prefix with `tokens` and the length of that prefix (0, None if none
        shares any); of states sharing as much, the smallest, the cheapest to load."""
        prompt = np.asarray(tokens, dtype=np.intc)
        best, best_length, best_size = None, 0, 0
        for key, (held, _, size) in self._states.items():
            length = _shared_prefix(held, prompt)
            if length > best_length or (length == best_length and best is not None and size < best_size):
                best, best_length, best_size = key, length, size
        if best is None:
            return 0, None
        self._states.move_to_end(best)
        return best_length, self._states[best][1]

    def __getitem__(self, key) -> llama_cpp.LlamaState:
        _, state = self.longest_prefix(key)
        if state is None:
            raise KeyError("no state shares a prefix with the prompt")
        return state

    def __contains__(self, key) -> bool:
        prompt = np.asarray(key, dtype=np.intc)
        return any(_shared_prefix(held, prompt) for held, _, _ in self._states.values())

    def __setitem__(self, key, state: llama_cpp.LlamaState) -> None:
        """Keep `state` under the tokens it holds: what it read of the prompt (`key`, the prompt and the answer
        Llama passes, names more)."""
        held = np.asarray(state.input_ids[: state.n_tokens], dtype=np.intc)
        size = state.llama_state_size + held.nbytes + state.scores.nbytes
        if size > self.capacity_bytes:
            return
        for other_key, (other, _, _) in list(self._states.items()):
            shared = _shared_prefix(other, held)
            if shared == len(other):  # the new state extends it: it serves every prompt the old one would
                del self._states[other_key]
            elif shared == len(held):  # an old state extends the new one: keep the old, now recently used
                self._states.move_to_end(other_key)
                return
        self._states[held.tobytes()] = (held, state, size)
        while self.cache_size > self.capacity_bytes:
            self._states.popitem(last=False)


class PrefixCachingLlama(llama_cpp.Llama):
    """A `llama_cpp.Llama` that reuses what it read exactly: a prompt's answer is the one it gets read whole.

    llama.cpp computes one token alone on another path than tokens in a batch, and the two differ (SmolLM2's
    logits by up to 0.6), enough to change a greedy answer. A prompt read whole is read in batches, but
    `Llama.generate` reuses whatever its context shares with the next prompt: the tokens it generated (read one
    by one), and a prompt all but one token of which it holds (reading the last one alone). So this model
    reuses only the tokens it read in batches, and leaves the last batch of a prompt as long as a whole read
    would (two tokens at least, unless the whole read's last batch is one token too).

    Its saved states hold that reusable part: the context is cut to it first (what follows was generated
    and is never reused), and they hold no copy of the last batch's logits, n_batch x n_vocab floats, that
    `Llama.save_state` adds (with `logits_all` off nothing reads them, and copying them cost more than
    loading a state)."""

    _batch_read = 0  # how many leading tokens of the context were read in batches of two or more

    def use_threads(self, count: int) -> None:
        """Read prompts on `count` threads from the next generation on, and generate on as many as
        `loops.lm.cores.thread_counts` gives them (one, unless `LOOPS_LLAMA_THREADS` fixes it)."""
        generating, reading = thread_counts(count)
        if generating != self.n_threads or reading != self.n_threads_batch:
            llama_cpp.llama_set_n_threads(self.ctx, generating, reading)
            self.n_threads, self.n_threads_batch = generating, reading

    def reusable(self, prompt_length: int, shared: int) -> int:
        """How many leading tokens of the context to keep for a prompt of `prompt_length` tokens that shares
        `shared` with it: read in batches, and leaving a last batch that is one token alone just when a whole
        read's would be."""
        alone = prompt_length % self.n_batch == 1
        keep = min(shared, self._batch_read, prompt_length - 1)
        while keep > 0 and ((prompt_length - keep) % self.n_batch == 1) != alone:
            keep -= 1
        return keep

    def generate(self, tokens, *args, **kwargs):
        tokens = list(tokens)
        if kwargs.get("reset", True) and self.n_tokens:
            # Llama.generate keeps what the context shares with the prompt: cut it to what may be kept.
            self.n_tokens = self.reusable(len(tokens), self.longest_token_prefix(self._input_ids, tokens))
        self._batch_read = len(tokens) - (len(tokens) % self.n_batch == 1)
        return super().generate(tokens, *args, **kwargs)

    def save_state(self) -> llama_cpp.LlamaState:
        if self._logits_all:
            return super().save_state()
        kept = min(self.n_tokens, self._batch_read)
        if kept < self.n_tokens:
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.ctx), -1, kept, -1)
            self.n_tokens = kept
            self._requires_eval = True  # the logits are those of a token no longer in the context
        size = llama_cpp.llama_state_get_size(self.ctx)
        data = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_get_data(self.ctx, data, size)
        if written != size:
            raise RuntimeError(f"llama.cpp saved {written} bytes of a {size}-byte state")
        return llama_cpp.LlamaState(input_ids=self.input_ids[:kept].copy(),
                                    scores=np.empty((0, self._n_vocab), dtype=np.single), n_tokens=kept,
                                    llama_state=data, llama_state_size=size, seed=self._seed)

    def load_state(self, state: llama_cpp.LlamaState) -> None:
        if self._logits_all or len(state.scores):
            super().load_state(state)
        else:
            if llama_cpp.llama_state_set_data(self.ctx, state.llama_state, state.llama_state_size) \
                    != state.llama_state_size:
                raise RuntimeError("llama.cpp could not load a saved state")
            self.input_ids[: state.n_tokens] = state.input_ids[: state.n_tokens]
            self.n_tokens = state.n_tokens
            self._seed = state.seed
            self._requires_eval = True  # as Llama.load_state: the next generation reads at least one token
        self._batch_read = state.n_tokens

"""The embedded model's prefix cache: its bound and its lookups on states of a given size, then the real
SmolLM2 (`embedded`): the same greedy answers with the cache as without, prompts read only past the prefix
they share, and concurrent callers that never see each other's states."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import dspy
import llama_cpp
import numpy as np
import pytest
from dspy.lm15 import Config, Message, Request

from loops import CreatorCriticIterator
from loops.errors import ConfigurationError
from loops.lm import embedded, local_lm
from loops.lm.prefix_cache import DEFAULT_CACHE_MB, PrefixStates, cache_bytes


def state(tokens: list[int], size: int) -> llama_cpp.LlamaState:
    """A state of `size` bytes of llama.cpp data holding `tokens`, as `PrefixCachingLlama.save_state` makes them."""
    return llama_cpp.LlamaState(input_ids=np.array(tokens, dtype=np.intc), scores=np.empty((0, 8), dtype=np.single),
                                n_tokens=len(tokens), llama_state=bytes(size), llama_state_size=size, seed=0)


def held(cache: PrefixStates) -> list[list[int]]:
    return [list(tokens) for tokens, _, _ in cache._states.values()]


def test_the_bound_counts_every_byte_and_drops_the_least_recently_used_first():
    cache = PrefixStates(capacity_bytes=1000)
    for first in range(1, 6):  # 5 states of 300 + 3 tokens x 4 bytes: three fit
        cache[[first, 2, 3]] = state([first, 2, 3], 300)
        assert cache.cache_size <= 1000
    assert held(cache) == [[3, 2, 3], [4, 2, 3], [5, 2, 3]]
    assert cache.cache_size == 3 * (300 + 12)

    assert cache[[3, 2, 9]].input_ids.tolist() == [3, 2, 3]  # a lookup makes it the most recently used
    cache[[6, 2, 3]] = state([6, 2, 3], 300)
    assert held(cache) == [[5, 2, 3], [3, 2, 3], [6, 2, 3]]


def test_a_state_larger_than_the_bound_is_not_kept_and_evicts_nothing():
    cache = PrefixStates(capacity_bytes=1000)
    cache[[1, 2]] = state([1, 2], 100)
    cache[[7, 8]] = state([7, 8], 2000)
    assert held(cache) == [[1, 2]]


def test_a_lookup_answers_the_state_sharing_the_longest_prefix_even_one_that_goes_on_differently():
    cache = PrefixStates(capacity_bytes=10_000)
    system = [1, 2, 3, 4]
    cache[system + [10, 11, 12]] = state(system + [10, 11, 12], 100)  # the role's earlier prompt and answer
    cache[[1, 2, 9]] = state([1, 2, 9], 100)  # another role's

    assert cache.longest_prefix(system + [20, 21])[0] == 4
    assert cache[system + [20, 21]].input_ids.tolist() == system + [10, 11, 12]
    assert [1, 2, 9, 9] in cache and [5] not in cache
    with pytest.raises(KeyError):
        cache[[5, 6]]


def test_of_states_sharing_as_much_the_smallest_is_loaded():
    cache = PrefixStates(capacity_bytes=10_000)
    cache[[1, 2, 3, 4]] = state([1, 2, 3, 4], 500)
    cache[[1, 2, 5]] = state([1, 2, 5], 100)
    assert cache[[1, 2, 7]].input_ids.tolist() == [1, 2, 5]


def test_a_state_another_one_extends_is_dropped():
    cache = PrefixStates(capacity_bytes=10_000)
    cache[[1, 2, 3]] = state([1, 2, 3], 100)
    cache[[1, 2, 3, 4, 5]] = state([1, 2, 3, 4, 5], 100)  # the same prompt again, answered further
    assert held(cache) == [[1, 2, 3, 4, 5]]
    cache[[1, 2]] = state([1, 2], 100)  # nothing the longer one does not serve
    assert held(cache) == [[1, 2, 3, 4, 5]]


def test_an_empty_cache_is_still_a_cache_to_llama():
    assert PrefixStates(capacity_bytes=1000)  # Llama skips lookups and saves when `not self.cache`


def test_the_bound_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("LOOPS_LLAMA_CACHE_MB", raising=False)
    assert cache_bytes() == DEFAULT_CACHE_MB << 20
    monkeypatch.setenv("LOOPS_LLAMA_CACHE_MB", "0")
    assert cache_bytes() == 0
    monkeypatch.setenv("LOOPS_LLAMA_CACHE_MB", "1.5")
    assert cache_bytes() == 3 << 19
    for wrong in ("lots", "-1", "nan", "inf"):
        monkeypatch.setenv("LOOPS_LLAMA_CACHE_MB", wrong)
        with pytest.raises(ConfigurationError, match="LOOPS_LLAMA_CACHE_MB=.* Fix: set it to a number >= 0"):
            cache_bytes()


# ---- the real model -------------------------------------------------------------------------------

CRITIC = ("You judge a draft against its requirements. Answer with a JSON object: accuracy_passed, "
          "completeness_passed and quality_passed (true or false), feedback (one sentence) and approved.")
WRITER = ("You write short texts for a small shop. Follow the requirements exactly, in plain words, "
          "with no preamble and no explanation of what you wrote.")
# Role-like prompts: two system messages, each with several endings, and one prompt twice.
PROMPTS = [
    (WRITER, "Requirements: a slogan for a bicycle shop."),
    (CRITIC, "Requirements: a slogan for a bicycle shop.\nDraft: Ride further, smile wider."),
    (WRITER, "Requirements: a one-line birthday wish for a colleague."),
    (CRITIC, "Requirements: a one-line birthday wish.\nDraft: Happy birthday, may your year be kind."),
    (WRITER, "Requirements: a title for a post about saving energy at home."),
    (WRITER, "Requirements: a slogan for a bicycle shop."),
]


def request(system: str, user: str, history: tuple[tuple[str, str], ...] = ()) -> Request:
    """A role's call after the turns of `history` (a request, the answer): greedy, the critic's answer
    constrained to JSON."""
    turns = [message for asked, answered in history for message in (Message.user(asked), Message.assistant(answered))]
    return Request(model=embedded.MODEL, system=system, messages=(*turns, Message.user(user)),
                   config=Config(max_tokens=24, temperature=0.0,
                                 response_format={"type": "json_object"} if system is CRITIC else None))


def ask(system: str, user: str, history: tuple[tuple[str, str], ...] = ()) -> str:
    return embedded.LlamaEngine().complete(request(system, user, history)).text


@contextlib.contextmanager
def prefix_cache(cache: PrefixStates | None):
    """The shared model with `cache` (None: no cache) and an empty context, its own cache back afterwards."""
    llama = embedded._shared_model()
    with embedded._generation_lock:
        kept = llama.cache
        llama.set_cache(cache)
        llama.reset()
    try:
        yield llama
    finally:
        with embedded._generation_lock:
            llama.set_cache(kept)


def prompt_tokens_read(llama: llama_cpp.Llama) -> int:
    return llama_cpp.llama_perf_context(llama.ctx).n_p_eval


@pytest.fixture(scope="module")
def cold_answers():
    """Each prompt's greedy answer read from an empty context, no cache: the reference."""
    answers = []
    with prefix_cache(None) as llama:
        for system, user in PROMPTS:
            with embedded._generation_lock:
                llama.reset()
            answers.append(ask(system, user))
    return answers


@pytest.mark.embedded
def test_greedy_answers_are_the_same_with_the_cache_as_without(cold_answers):
    cache = PrefixStates(capacity_bytes=64 << 20)
    with prefix_cache(cache) as llama:
        read_before = prompt_tokens_read(llama)
        first = [ask(system, user) for system, user in PROMPTS]
        again = [ask(system, user) for system, user in reversed(PROMPTS)][::-1]
        read = prompt_tokens_read(llama) - read_before

    assert first == cold_answers
    assert again == cold_answers
    # Every prompt twice, yet not even each once was read in full: the role's system message came from the cache.
    total = sum(len(llama.tokenize(f"{system} {user}".encode())) for system, user in PROMPTS)
    assert read < total
    assert len(cache) >= 2


@pytest.mark.embedded
@pytest.mark.parametrize("cache", [PrefixStates(capacity_bytes=64 << 20), None], ids=["cache", "no cache"])
def test_an_answer_in_the_next_prompts_history_is_read_again_not_reused(cache, cold_answers):
    # The context holds the answer just generated, token by token; the next prompt holds it as history, which
    # a whole read reads in a batch: reusing the generated tokens would change the next answer.
    system, user = PROMPTS[0]
    follow_up = (system, "Now make it shorter.", ((user, cold_answers[0]),))
    with prefix_cache(None) as llama:
        with embedded._generation_lock:
            llama.reset()
        read_whole = ask(*follow_up)
    with prefix_cache(cache):
        assert ask(system, user) == cold_answers[0]
        assert ask(*follow_up) == read_whole


@pytest.mark.embedded
def test_a_role_prompt_is_read_only_past_the_prefix_it_shares_with_a_state_kept():
    with prefix_cache(PrefixStates(capacity_bytes=64 << 20)) as llama:
        ask(*PROMPTS[0])  # the writer
        ask(*PROMPTS[1])  # the critic: the model's context now holds the critic's prompt
        before = prompt_tokens_read(llama)
        ask(*PROMPTS[2])  # the writer again, with another request
        read = prompt_tokens_read(llama) - before
    system_tokens = len(llama.tokenize(WRITER.encode()))
    assert 0 < read < len(llama.tokenize(PROMPTS[2][1].encode())) + 12  # its request and the chat markup
    assert read < system_tokens


@pytest.mark.embedded
def test_the_bound_holds_on_the_models_own_states():
    bound = 3 << 20  # room for two of these prompts' states (60-90 tokens, ~22.5 KiB a token), not for all
    cache = PrefixStates(capacity_bytes=bound)
    with prefix_cache(cache) as llama:
        for system, user in PROMPTS:
            ask(system, user)
            assert 0 < cache.cache_size <= bound
            kept = [entry for _, entry, _ in cache._states.values()]
            assert all(entry.scores.nbytes == 0 for entry in kept)  # no copy of the last batch's logits
            with embedded._generation_lock:
                assert kept[-1].llama_state_size == llama_cpp.llama_state_get_size(llama.ctx)
    assert len(cache) == 2


@pytest.mark.embedded
def test_concurrent_callers_share_the_cached_model_without_mixing_states(cold_answers):
    answers: dict[int, str] = {}
    errors: list[BaseException] = []

    def call(index: int) -> None:
        try:
            answers[index] = ask(*PROMPTS[index])
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    with prefix_cache(PrefixStates(capacity_bytes=64 << 20)):
        threads = [threading.Thread(target=call, args=(index,)) for index in range(len(PROMPTS))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        assert not errors
        assert [answers[index] for index in range(len(PROMPTS))] == cold_answers

        async def together() -> list[str]:
            engine = embedded.AsyncLlamaEngine()
            responses = await asyncio.gather(*(engine.complete(request(*prompt)) for prompt in PROMPTS))
            return [response.text for response in responses]

        assert asyncio.run(together()) == cold_answers


@pytest.mark.embedded
def test_concurrent_loop_runs_share_the_cached_model_without_mixing_states():
    lm = local_lm()

    def run(requirements: str) -> tuple[str, list]:
        with dspy.context(lm=lm):
            result = CreatorCriticIterator(max_iterations=1)(requirements=requirements)
        return result.stop_reason, [(step.role, step.outputs) for step in result.trace]

    requirements = ["A slogan for a bicycle shop.", "A one-line birthday wish for a colleague."]
    with prefix_cache(None):
        alone = [run(each) for each in requirements]
    with prefix_cache(PrefixStates(capacity_bytes=64 << 20)) as llama, ThreadPoolExecutor(len(requirements)) as pool:
        together = list(pool.map(run, requirements))
        assert len(llama.cache) >= 2  # both runs' roles kept states in the one cache
    assert together == alone


@pytest.mark.embedded
@pytest.mark.parametrize(("setting", "kept"), [("", f"PrefixStates {DEFAULT_CACHE_MB << 20}"), ("0", "None")])
def test_every_engine_of_the_local_lm_uses_the_shared_model_and_its_cache(setting, kept):
    # In a process of its own: the shared model reads LOOPS_LLAMA_CACHE_MB once, when it loads.
    program = "\n".join([
        "import asyncio",
        "from loops.lm import embedded, local_lm",
        "lm = local_lm(max_tokens=2)",
        "lm(messages=[{'role': 'user', 'content': 'Say hi.'}])",  # DSPy's sync path: LlamaEngine
        "asyncio.run(lm.acall(messages=[{'role': 'user', 'content': 'Say bye.'}]))",  # its async path
        "cache = embedded._shared_model().cache",
        "print('None' if cache is None else f'{type(cache).__name__} {cache.capacity_bytes}', len(cache or ()))",
    ])
    environment = {**os.environ, "LOOPS_LLAMA_CACHE_MB": setting}
    finished = subprocess.run([sys.executable, "-c", program], env=environment, capture_output=True, text=True,
                              timeout=600, check=False)
    assert finished.returncode == 0, finished.stderr[-2000:]
    shown, states = finished.stdout.split()[:-1], int(finished.stdout.split()[-1])
    assert " ".join(shown) == kept
    assert states == (0 if setting == "0" else 2)  # a state of each call's prompt

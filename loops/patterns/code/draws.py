"""The code loop's candidate strategy: how each candidate of an iteration is drawn (`Draw`: another prompt through
worked examples, other decoding through penalties, or a seeded sample), in which order (`GREEDY_DRAWS`, `draws`), and
the worked examples themselves. The writing roles draw their candidates with the same `Draw`
(`loops.patterns.prose.prose_draws`: its `examples` then index `loops.patterns.prose.WORKED_DRAFTS`).

A greedy answer is deterministic, so the only way to another answer is another prompt or other
decoding; a small model's greedy answers to different prompts pass largely different tasks
(benchmarks/README.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from loops.errors import ConfigurationError

__all__ = ["ALL_EXAMPLES", "FRESH_TEMPERATURE", "GREEDY_DRAWS", "PENALIZED_MAX_TOKENS", "WORKED_EXAMPLES", "Draw",
           "checked_draws", "draws", "worked_examples"]

FRESH_TEMPERATURE = 0.7

# Small tasks written for the library (from no benchmark), each as the executor's request and the code
# that passes its tests. A small model follows an example's shape better than an instruction (one short
# function, named as the tests call it, no prints), so some candidates of an iteration are drawn with
# them as demos: see `ExecuteValidateController`'s `examples`.
WORKED_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Write a function to find the sum of the squares of the even numbers in a list. Your code should pass "
     "these tests:\n\nassert sum_even_squares([1, 2, 3, 4]) == 20\nassert sum_even_squares([5, 7]) == 0\n\n"
     "The tests call `sum_even_squares(list)`: define exactly these names in solution.py, with these arguments.",
     "def sum_even_squares(numbers):\n    return sum(n * n for n in numbers if n % 2 == 0)\n"),
    ("Write a python function to count the vowels in a string. Your code should pass these tests:\n\n"
     "assert count_vowels(\"hello\") == 2\nassert count_vowels(\"sky\") == 0\n\n"
     "The tests call `count_vowels(str)`: define exactly these names in solution.py, with these arguments.",
     "def count_vowels(text):\n    count = 0\n    for char in text.lower():\n        if char in \"aeiou\":\n"
     "            count += 1\n    return count\n"),
    ("Write a function to check whether all the tuples in a list have the same length. Your code should pass "
     "these tests:\n\nassert same_length([(1, 2), (3, 4)]) == True\nassert same_length([(1,), (2, 3)]) == False\n\n"
     "The tests call `same_length(list)`: define exactly these names in solution.py, with these arguments.",
     "def same_length(tuples):\n    return len(set(len(t) for t in tuples)) <= 1\n"),
)


ALL_EXAMPLES = tuple(range(len(WORKED_EXAMPLES)))
# A greedy candidate without the engine's repeat penalty passes in a short answer (under 400
# characters on MBPP's train split) or loops until the cap: a lower cap saves time and loses nothing.
PENALIZED_MAX_TOKENS = 256


@dataclass(frozen=True)
class Draw:
    """How one candidate of an iteration is drawn. Plain data: a program saves its draws (`loops.running.saving`)."""

    # The worked examples shown as demos, by index (the code executor's WORKED_EXAMPLES; a writing role's
    # loops.patterns.prose.WORKED_DRAFTS): each choice another prompt.
    examples: tuple[int, ...] = ()
    sampled: bool = False  # a distinct rollout at FRESH_TEMPERATURE, seeded by its number
    # Set (0.0 included), the request's own penalty replaces the embedded engine's repeat penalty: other decoding.
    frequency_penalty: float | None = None
    # A sampled draw's own seed instead of its candidate number: the same sample wherever it stands in the
    # order (what the draws optimizer tried on train is what the loop draws).
    seed: int | None = None

    def __post_init__(self) -> None:
        examples = tuple(self.examples)  # a saved program gives a list
        if not all(isinstance(index, int) and 0 <= index < len(WORKED_EXAMPLES) for index in examples):
            raise ConfigurationError(f"Draw examples {self.examples!r}: give indices of WORKED_EXAMPLES, 0 to "
                                     f"{len(WORKED_EXAMPLES) - 1}")
        if self.seed is not None and not self.sampled:
            raise ConfigurationError(f"Draw seed={self.seed!r} is a sample's: a greedy draw has none "
                                     "(add sampled=True)")
        object.__setattr__(self, "examples", examples)

    def decoding(self, rollout: int, *, fresh: bool = False, own_demos: bool = False) -> dict[str, Any]:
        """The call's config for this draw as candidate number `rollout` of a run: a penalty of its own, and for
        a sample its temperature and seed. `fresh` samples whatever the draw; so does a draw shown examples
        by a role with `own_demos` (an optimized one), which is shown those instead, which makes its prompt
        the plain one again, so the same request would get the same answer: only a sample can differ.
        Any writing role's candidates are drawn by it (`loops.patterns.prose`), the code executor's too."""
        config: dict[str, Any] = {}
        if self.frequency_penalty is not None:
            config.update(frequency_penalty=self.frequency_penalty, max_tokens=PENALIZED_MAX_TOKENS)
        if fresh or self.sampled or (self.examples and own_demos):
            # Seeded by its number (or its own seed), so a run repeats: the same task, the same candidates.
            seed = self.seed if self.seed is not None and self.sampled and not fresh else rollout
            config.update(temperature=FRESH_TEMPERATURE, rollout_id=seed, seed=seed)
        return config

    def executor_call(self, rollout: int, *, fresh: bool = False, own_demos: bool = False
                      ) -> tuple[dict[str, Any], tuple[dspy.Example, ...] | None]:
        """The code executor call's config (`decoding`) and demos (the worked examples it shows, unless the
        executor has `own_demos`) for this draw as candidate number `rollout` of a run."""
        demos = worked_examples(self.examples) if self.examples and not own_demos else None
        return self.decoding(rollout, fresh=fresh, own_demos=own_demos), demos


# The greedy candidates, in the order they are tried: each is another prompt (no, all or one of the
# worked examples) or other decoding (no repeat penalty, a light frequency penalty). On MBPP's train
# split each of the first five passes tasks those before it do not; the last two passed none new there
# and come last (benchmarks/README.md).
GREEDY_DRAWS = (
    Draw(),
    Draw(examples=ALL_EXAMPLES),
    Draw(frequency_penalty=0.0),
    Draw(examples=(2,)),
    Draw(frequency_penalty=0.2),
    Draw(examples=(0,)),
    Draw(examples=(1,)),
)


def draws(samples: int, examples: bool = False, penalty_variants: bool = False) -> tuple[Draw, ...]:
    """The `samples` candidates of an iteration, in the order they are tried: first the greedy
    answers (`GREEDY_DRAWS`; those shown worked examples only with `examples`, those with a penalty of
    their own only with `penalty_variants`), which a small model gets right more often than samples,
    then samples, every second one shown the examples."""
    greedy = [draw for draw in GREEDY_DRAWS
              if (examples or not draw.examples) and (penalty_variants or draw.frequency_penalty is None)]
    sampled = [Draw(sampled=True, examples=ALL_EXAMPLES if examples and number % 2 == 1 else ())
               for number in range(samples)]
    return tuple((greedy + sampled)[:samples])


def checked_draws(draws: Sequence[Draw] | None, **replaced: Any) -> tuple[Draw, ...] | None:
    """`draws` as a tuple, once it is a non-empty sequence of `Draw`s given without the options it replaces (a
    loop's `draws=` gives the candidates themselves: `samples=` and the options choosing them would too)."""
    if draws is None:
        return None
    if isinstance(draws, Draw) or not isinstance(draws, Sequence) or not draws \
            or not all(isinstance(draw, Draw) for draw in draws):
        raise ConfigurationError(f"draws must be a non-empty list of loops.patterns.code.Draw, got {draws!r:.200}")
    given = [name for name, value in replaced.items() if value is not None]
    if given:
        raise ConfigurationError(f"draws= gives the candidates themselves; {', '.join(given)} would choose them "
                                 "too: drop one of them")
    return tuple(draws)


@functools.cache
def worked_examples(indices: tuple[int, ...]) -> tuple[dspy.Example, ...]:
    """The `WORKED_EXAMPLES` at `indices` as demos of the built-in executor (`Run.call` copies them into each call)."""
    return tuple(dspy.Example(task=task, target_file="solution.py", file_context="", code=code, notes="")
                 .with_inputs("task", "target_file", "file_context")
                 for task, code in (WORKED_EXAMPLES[index] for index in indices))

"""How the code loop runs on a kind of model when the caller does not say: the one rule that
`ExecuteValidateController` and `loops fix` follow (`code_loop_defaults`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from loops.choices import POLICIES, Policy
from loops.lm import is_embedded
from loops.vocabulary.profile import profile_of

__all__ = ["EMBEDDED_CODE_LOOP", "HOSTED_CODE_LOOP", "POLICIES", "SMALL_CODE_LOOP", "CodeLoopDefaults", "Policy",
           "code_loop_defaults"]


@dataclass(frozen=True)
class CodeLoopDefaults:
    """How the Execute–Validate–Controller loop (and `loops fix`) runs on a kind of model when the
    caller does not say: `policy`, whether the built-in controller asks the analyst LLM, candidates per
    iteration (`samples`), whether some are shown worked examples (`examples`), whether some greedy
    candidates are decoded with other penalties than the model's own repeat penalty
    (`penalty_variants`: the embedded engine's alone) and, for `loops fix`, `max_iterations`."""

    policy: Policy
    analyst: bool
    samples: int
    max_iterations: int
    examples: bool = False
    penalty_variants: bool = False


# The embedded 135M model misreads every failing test run (the tests' digest serves it better), and
# repairs by repeating itself; what it gains comes from different candidates checked by the tests. Its
# greedy answers to different prompts (with no, all or one worked example) and with other decoding (no
# repeat penalty, a light frequency penalty) pass largely different tasks: the five chosen passed 15 of
# MBPP's 120 train tasks together, the plain greedy answer 4 alone, a sample at 0.7 2 % of the time.
# Within ~2 minutes per task on 2 cores (benchmarks/README.md).
EMBEDDED_CODE_LOOP = CodeLoopDefaults(policy="auto", analyst=False, samples=5, max_iterations=2, examples=True,
                                      penalty_variants=True)
# Another small model (behind a server, or declared small): the same, but for the penalty variants, which change
# the embedded engine's own repeat penalty (a server's "no penalty" variant is its plain greedy answer again).
SMALL_CODE_LOOP = dataclasses.replace(EMBEDDED_CODE_LOOP, samples=4, penalty_variants=False)
HOSTED_CODE_LOOP = CodeLoopDefaults(policy="repair", analyst=True, samples=1, max_iterations=4)


def code_loop_defaults(lm: object) -> CodeLoopDefaults:
    """The code loop's defaults for the model that will run it: the embedded model's, another small model's (its
    profile says it is small, `loops.vocabulary.profile`), or a capable (hosted) model's."""
    if not profile_of(lm).small:
        return HOSTED_CODE_LOOP
    return EMBEDDED_CODE_LOOP if is_embedded(lm) else SMALL_CODE_LOOP

"""The names a user chooses among, declared once in a module that imports nothing: the `loops` command
builds its options (and its `--help`) from them without loading DSPy, and the modules that implement the
choices key their tables by them (`loops.patterns.code.defaults` the policies, `loops.vocabulary.adapters` the adapters,
`loops.vocabulary.profile` the profiles)."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["ADAPTER_NAMES", "JUDGES", "POLICIES", "PROFILE_NAMES", "Policy"]

Policy = Literal["repair", "fresh", "auto"]
POLICIES: tuple[str, ...] = get_args(Policy)
ADAPTER_NAMES = ("chat", "json", "compact")
# What a model is declared to be (`loops.vocabulary.profile.with_size`): every default that depends on the model
# follows.
PROFILE_NAMES = ("small", "capable")
# Who approves once a user's checks hold (refine's `critic=`, direct's `evaluator=`): the checks alone, or the LLM.
JUDGES = ("checks", "llm")

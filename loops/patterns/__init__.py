"""The patterns, each a `_loop` that reads like its spec (`creator_critic`, `director`, `execute_validate`, `refine`),
and the strategies they run on each kind of model (`prose`, `code`).
"""

__all__: list[str] = []

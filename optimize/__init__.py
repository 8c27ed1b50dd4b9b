"""`loops.optimize`: what DSPy's optimizers need to tune a loop — metrics per pattern (with the text
feedback GEPA asks for), written on the shared result shape of every loop module and DSL program."""

from loops.optimize.metrics import (
    creator_critic_metric,
    director_metric,
    execute_validate_metric,
    fewer_calls,
    result_metric,
)

__all__ = ["creator_critic_metric", "director_metric", "execute_validate_metric", "fewer_calls", "result_metric"]

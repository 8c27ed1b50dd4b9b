"""`loops.optimize`: DSPy's optimizers on loop programs — metrics per pattern (with the text feedback
GEPA asks for), datasets, and one entry point, `run`, that scores, optimizes, scores again and saves
the program with a report. What each optimizer sees of a loop is decided in `loops.vocabulary.demos`; what a person
answered in a role's place becomes labeled examples of it with `human_labels`."""

from loops.optimize.labels import human_labels
from loops.optimize.metrics import (
    checks_metric,
    creator_critic_metric,
    director_metric,
    execute_validate_metric,
    fewer_calls,
    honest,
    result_metric,
)
from loops.optimize.optimizers import OPTIMIZERS
from loops.optimize.runner import KEEP, Report, Score, Stage, default_metric, evaluate, run, save
from loops.running.saving import load

__all__ = ["KEEP", "OPTIMIZERS", "Report", "Score", "Stage", "checks_metric", "creator_critic_metric", "default_metric",
           "director_metric", "evaluate", "execute_validate_metric", "fewer_calls", "honest", "human_labels", "load",
           "result_metric", "run", "save"]

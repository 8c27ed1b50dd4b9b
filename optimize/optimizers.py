"""The optimizers `loops.optimize.run` knows, by name, with settings sized for loops: DSPy's five, and
this library's `draws` (the code loop's candidates chosen on train data, `loops.optimize.draws`).

Every metric call of an optimizer runs a whole loop (several LM calls), so the defaults are small:
a few demos, a few candidates, a few trials. Any option is passed through to the optimizer's
constructor or its `compile` (see `build`). What each optimizer sees of a loop is in `loops.vocabulary.demos`
and docs/optimize.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from loops.errors import ConfigurationError, MissingDependencyError

__all__ = ["OPTIMIZERS", "Optimizer", "build", "check", "check_program"]

_EXTRA_HINT = "pip install 'loops[optimize]'"


@dataclass(frozen=True)
class Optimizer:
    """One optimizer: its class, the modules it needs, its defaults (constructor and compile), and
    whether it calls the metric GEPA's way (five arguments, text feedback)."""

    name: str
    teleprompter: str  # the class's name in dspy.teleprompt, or `module:Class` for one of ours
    needs: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    compile_settings: dict[str, Any] = field(default_factory=dict)
    uses_valset: bool = True
    feedback_metric: bool = False
    summary: str = ""


OPTIMIZERS: dict[str, Optimizer] = {optimizer.name: optimizer for optimizer in (
    Optimizer("bootstrap", "BootstrapFewShot",
              settings={"max_bootstrapped_demos": 4, "max_labeled_demos": 0, "max_rounds": 1},
              uses_valset=False,
              summary="runs the loop on training examples and keeps, per role, the call of each successful run "
                      "as a demo"),
    Optimizer("random-search", "BootstrapFewShotWithRandomSearch",
              settings={"max_bootstrapped_demos": 4, "max_labeled_demos": 0, "num_candidate_programs": 4,
                        "num_threads": 1},
              summary="bootstraps several demo sets and keeps the one that scores best on the validation set"),
    Optimizer("mipro", "MIPROv2", needs=("optuna",),
              settings={"auto": None, "num_candidates": 3, "max_bootstrapped_demos": 2, "max_labeled_demos": 0,
                        "num_threads": 1, "verbose": False},
              compile_settings={"num_trials": 4, "minibatch": False},
              summary="proposes instructions per role with the LM and searches instructions x demo sets "
                      "(Bayesian optimization, optuna)"),
    Optimizer("gepa", "GEPA", needs=("gepa",),
              settings={"max_metric_calls": 40, "num_threads": 1, "track_stats": False},
              feedback_metric=True,
              summary="reflects on each role's call with the metric's text feedback and rewrites its "
                      "instructions"),
    Optimizer("simba", "SIMBA",
              settings={"bsize": 8, "num_candidates": 4, "max_steps": 2, "num_threads": 1},
              uses_valset=False,
              summary="samples mini-batches, compares good and bad runs, and adds rules or demos to the roles"),
    Optimizer("draws", "loops.optimize.draws:DrawsOptimizer", settings={"max_draws": 5}, uses_valset=False,
              summary="the code loop only: tries each kind of candidate (prompt variants, penalties, seeded samples) "
                      "once per train example and keeps, in order, those that pass the most examples not yet "
                      "passed"),
)}

# A proposer that small does not finish: MIPROv2 asked the embedded model for instructions for 17 minutes.
_MIPRO_ON_SMALL_MODEL = (
    "the mipro optimizer asks the LM to propose each role's instructions, which the embedded 135M model does not "
    "finish (it ran 17 minutes without one proposal): use bootstrap, random-search or simba (or draws for fix), "
    "or give mipro a capable model to propose with: prompt_model=dspy.LM(...) (a model string on the command "
    "line: --option prompt_model=openai/gpt-4o-mini)")


def check(name: str, metric: Callable[..., Any]) -> Optimizer:
    """The optimizer called `name`, once its dependencies and the metric's form are known to suit it:
    a developer's mistake raises here, before any LM call."""
    optimizer = OPTIMIZERS.get(name)
    if optimizer is None:
        raise ConfigurationError(f"unknown optimizer {name!r}: use one of {', '.join(OPTIMIZERS)}")
    missing = [module for module in optimizer.needs if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingDependencyError(f"the {name} optimizer needs {', '.join(missing)}, which is not installed. "
                                     f"Fix: {_EXTRA_HINT}")
    if not callable(metric):
        raise ConfigurationError(f"metric must be callable, got {metric!r:.100}")
    try:
        inspect.signature(metric).bind(None, None, None, *((None, None) if optimizer.feedback_metric else ()))
    except TypeError:
        form = "(example, prediction, trace, pred_name, pred_trace)" if optimizer.feedback_metric \
            else "(example, prediction, trace=None)"
        raise ConfigurationError(f"the {name} optimizer calls its metric as metric{form}; "
                                 f"{getattr(metric, '__name__', metric)!r} does not take those arguments "
                                 "(the metrics of loops.optimize do)") from None
    except ValueError:  # a builtin without a signature: trust it
        pass
    return optimizer


def build(name: str, metric: Callable[..., Any], trainset: Sequence[dspy.Example], options: dict[str, Any],
          ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The teleprompter, the keyword arguments of its `compile` (besides student, trainset, valset), and
    the settings it was built with. `options` overrides the defaults; an option is a constructor
    argument if the constructor takes it, else a `compile` argument."""
    optimizer = check(name, metric)
    cls = _teleprompter_class(optimizer.teleprompter)
    accepted = inspect.signature(cls.__init__).parameters
    compile_accepted = inspect.signature(cls.compile).parameters
    settings = {**optimizer.settings}
    compile_settings = {**optimizer.compile_settings}
    for option, value in options.items():
        if option in accepted:
            settings[option] = value
        elif option in compile_accepted:
            compile_settings[option] = value
        else:
            raise ConfigurationError(f"the {name} optimizer ({optimizer.teleprompter}) takes no option {option!r}")
    if name == "simba":
        settings["bsize"] = min(settings["bsize"], len(trainset))
    if name == "gepa" and settings.get("reflection_lm") is None and "instruction_proposer" not in settings:
        if dspy.settings.lm is None:
            raise ConfigurationError("the gepa optimizer needs a reflection LM: pass reflection_lm=... or configure "
                                     "one with dspy.configure(lm=...)")
        settings["reflection_lm"] = dspy.settings.lm
    if name == "gepa" and sum(settings.get(key) is not None for key in ("auto", "max_metric_calls",
                                                                          "max_full_evals")) > 1:
        settings.pop("max_metric_calls", None)
    if name == "mipro":
        settings["prompt_model"] = _proposer(settings.get("prompt_model"))
    if name == "mipro" and settings.get("auto") is not None:
        compile_settings.pop("num_trials", None)
        settings.pop("num_candidates", None)
    teleprompter = cls(metric=metric, **settings)
    shown = {key: (getattr(value, "model", None) or type(value).__name__)
             if key.endswith(("_lm", "_model")) and value is not None else value for key, value in settings.items()}
    return teleprompter, compile_settings, {"optimizer": name, "class": optimizer.teleprompter, **shown,
                                            **compile_settings}


def check_program(name: str, program: Any) -> None:
    """A program the optimizer called `name` cannot optimize raises here, before any LM call."""
    if name == "draws":
        from loops.optimize.draws import check_student

        check_student(program)


def _teleprompter_class(path: str) -> type:
    if ":" not in path:
        return getattr(dspy.teleprompt, path)
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _proposer(prompt_model: Any) -> Any:
    """The LM MIPROv2 proposes instructions with (a model string is resolved); the embedded model is refused."""
    from loops.lm import is_embedded, resolve

    if isinstance(prompt_model, str):
        prompt_model = resolve(prompt_model)
    if is_embedded(prompt_model if prompt_model is not None else dspy.settings.lm):
        raise ConfigurationError(_MIPRO_ON_SMALL_MODEL)
    return prompt_model

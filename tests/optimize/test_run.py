"""`loops.optimize.run`: every optimizer on every program kind, with scripted LMs (tests/optimize/universal.py)."""

import json
import logging
import shlex
import subprocess
import sys
from pathlib import Path

import dspy
import pytest

import loops
import loops.optimize
from loops import (
    Budget,
    ConfigurationError,
    CreatorCriticIterator,
    DirectorExecutorEvaluatorController,
    ExecuteValidateController,
    MissingDependencyError,
    RetryPolicy,
)
from loops.optimize import OPTIMIZERS, creator_critic_metric, execute_validate_metric
from loops.sexp import compile as compile_program
from tests.optimize.universal import INSTRUCTION, learnable_lm, universal_lm

REPO = Path(__file__).resolve().parents[2]
NO_WAIT = RetryPolicy(backoff_s=0)
TEST_COMMAND = shlex.join([sys.executable, "-c", "from solution import f; assert f() == 1"])

PROGRAMS = {
    "creator-critic": (lambda: CreatorCriticIterator(max_iterations=2, retry=NO_WAIT),
                       lambda n: dspy.Example(requirements=f"a note {n}").with_inputs("requirements")),
    "execute-validate": (lambda: ExecuteValidateController(max_iterations=1, samples=1, analyst=False, retry=NO_WAIT),
                         lambda n: dspy.Example(initial_input=f"write f {n}", test_command=TEST_COMMAND).with_inputs(
                             "initial_input", "test_command")),
    "director": (lambda: DirectorExecutorEvaluatorController(max_iterations=2, retry=NO_WAIT),
                 lambda n: dspy.Example(initial_input=f"goal {n}").with_inputs("initial_input")),
    "dsl": (lambda: compile_program(REPO / "examples" / "creator_critic.sexp", retry=NO_WAIT),
            # The critic rule wants the product's last word: the universal LM's "a draft" has it, so the loop succeeds.
            lambda n: dspy.Example(product=f"item {n} draft", **{"max-words": 12}).with_inputs("product", "max-words")),
}


def sets(kind, train=4, val=2):
    make_example = PROGRAMS[kind][1]
    return [make_example(n) for n in range(train)], [make_example(100 + n) for n in range(val)]


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("kind", list(PROGRAMS))
def test_every_optimizer_compiles_every_program_kind_and_the_result_runs(kind, optimizer, tmp_path):
    trainset, valset = sets(kind)
    if optimizer == "draws" and kind != "execute-validate":  # the code loop's own optimizer
        with pytest.raises(ConfigurationError, match="draws optimizer chooses the code loop's candidates"):
            loops.optimize.run(PROGRAMS[kind][0](), trainset, valset, optimizer=optimizer, progress=False)
        return
    out = tmp_path / "optimized.json"

    with dspy.context(lm=universal_lm()):
        optimized, report = loops.optimize.run(PROGRAMS[kind][0](), trainset, valset, optimizer=optimizer, out=out,
                                               progress=False)
        again = optimized(**valset[0].inputs())

    assert again.success
    assert (report.before.examples, report.after.examples) == (2, 2)
    assert report.stages["optimize"].loop_runs > 0 and report.lm_calls > 0
    assert report.optimizer["optimizer"] == optimizer
    assert set(report.changes) == {name for name, _ in optimized.named_predictors()}
    saved = json.loads(out.read_text())
    assert saved["loops"]["report"]["after"]["score"] == report.after.score
    assert type(loops.load(out)) is type(optimized)


def learn_sets():
    # Easy tasks succeed as they are; hard ones only once a role was taught (a demo or the new instruction).
    trainset = [dspy.Example(requirements=f"easy note {n}").with_inputs("requirements") for n in range(3)]
    valset = [dspy.Example(requirements=f"hard note {n}").with_inputs("requirements") for n in range(2)]
    return trainset, valset


@pytest.mark.slow
@pytest.mark.parametrize(("optimizer", "options"), [
    ("bootstrap", {}),
    ("random-search", {"num_candidate_programs": 2}),
    ("mipro", {}),
    ("gepa", {"max_metric_calls": 30}),
])
def test_an_optimizer_that_can_teach_the_roles_lifts_the_score(optimizer, options):
    trainset, valset = learn_sets()
    if optimizer == "gepa":
        trainset = valset  # GEPA learns from failures: it reflects on the hard tasks themselves

    with dspy.context(lm=learnable_lm()):
        optimized, report = loops.optimize.run(CreatorCriticIterator(max_iterations=1, retry=NO_WAIT), trainset,
                                               valset, optimizer=optimizer, progress=False, **options)

    assert (report.before.solved, report.after.solved) == (0, 2)
    taught = [name for name, change in report.changes.items() if change["demos"] or change["instructions rewritten"]]
    assert taught


def test_gepa_reflects_with_the_metrics_text_feedback():
    trainset, valset = learn_sets()
    feedback = []

    def metric(example, prediction, trace=None, pred_name=None, pred_trace=None):
        answer = creator_critic_metric(example, prediction, trace, pred_name, pred_trace)
        if pred_name is not None:
            feedback.append((pred_name, len(pred_trace), answer.feedback))
        return answer

    reflection = learnable_lm()
    with dspy.context(lm=learnable_lm()):
        loops.optimize.run(CreatorCriticIterator(max_iterations=1, retry=NO_WAIT), valset, valset, metric,
                           optimizer="gepa", progress=False, max_metric_calls=12, reflection_lm=reflection)

    assert feedback
    # One call per role per run (loops.vocabulary.demos): the call the run's outcome is about.
    assert {calls for _, calls, _ in feedback} == {1}
    assert all("criteria failed" in text and "stop reason" in text for _, _, text in feedback)
    asked = "\n".join(str(request.messages) for request in reflection.engine.requests)
    assert "criteria failed" in asked  # the feedback reached the reflection LM's prompt


def test_the_optimized_program_loads_in_a_fresh_process_with_its_configuration_and_runs(tmp_path):
    trainset, valset = learn_sets()
    out = tmp_path / "refine.optimized.json"
    budget = Budget(max_iterations=1, timeout_s=77)
    with dspy.context(lm=learnable_lm()):
        loops.optimize.run(CreatorCriticIterator(budget=budget, retry=NO_WAIT), trainset, valset, optimizer="bootstrap",
                           out=out, progress=False)

    script = f"""
import dspy, loops
from tests.optimize.universal import learnable_lm
program = loops.load({str(out)!r})
with dspy.context(lm=learnable_lm()):
    result = program(requirements="hard note 7")
print(program.budget.timeout_s, program.budget.max_iterations, len(program.critic.demos), result.success)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["77", "1", "3", "True"]


def test_a_role_on_the_embedded_model_round_trips_without_unsafe_lm_state(tmp_path):
    from loops.lm import is_embedded, local_lm

    program = CreatorCriticIterator(max_iterations=4)
    program.critic.set_lm(local_lm())  # built lazily: nothing is loaded
    path = tmp_path / "program.json"
    program.save(path)

    loaded = loops.load(path)
    same_class = CreatorCriticIterator()
    same_class.load(path)  # DSPy's own load, and no allow_unsafe_lm_state

    assert is_embedded(loaded.critic.lm) and is_embedded(same_class.critic.lm)
    assert loaded.budget.max_iterations == same_class.budget.max_iterations == 4
    assert json.loads(path.read_text())["loops"]["lms"] == {"critic": "local"}


def test_a_phase_that_is_a_python_object_must_be_given_again(tmp_path):
    def validator(test_command, iteration):
        return True

    path = tmp_path / "fix.json"
    ExecuteValidateController(validator=validator, samples=2).save(path)

    with pytest.raises(ConfigurationError, match=r"validator=.*pass it again, e.g. loops.load\(path, validator="):
        loops.load(path)
    assert loops.load(path, validator=validator).samples == 2


def test_mistakes_are_reported_before_any_lm_call(monkeypatch):
    trainset, valset = learn_sets()
    lm = universal_lm()
    program = CreatorCriticIterator(retry=NO_WAIT)
    with dspy.context(lm=lm):
        with pytest.raises(ConfigurationError, match="unknown optimizer 'bogus'"):
            loops.optimize.run(program, trainset, valset, optimizer="bogus", progress=False)
        with pytest.raises(ConfigurationError, match="gepa optimizer calls its metric as"):
            loops.optimize.run(program, trainset, valset, lambda example, prediction: 1.0, optimizer="gepa",
                               progress=False)
        with pytest.raises(ConfigurationError, match="valset must be a non-empty list"):
            loops.optimize.run(program, trainset, [], optimizer="bootstrap", progress=False)
        with pytest.raises(ConfigurationError, match="takes no option 'bogus_option'"):
            loops.optimize.run(program, trainset, valset, optimizer="bootstrap", progress=False, bogus_option=1)
        monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None if name == "optuna" else object())
        with pytest.raises(MissingDependencyError, match=r"mipro optimizer needs optuna.*loops\[optimize\]"):
            loops.optimize.run(program, trainset, valset, optimizer="mipro", progress=False)
    with pytest.raises(ConfigurationError, match="no LM is configured"):
        loops.optimize.run(program, trainset, valset, optimizer="bootstrap", progress=False)
    assert lm.engine.requests == []


def test_the_default_metric_follows_the_pattern():
    assert loops.optimize.default_metric(ExecuteValidateController()) is execute_validate_metric
    assert loops.optimize.default_metric(CreatorCriticIterator()) is creator_critic_metric
    assert INSTRUCTION  # the instruction the learnable LM's roles obey


# --- never a regression ---------------------------------------------------------------------------------


def spoiled(engine, request):
    """Creator–Critic roles that do well untaught and badly once taught: a critic shown demos never approves."""
    from tests.optimize.universal import _output_fields, _taught, answer

    outputs = set(_output_fields(request))
    if "approved" in outputs:
        approved = not _taught(request)
        return {"accuracy_passed": approved, "completeness_passed": approved, "quality_passed": approved,
                "feedback": "" if approved else "no", "approved": approved}
    if outputs == {"reasoning", "draft"}:
        return {"reasoning": "plan", "draft": "a draft"}
    return answer(engine, request)


def test_an_optimized_program_that_scores_worse_is_not_kept_and_the_report_and_console_say_so(tmp_path, capsys):
    trainset, valset = learn_sets()
    out = tmp_path / "refine.json"
    baseline = CreatorCriticIterator(max_iterations=1, retry=NO_WAIT)
    with dspy.context(lm=scripted_lm_of(spoiled)):
        kept, report = loops.optimize.run(baseline, trainset, valset, optimizer="bootstrap", out=out)

    assert (report.before.solved, report.after.solved) == (2, 0)  # the optimizer's program is worse
    assert kept is baseline and report.kept == "baseline"
    assert report.changes["critic"]["demos"] > 0  # what the optimizer did, though it was not kept
    assert all(not predictor.demos for _, predictor in kept.named_predictors())
    saved = json.loads(out.read_text())
    assert saved["critic"]["demos"] == [] and saved["loops"]["report"]["kept"] == "baseline"
    verdict = "kept the baseline: the optimized program did not score higher (validation creator_critic_metric " \
              "0.000 optimized, 1.000 baseline)"
    assert report.summary().splitlines()[1] == verdict
    assert verdict in capsys.readouterr().out


def test_keep_optimized_keeps_the_optimizers_program_whatever_it_scored():
    trainset, valset = learn_sets()
    baseline = CreatorCriticIterator(max_iterations=1, retry=NO_WAIT)
    with dspy.context(lm=scripted_lm_of(spoiled)):
        kept, report = loops.optimize.run(baseline, trainset, valset, optimizer="bootstrap", progress=False,
                                          keep="optimized")
        with pytest.raises(ConfigurationError, match="keep must be one of 'better', 'optimized'"):
            loops.optimize.run(baseline, trainset, valset, optimizer="bootstrap", progress=False, keep="worse")

    assert kept is not baseline and report.kept == "optimized" and kept.critic.demos
    assert "kept the optimized program, as asked, though it did not score higher" in report.summary()


def test_a_tie_keeps_the_baseline():
    trainset, valset = sets("creator-critic")
    baseline = PROGRAMS["creator-critic"][0]()
    with dspy.context(lm=universal_lm()):
        kept, report = loops.optimize.run(baseline, trainset, valset, optimizer="bootstrap", progress=False)
    assert report.before.score == report.after.score == 1.0
    assert kept is baseline and report.kept == "baseline"


def scripted_lm_of(script):
    from tests.scripted import scripted_lm

    return scripted_lm(script, name="scripted/spoiled")


# --- the draws optimizer --------------------------------------------------------------------------------


def drawn(engine, request):
    """An executor whose greedy answer follows its prompt and decoding, as a small model's does: shown worked
    examples it returns 2, with a frequency penalty 3, plainly 1."""
    if any(message.role == "assistant" for message in request.messages):
        value = 2
    elif request.config.frequency_penalty:
        value = 3
    else:
        value = 1
    return f"def f():\n    return {value}\n"


def wants(value, n):
    command = shlex.join([sys.executable, "-c", f"from solution import f; assert f() == {value}"])
    return dspy.Example(initial_input=f"write f number {n}", test_command=command, task_id=n).with_inputs(
        "initial_input", "test_command")


def test_the_draws_optimizer_chooses_on_train_saves_the_draws_and_loads_them_back(tmp_path):
    from loops.optimize.draws import CANDIDATE_KINDS
    from loops.patterns.code import Draw

    trainset = [wants(2, 1), wants(2, 2), wants(3, 3), wants(1, 4), wants(5, 5)]
    valset = [wants(2, 11), wants(3, 12), wants(1, 13)]
    baseline = ExecuteValidateController(max_iterations=1, samples=1, analyst=False, retry=NO_WAIT)
    out, trials = tmp_path / "fix.json", tmp_path / "trials.jsonl"
    lm = scripted_lm_of(drawn)
    with dspy.context(lm=lm):
        optimized, report = loops.optimize.run(baseline, trainset, valset, optimizer="draws", out=out,
                                               progress=False, trials=str(trials))

    # Examples pass two train tasks (all of them or one: the earlier kind wins a tie), then the plain answer
    # and the penalized one pass one each (the earlier first); a penalty of 0.0 draws the plain answer again,
    # and the samples repeat answers already counted, so they add nothing. Task 5 no kind passes.
    chosen = [Draw(examples=(0, 1, 2)), Draw(), Draw(frequency_penalty=0.2)]
    assert report.findings["chosen"] == ["greedy+examples", "greedy", "greedy+frequency_penalty=0.2"]
    assert report.findings["passed"]["greedy+examples"] == ["1", "2"]
    assert report.findings["train_passed_by_chosen"] == 4
    assert (report.before.solved, report.after.solved, report.kept) == (1, 3, "optimized")
    assert optimized.draws == tuple(chosen) and optimized.settings()["samples"] == 3
    assert len(lm.engine.requests) == 1 * 3 + len(CANDIDATE_KINDS) * 5 + (1 + 2 + 3)  # before, trials, after

    loaded = loops.load(out)
    assert loaded.draws == tuple(chosen) and loaded.samples is None
    assert json.loads(out.read_text())["loops"]["arguments"]["draws"][0] == {
        "__dataclass__": "loops.patterns.code:Draw",  # by the public name: `from loops.patterns.code import Draw`
        "fields": {"examples": [0, 1, 2], "sampled": False, "frequency_penalty": None, "seed": None}}
    with dspy.context(lm=scripted_lm_of(drawn)):
        assert loaded(**wants(3, 21).inputs()).success

    # The trials were recorded: choosing again runs none of them.
    from loops.optimize.draws import DrawsOptimizer

    again = scripted_lm_of(drawn)
    with dspy.context(lm=again):
        rechosen = DrawsOptimizer(execute_validate_metric, trials=trials).compile(baseline, trainset=trainset)
    assert rechosen.draws == tuple(chosen) and again.engine.requests == []


def test_the_draws_optimizer_refuses_what_it_cannot_optimize_before_any_lm_call():
    trainset, valset = sets("execute-validate")
    lm = universal_lm()
    custom = ExecuteValidateController(executor=lambda current_input, iteration: {"solution.py": "x = 1"})
    with dspy.context(lm=lm):
        with pytest.raises(ConfigurationError, match="has a custom executor, which draws one candidate"):
            loops.optimize.run(custom, trainset, valset, optimizer="draws", progress=False)
        with pytest.raises(ConfigurationError, match="not a CreatorCriticIterator"):
            loops.optimize.run(CreatorCriticIterator(), trainset, valset, optimizer="draws", progress=False)
    assert lm.engine.requests == []


def test_mipro_is_refused_on_the_embedded_model_naming_optimizers_that_fit():
    from loops.lm import local_lm

    trainset, valset = learn_sets()
    refusal = r"does not finish .*use bootstrap, random-search or simba \(or draws for fix\), or give mipro a capable"
    # The LM is built lazily: nothing is loaded, nothing is asked.
    with dspy.context(lm=local_lm()), pytest.raises(ConfigurationError, match=refusal):
        loops.optimize.run(CreatorCriticIterator(), trainset, valset, optimizer="mipro", progress=False)


def test_mipro_on_the_embedded_model_is_accepted_with_a_capable_model_to_propose_with():
    from loops.lm import local_lm
    from loops.optimize.optimizers import build

    proposer = universal_lm()
    with dspy.context(lm=local_lm()):  # nothing is loaded: building the optimizer asks no LM
        teleprompter, _, settings = build("mipro", creator_critic_metric, learn_sets()[0], {"prompt_model": proposer})
    assert teleprompter.prompt_model is proposer and settings["prompt_model"] == proposer.model


def test_without_its_display_a_run_shows_nothing_of_dspys_own(capsys, caplog):
    # progress=False, as in a notebook: no DSPy INFO lines, no tqdm bars, no prints; verbose=True brings them back.
    trainset, valset = sets("creator-critic")
    with caplog.at_level(logging.INFO), dspy.context(lm=universal_lm()):
        loops.optimize.run(PROGRAMS["creator-critic"][0](), trainset, valset, optimizer="bootstrap", progress=False)

    shown = capsys.readouterr()
    assert shown.out == "" and "it/s]" not in shown.err and "%|" not in shown.err, shown
    assert [record.getMessage() for record in caplog.records if record.name.startswith("dspy")
            and record.levelno < logging.WARNING] == []

"""`loops optimize` and `loops eval` (loops/cli/datasets.py), with a scripted LM behind --model."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import loops.lm
from loops.cli import app
from loops.cli.datasets import unnamed_model_note
from tests.optimize.universal import learnable_lm, universal_lm

MBPP_TASKS = [
    {"task_id": 601, "prompt": "Write a function f.", "code": "def f():\n    return 1",
     "test_imports": [], "test_list": ["assert f() == 1"], "split": "train"},
    {"task_id": 511, "prompt": "Write a function f.", "code": "def f():\n    return 1",
     "test_imports": [], "test_list": ["assert f() == 1"], "split": "validation"},
]


@pytest.fixture
def lm(monkeypatch):
    chosen = learnable_lm()
    monkeypatch.setattr(loops.lm, "resolve", lambda model, **options: chosen)
    return chosen


def invoke(*args):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def test_optimize_saves_a_program_that_eval_and_refine_then_run(lm, tmp_path):
    # Easy tasks succeed untaught; hard ones only once a role has demos (tests/optimize/universal.py).
    data = tmp_path / "notes.jsonl"
    records = [{"requirements": f"easy note {n}", "split": "train"} for n in range(4)] + [
        {"requirements": f"hard note {n}", "split": "validation"} for n in range(2)]
    data.write_text("\n".join(json.dumps(record) for record in records) + "\n")
    out = tmp_path / "refine.optimized.json"

    optimized = invoke("optimize", "refine", "--data", data, "--train", 3, "--val", 2, "--out", out,
                       "--max-iterations", 1)

    assert optimized.exit_code == 0, optimized.output
    assert "bootstrap: creator_critic_metric" in optimized.output and f"saved to {out}" in optimized.output
    # Trained under --model: said as the program is saved, the way a command user gives a model, not first when it
    # cannot run; the display said once which program was kept.
    assert ("note: the saved program names no LM for creator.predict, critic, iterator: they ran on --model local"
            in " ".join(optimized.output.split()))
    assert optimized.output.count("kept the ") == 1
    report = json.loads(out.read_text())["loops"]["report"]
    assert report["train_examples"] == 3 and report["val_examples"] == 2
    assert report["program"]["arguments"] == {"max_iterations": 1}

    assert (report["before"]["solved"], report["after"]["solved"]) == (0, 2)
    scored = invoke("eval", "refine", "--data", data, "--program", out)
    assert scored.exit_code == 0, scored.output
    assert "refine: score 1.000; solved 2 of 2" in scored.output

    ran = invoke("refine", "hard note", "--program", out)
    assert ran.exit_code == 0, ran.output  # taught by its demos, the critic approves a hard task
    assert "approved" in ran.output


@pytest.mark.parametrize("verbose", [False, True])
def test_optimize_shows_one_progress_display_and_dspys_logs_only_when_asked(lm, tmp_path, verbose):
    data = tmp_path / "notes.jsonl"
    records = [{"requirements": f"easy note {n}", "split": "train"} for n in range(2)] + [
        {"requirements": "hard note", "split": "validation"}]
    data.write_text("\n".join(json.dumps(record) for record in records) + "\n")

    outcome = invoke("optimize", "refine", "--data", data, "--train", 2, "--out", tmp_path / "out.json",
                     "--max-iterations", 1, *(["--verbose"] if verbose else []))

    assert outcome.exit_code == 0, outcome.output
    assert "it/s]" not in outcome.output and "%|" not in outcome.output  # no tqdm bar between the display's lines
    assert ("Bootstrapped" in outcome.output) is verbose  # DSPy's INFO line, with its off-by-one count


def test_fix_reads_mbpp_data_train_split_to_optimize_validation_split_to_score(monkeypatch, tmp_path):
    monkeypatch.setattr(loops.lm, "resolve", lambda model, **options: universal_lm())
    data = tmp_path / "mbpp.jsonl"
    data.write_text("\n".join(json.dumps(task) for task in MBPP_TASKS) + "\n")
    out = tmp_path / "fix.json"

    outcome = invoke("optimize", "fix", "--data", data, "--out", out, "--max-iterations", 1, "--samples", 1,
                     "--option", "max_bootstrapped_demos=1")

    assert outcome.exit_code == 0, outcome.output
    report = json.loads(out.read_text())["loops"]["report"]
    assert (report["train_examples"], report["val_examples"], report["after"]["solved"]) == (1, 1, 1)
    assert report["optimizer"]["max_bootstrapped_demos"] == 1
    assert report["changes"]["executor"]["demos"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["optimize", "polish", "--data", "builtin:writing"], "unknown program 'polish'"),
    (["optimize", "refine", "--data", "builtin:nothing"], "no built-in set 'nothing'"),
    (["optimize", "refine", "--data", "missing.jsonl"], "--data 'missing.jsonl' is not a file"),
    (["optimize", "refine", "--data", "builtin:writing", "--optimizer", "bogus"], "unknown optimizer 'bogus'"),
    (["optimize", "refine", "--data", "builtin:writing", "--out", "x.txt"], "saved as a .json file"),
    (["optimize", "refine", "--data", "builtin:writing", "--option", "oops"], "--option takes name=value"),
    (["optimize", "direct", "--data", "builtin:goals", "--samples", "2"], "--samples is an option of fix"),
])
def test_mistakes_exit_2_in_one_line_before_any_lm_call(lm, args, message):
    outcome = invoke(*args)

    assert outcome.exit_code == 2, outcome.output
    assert message in outcome.output
    assert lm.engine.requests == []


def test_a_saved_program_of_another_kind_is_refused(lm, tmp_path):
    from loops import ExecuteValidateController

    path = tmp_path / "fix.json"
    ExecuteValidateController().save(path)

    outcome = invoke("eval", "refine", "--data", "builtin:writing", "--program", path)

    assert outcome.exit_code == 2
    assert "is an ExecuteValidateController, not a CreatorCriticIterator: give it to `loops fix`" in outcome.output


def test_a_dsl_program_is_optimized_and_run_from_its_saved_file(monkeypatch, tmp_path):
    monkeypatch.setattr(loops.lm, "resolve", lambda model, **options: universal_lm())
    source = Path(__file__).resolve().parents[2] / "examples" / "creator_critic.sexp"
    data = tmp_path / "slogans.jsonl"
    # The scripted creator drafts "a draft": the example's critic rule approves it for a product named "... draft",
    # and only a program that succeeded (its loop approved) gives demos.
    data.write_text("\n".join(json.dumps({"product": f"model {n} draft", "max-words": 12}) for n in range(4)) + "\n")
    out = tmp_path / "slogans.json"

    optimized = invoke("optimize", source, "--data", data, "--train", 2, "--val", 2, "--out", out)
    assert optimized.exit_code == 0, optimized.output
    saved = json.loads(out.read_text())
    assert saved["loops"]["report"]["program"]["source"] == source.read_text()
    assert saved["loops"]["report"]["changes"]["user:create"]["demos"] == 2

    ran = invoke("run", source, "--program", out, "--set", "product=a bike draft", "--set", "max-words=12")
    assert ran.exit_code == 0, ran.output

    other = tmp_path / "other.sexp"
    other.write_text("(+ 1 2)")
    refused = invoke("run", other, "--program", out)
    assert refused.exit_code == 2 and "was compiled from another text" in refused.output


def test_batch_streams_a_record_per_example_and_a_rerun_skips_them(monkeypatch, tmp_path):
    chosen = universal_lm()
    monkeypatch.setattr(loops.lm, "resolve", lambda model, **options: chosen)
    out = tmp_path / "results.jsonl"

    first = invoke("batch", "refine", "--data", "builtin:writing", "--out", out, "--concurrency", 4,
                   "--max-iterations", 1)
    again = invoke("batch", "refine", "--data", "builtin:writing", "--out", out)

    assert first.exit_code == 0, first.output
    assert "8 ran: 8 succeeded, 0 did not; 0 already in" in first.output
    assert "0 ran: 0 succeeded, 0 did not; 8 already in" in again.output
    found = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(record["id"] for record in found) == [str(n) for n in range(8)]
    assert all(record["score"] == 1.0 for record in found)


def test_optimize_keeps_the_better_program_unless_told_to_keep_the_optimized_one(monkeypatch, tmp_path):
    from tests.optimize.test_run import spoiled
    from tests.scripted import scripted_lm

    monkeypatch.setattr(loops.lm, "resolve", lambda model, **options: scripted_lm(spoiled, name="scripted/spoiled"))
    data = tmp_path / "notes.jsonl"
    records = [{"requirements": f"note {n}", "split": "train" if n < 3 else "validation"} for n in range(5)]
    data.write_text("\n".join(json.dumps(record) for record in records) + "\n")

    kept = {}
    for flag in ([], ["--keep-optimized"]):
        out = tmp_path / f"refine{len(flag)}.json"
        outcome = invoke("optimize", "refine", "--data", data, "--out", out, "--max-iterations", 1, *flag)
        assert outcome.exit_code == 0, outcome.output
        kept[bool(flag)] = (json.loads(out.read_text())["loops"]["report"]["kept"], outcome.output)

    assert kept[False][0] == "baseline" and "kept the baseline: the optimized program did not score higher" \
        in kept[False][1]
    assert kept[True][0] == "optimized" and "kept the optimized program, as asked" in kept[True][1]


def test_a_dsl_program_that_uses_the_shell_is_granted_it_as_loops_run_grants_it(lm, tmp_path):
    program = tmp_path / "shell.sexp"
    program.write_text('(define run (system:execute_shell_command (command "echo hi")))\n'
                       '(list (list \'success (equal? (get-field run "exit_code") 0)))\n')
    data = tmp_path / "cases.jsonl"
    data.write_text('{"word": "a", "split": "validation"}\n')

    refused = invoke("eval", program, "--data", data)
    assert refused.exit_code == 2 and "--allow-shell" in refused.output, refused.output
    granted = invoke("eval", program, "--data", data, "--allow-executable", "echo")
    assert granted.exit_code == 0, granted.output
    assert "solved 1 of 1" in granted.output
    pattern = invoke("eval", "refine", "--data", data, "--allow-shell")
    assert pattern.exit_code == 2 and "is not one" in pattern.output, pattern.output


def test_a_program_optimized_on_the_embedded_model_is_saved_without_a_note_on_its_model():
    # Every command that runs a saved program runs it on --model local unless told: nothing to say.
    assert unnamed_model_note(["critic"], loops.lm.local_lm(), "local", "loops refine ... --program p.json") is None
    assert unnamed_model_note([], universal_lm(), "openai/x", "loops refine ... --program p.json") is None
    assert unnamed_model_note(["critic"], universal_lm(), "openai/x", "loops refine ... --program p.json") == (
        "the saved program names no LM for critic: they ran on --model openai/x, which a saved program does not "
        "record; give the same --model to the command that runs it (loops refine ... --program p.json --model "
        "openai/x)")

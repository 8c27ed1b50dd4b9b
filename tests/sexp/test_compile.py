"""`loops.sexp.compile`: a DSL program is a `dspy.Module` — its atoms are predictors named by their DSL
names, teleprompters optimize it, the optimized program saves and loads in a fresh process, and
concurrent `acall`s overlap their LM waits."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dspy
import pytest

from loops import ConfigurationError
from loops.sexp import DslSyntaxError, SexpProgram
from loops.sexp import compile as compile_program
from tests.scripted import ScriptedEngine, scripted_lm

SLOGAN = """
(defatom user:slogan
  (params (product string))
  (instructions "Write a short slogan for {{product}}.")
  (returns (slogan string)))
(get-field (user:slogan (product product)) "slogan")
"""


def slogan_lm(latency_s: float = 0.0) -> dspy.LM:
    def answer(engine, request):
        product = request.messages[-1].text.split("[[ ## product ## ]]")[-1].split("\n\n")[0].strip()
        return {"slogan": f"{product}: simply better"}
    engine = SlowEngine(answer, latency_s)
    return dspy.LM("scripted/slogan", engine=engine, cache=False, num_retries=0)


class SlowEngine(ScriptedEngine):
    """Answers like `ScriptedEngine`, each answer taking `latency_s` (outside the lock: calls overlap)."""

    def __init__(self, script, latency_s: float):
        super().__init__(script)
        self.latency_s = latency_s

    def complete(self, request):
        time.sleep(self.latency_s)
        return super().complete(request)


def test_the_atoms_are_predictors_named_by_their_dsl_names():
    program = compile_program(SLOGAN)
    assert isinstance(program, SexpProgram) and isinstance(program, dspy.Module)
    [(name, predictor)] = program.named_predictors()
    assert name == "user:slogan"
    assert list(predictor.signature.input_fields) == ["product", "history"]
    assert list(predictor.signature.output_fields) == ["slogan"]
    assert predictor.signature.instructions == "Write a short slogan for `product`."


def test_keyword_inputs_are_variables_and_the_prediction_has_the_result_shape():
    with dspy.context(lm=slogan_lm(), adapter=dspy.ChatAdapter()):
        result = compile_program(SLOGAN)(product="a bottle")
    assert result.result == result.final == "a bottle: simply better"
    assert (result.success, result.stop_reason, result.lm_calls, result.warnings) == (True, "completed", 1, [])
    assert [step.role for step in result.trace] == ["user:slogan", "program"]
    assert list(result.histories) == ["user:slogan"]


def test_forward_and_acall_run_the_same_program():
    program = compile_program(SLOGAN)
    with dspy.context(lm=slogan_lm(), adapter=dspy.ChatAdapter()):
        sync = program(product="tea")
        concurrent = asyncio.run(program.acall(product="tea"))
    assert sync.result == concurrent.result
    assert [step.role for step in sync.trace] == [step.role for step in concurrent.trace]


def test_twenty_concurrent_acalls_overlap_their_lm_waits():
    program = compile_program(SLOGAN)
    lm = slogan_lm(latency_s=0.05)

    async def many():
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            return await asyncio.gather(*(program.acall(product=f"p{number}") for number in range(20)))

    started = time.monotonic()
    results = asyncio.run(many())
    elapsed = time.monotonic() - started
    assert [result.result for result in results] == [f"p{number}: simply better" for number in range(20)]
    assert elapsed < 0.6, f"20 runs of a 50 ms LM took {elapsed:.2f}s: their waits did not overlap"


def test_syntax_errors_are_raised_at_compile_time_with_the_file_position(tmp_path):
    path = tmp_path / "broken.sexp"
    path.write_text("(define x 1)\n(if)\n")
    with pytest.raises(DslSyntaxError) as raised:
        compile_program(path)
    assert str(raised.value).startswith(f"{path}:2:1: malformed if")


def test_a_lone_surrogate_in_an_atoms_text_is_a_syntax_error_at_its_place_that_prints():
    source = '(defatom user:note (params (topic string))\n  (instructions "A note \ud800 on {{topic}}"))'
    with pytest.raises(DslSyntaxError) as raised:
        compile_program(source)
    shown = str(raised.value)
    assert shown.startswith("<string>:2:25: the program is not UTF-8 text: it holds a lone surrogate U+D800"), shown
    assert "A note \ufffd on" in shown and shown.endswith("\n" + " " * 28 + "^")
    shown.encode("utf-8")  # printable: the excerpt shows U+FFFD in its place
    assert raised.value.text.encode("utf-8") and raised.value.offset == 25  # what Python's traceback prints


def test_a_program_file_compiles_from_its_path(tmp_path):
    path = tmp_path / "double.sexp"
    path.write_text("(* 2 n)")
    assert compile_program(str(path))(n=21).result == 42


def test_a_program_with_atoms_and_no_lm_raises_before_any_call():
    with dspy.context(lm=None), pytest.raises(ConfigurationError, match="no LM is configured for the user:slogan"):
        compile_program(SLOGAN)(product="x")


def test_an_atom_name_taken_by_the_module_is_refused():
    with pytest.raises(ConfigurationError, match="'forward' is taken"):
        compile_program('(defatom forward (instructions "x"))')


def test_a_deep_copy_shares_the_analysed_program_and_copies_the_predictors():
    program = compile_program(SLOGAN)
    twin = copy.deepcopy(program)
    assert twin._program is program._program
    assert twin.named_predictors()[0][1] is not program.named_predictors()[0][1]
    twin.named_predictors()[0][1].demos = [dspy.Example(product="x", slogan="y")]
    assert program.named_predictors()[0][1].demos == []
    with dspy.context(lm=slogan_lm(), adapter=dspy.ChatAdapter()):
        assert twin(product="a").result == program(product="a").result


def test_bootstrap_few_shot_compiles_a_dsl_program_and_the_saved_program_loads_in_a_fresh_process(tmp_path):
    trainset = [dspy.Example(product=name, answer=f"{name}: simply better").with_inputs("product")
                for name in ("tea", "coffee", "juice")]

    def metric(example, prediction, trace=None):
        return prediction.result == example.answer

    optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=2, max_labeled_demos=0)
    with dspy.context(lm=slogan_lm(), adapter=dspy.ChatAdapter()):
        optimized = optimizer.compile(compile_program(SLOGAN), trainset=trainset)
    [(_, predictor)] = optimized.named_predictors()
    assert [demo["slogan"] for demo in predictor.demos] == ["tea: simply better", "coffee: simply better"]
    # What an instruction optimizer (COPRO, MIPROv2, GEPA) does to an atom: new instructions, same fields.
    predictor.signature = predictor.signature.with_instructions("Coin a catchy slogan for `product`.")
    saved = tmp_path / "slogan.json"
    optimized.save(str(saved))
    assert json.loads(saved.read_text())["user:slogan"]["demos"]

    script = textwrap.dedent(f"""
        import dspy
        from loops.sexp import compile
        from tests.scripted import scripted_lm
        program = compile({SLOGAN!r})
        program.load({str(saved)!r})
        lm = scripted_lm([{{"slogan": "fresh"}}])
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            result = program(product="soda")
        demos = program.named_predictors()[0][1].demos
        prompt = lm.engine.requests[0].messages
        print(result.result, len(demos), sum("tea" in (message.text or "") for message in prompt))
        print("Coin a catchy slogan" in lm.engine.requests[0].system)
    """)
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["fresh", "2", "2", "True"]  # the demo's input and answer; the new instructions


def test_concurrent_runs_of_one_program_share_no_state():
    program = compile_program("(define total 0) (loop 1000 (set! total (+ total n))) total")
    results: list[int] = []

    def run(number):
        results.append(program(n=number).result)

    threads = [threading.Thread(target=run, args=(number,)) for number in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [1000 * number for number in range(1, 9)]


def test_a_set_of_a_global_name_stays_in_its_run():
    program = compile_program("(define before (car (list 1 2))) (set! car cdr) (list before (car (list 1 2)))")
    assert program().result == (1, (2,))
    assert program().result == (1, (2,))  # the second run starts from the primitives again


class Crash(BaseException):
    """The process dying mid-run: nothing in the library catches it."""


RESUMABLE = """(defatom user:improve (params (text string)) (instructions "Improve {{text}}.")
  (returns (improved string)))
(define first (user:improve (text "v0")))
(iterative-loop
  (max-iterations 4)
  (initial-input (get-field first "improved"))
  (test-command "true")
  (executor (lambda (input n) (get-field (user:improve (text input)) "improved")))
  (validator (lambda (command n) (if (= n 3) 0 1)))
  (controller (lambda (attempt validation input n)
                (if (= validation 0) (list 'stop attempt) (list 'continue attempt)))))"""


def test_a_program_and_its_loop_resume_from_a_checkpoint_without_repeating_an_lm_call(tmp_path):
    answers = [{"improved": f"v{number}"} for number in range(1, 5)]
    with dspy.context(lm=scripted_lm(list(answers)), adapter=dspy.ChatAdapter()):
        uninterrupted = compile_program(RESUMABLE)()
    store = str(tmp_path / "runs.db")

    crashing = scripted_lm([*answers[:2], Crash()])  # dies asking for the loop's second attempt
    with dspy.context(lm=crashing, adapter=dspy.ChatAdapter()), pytest.raises(Crash):
        compile_program(RESUMABLE, checkpoint=store)(run_id="r1")
    resumed_lm = scripted_lm(list(answers[2:]))
    with dspy.context(lm=resumed_lm, adapter=dspy.ChatAdapter()):
        resumed = compile_program(RESUMABLE, checkpoint=store)(run_id="r1")

    assert resumed.result == uninterrupted.result == "v4"
    assert [(step.role, step.iteration) for step in resumed.trace] == [
        (step.role, step.iteration) for step in uninterrupted.trace]
    assert len(resumed_lm.engine.requests) == 2  # the two calls the crashed run never made
    assert (resumed.lm_calls, resumed.replayed, uninterrupted.lm_calls) == (2, 2, 4)


def test_a_changed_program_does_not_replay_another_programs_checkpoint(tmp_path):
    from loops.errors import ReplayDivergence

    store = str(tmp_path / "runs.db")
    with dspy.context(lm=scripted_lm([{"improved": f"v{n}"} for n in range(1, 5)]), adapter=dspy.ChatAdapter()):
        compile_program(RESUMABLE, checkpoint=store)(run_id="r1")
        with pytest.raises(ReplayDivergence):
            compile_program(RESUMABLE.replace("(= n 3)", "(= n 2)"), checkpoint=store)(run_id="r1")


# --- a program's success: its own verdict, else its last loop form's, else running to its end ------------

CRITIC_LOOP = """(creator-critic-loop (max-iterations 2) (requirements "r")
  (creator (lambda (requirements context n) "draft"))
  (critic (lambda (requirements draft n) {verdict}))
  (iterator (lambda (requirements draft feedback n) (string-append draft "+"))))"""


@pytest.mark.parametrize(("source", "outcome"), [
    ("(+ 1 2)", ("completed", True)),
    (CRITIC_LOOP.format(verdict="(list #f \"longer\")"), ("max_iterations", False)),
    (CRITIC_LOOP.format(verdict="(list (list 'approved (> n 1)) (list 'feedback \"longer\"))"), ("approved", True)),
    # The last loop form decides: one that failed before it does not count.
    (CRITIC_LOOP.format(verdict="#f") + "\n" + CRITIC_LOOP.format(verdict="#t"), ("approved", True)),
    (CRITIC_LOOP.format(verdict="#t") + "\n" + CRITIC_LOOP.format(verdict="#f"), ("max_iterations", False)),
    # A program whose value is a record with a boolean `success` gives its own verdict.
    (CRITIC_LOOP.format(verdict="#f") + "\n(list (list 'success #t) (list 'note \"fine\"))", ("completed", True)),
    ("(list (list 'success #f))", ("completed", False)),
    ("(list (list 'success \"yes\"))", ("completed", True)),  # not a boolean: no verdict
    ("""(director-evaluator-loop (max-iterations 3) (initial-director-input "goal")
         (director (lambda (input n) input)) (executor (lambda (plan n) (* n 10)))
         (evaluator (lambda (result plan n) (list (list 'status (if (> result 10) "PASS" "FAIL")))))
         (controller (lambda (feedback plan result n) (list 'continue plan))))""", ("stopped", True)),
])
def test_a_programs_success_is_its_own_verdict_else_its_last_loop_forms(source, outcome):
    result = compile_program(source)()

    assert (result.stop_reason, result.success) == outcome, result.warnings

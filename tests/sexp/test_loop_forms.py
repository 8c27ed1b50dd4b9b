"""The loop forms run their phase lambdas on the library's modules: clauses checked before the loop
starts, 1-based iteration numbers, decisions, limits, and DSL errors that keep their position."""

from __future__ import annotations

import dspy
import pytest

from loops import Budget
from loops.sexp import ArityError, DslError, DslSyntaxError, DslTypeError, DslValueError, Interpreter, UnboundName
from loops.sexp import compile as compile_program
from tests.scripted import scripted_lm


def run(source: str, **bindings):
    interpreter = Interpreter()
    value = interpreter.eval_source(source, bindings=bindings)
    return value, interpreter.warnings


def iterative(max_iterations="3", controller="(lambda (r v input n) (list 'stop r))",
              validator="(lambda (c n) (begin (set! seen (append seen (list (list 'validator c n)))) 0))",
              executor="(lambda (input n) (begin (set! seen (append seen (list (list 'executor input n)))) "
                       "(list 'attempt input n)))", extra=""):
    return f"""(define seen '())
(define value
  (iterative-loop
    (max-iterations {max_iterations})
    (initial-input "task")
    (test-command "pytest -q")
    (executor {executor})
    (validator {validator})
    (controller {controller}){extra}))
(list value seen)"""


def test_iterative_loop_stops_at_once_with_the_controllers_value():
    (value, seen), warnings = run(iterative())
    assert value == ("attempt", "task", 1)
    assert seen == (("executor", "task", 1), ("validator", "pytest -q", 1))
    assert warnings == []


def test_iterative_loop_continues_with_the_next_input_then_stops():
    controller = "(lambda (r v input n) (if (< n 3) (list 'continue (string-append input \"+\")) (list 'stop n)))"
    (value, seen), _ = run(iterative(controller=controller, max_iterations="5"))
    assert value == 3
    assert [entry for entry in seen if entry[0] == "executor"] == [
        ("executor", "task", 1), ("executor", "task+", 2), ("executor", "task++", 3)]


@pytest.mark.parametrize("max_iterations, executor_calls", [(0, 0), (1, 1), (4, 4)])
def test_iterative_loop_at_max_iterations_returns_the_last_executor_result(max_iterations, executor_calls):
    controller = "(lambda (r v input n) (list 'continue input))"
    (value, seen), warnings = run(iterative(controller=controller, max_iterations=str(max_iterations)))
    assert len([entry for entry in seen if entry[0] == "executor"]) == executor_calls
    if max_iterations == 0:
        assert value == () and warnings == []
    else:
        assert value == ("attempt", "task", max_iterations)
        assert warnings == [f"<string>:3:3: iterative-loop: stopped at max_iterations={max_iterations}"]


def test_every_phase_receives_the_contracts_arguments_and_1_based_iterations():
    source = """(define calls '())
(define (note . args) (set! calls (append calls (list args))))
(director-evaluator-loop
  (max-iterations 2)
  (initial-director-input "goal")
  (director (lambda (input n) (note 'director input n) (list 'plan n)))
  (executor (lambda (plan n) (note 'executor plan n) (list 'done n)))
  (evaluator (lambda (result plan n) (note 'evaluator result plan n) "FAIL"))
  (controller (lambda (feedback plan result n) (note 'controller feedback plan result n)
                (list 'continue (list 'next n)))))
calls"""
    calls, warnings = run(source)
    assert calls == (
        ("director", "goal", 1), ("executor", ("plan", 1), 1), ("evaluator", ("done", 1), ("plan", 1), 1),
        ("controller", "FAIL", ("plan", 1), ("done", 1), 1),
        ("director", ("next", 1), 2), ("executor", ("plan", 2), 2), ("evaluator", ("done", 2), ("plan", 2), 2),
        ("controller", "FAIL", ("plan", 2), ("done", 2), 2),
    )
    assert warnings == ["<string>:3:1: director-evaluator-loop: stopped at max_iterations=2"]


def test_loop_config_is_bound_inside_the_director_loops_phases():
    source = """(director-evaluator-loop
  (max-iterations 4)
  (initial-director-input "goal")
  (director (lambda (input n) input))
  (executor (lambda (plan n) (get-field *loop-config* "max-iterations")))
  (evaluator (lambda (result plan n) "PASS"))
  (controller (lambda (feedback plan result n)
                (list 'stop (list result (get-field *loop-config* "initial-director-input"))))))"""
    assert run(source)[0] == (4, "goal")


def test_creator_critic_loop_revises_until_the_critic_approves():
    source = """(creator-critic-loop
  (max-iterations 3)
  (requirements "a slogan")
  (creator (lambda (requirements context n) (string-append "draft for " requirements)))
  (critic (lambda (requirements draft n) (list (> n 1) "shorter, please")))
  (iterator (lambda (requirements draft feedback n) (string-append draft " (" feedback ")"))))"""
    assert run(source) == ("draft for a slogan (shorter, please)", [])


def test_creator_critic_loop_at_max_iterations_returns_the_best_draft_the_earlier_of_equals():
    source = """(creator-critic-loop
  (max-iterations 2) (requirements "r") (context "c")
  (creator (lambda (requirements context n) (string-append context "0")))
  (critic (lambda (requirements draft n) #f))
  (iterator (lambda (requirements draft verdict n) (string-append draft "+"))))"""
    assert run(source) == ("c0", ["<string>:1:1: creator-critic-loop: stopped at max_iterations=2"])


CHECKED = """(creator-critic-loop
  (max-iterations 3)
  (requirements "a slogan")
  (checks (check:max-words 3) (check "include=wheel")
          (lambda (draft) (if (string-contains? draft "!") "shouts" #t)))
  (creator (lambda (requirements context n) "A slogan about bicycles and more"))
  {critic}
  (iterator (lambda (requirements draft feedback n)
              (begin (set! told feedback) (if (= n 2) "Wheel go!" "True wheel")))))"""


def test_a_checks_clause_judges_every_draft_first_and_its_messages_are_the_feedback():
    checked = CHECKED.format(critic="(critic (lambda (r d n) #t))")
    source = f"(define told nil) (define value {checked}) (list value told)"
    (value, told), warnings = run(source)
    assert value == "True wheel"  # the critic approved all three; the checks held only for the third
    assert told == "Fix these problems of the draft:\n- shouts"
    assert warnings == []


def test_without_a_critic_clause_the_checks_alone_approve():
    program = compile_program("(define told nil) " + CHECKED.format(critic=""))
    result = program()
    assert (result.result, result.stop_reason, result.success) == ("True wheel", "approved", True)
    checks = [step.outputs for step in result.trace if step.role == "checks"]
    assert [(outputs["held"], outputs["total"]) for outputs in checks] == [(1, 3), (2, 3), (3, 3)]
    assert checks[0]["failed"][0] == {"rule": "Use at most 3 words.", "message": "has 6 words; use at most 3"}


def test_the_director_loop_takes_a_checks_clause_too():
    source = """(director-evaluator-loop
  (max-iterations 2) (initial-director-input "a tweet")
  (checks (check:ends-with "?"))
  (director (lambda (input n) input))
  (executor (lambda (plan n) (if (= n 1) "A statement." "A question?")))
  (controller (lambda (feedback plan result n) (list 'continue (get-field feedback "feedback")))))"""
    result = compile_program(source)()
    assert (result.result, result.stop_reason, result.success) == ("A question?", "stopped", True)


@pytest.mark.parametrize(("clause", "error", "message"), [
    ("(checks)", DslSyntaxError, "clause 'checks' takes the checks"),
    ("(checks 42)", DslTypeError, "checks: 42 is not a check"),
    ("(checks (lambda (a b) #t))", ArityError, "a check takes one argument"),
    ("(checks (check:max-words \"many\"))", DslValueError, "'many' is not N"),
    ("(checks (check \"max-wordz=3\"))", DslValueError, "did you mean max-words"),
    ("(checks (check:json 1))", ArityError, "'check:json' takes no argument"),
])
def test_a_bad_checks_clause_is_an_error_at_its_position(clause, error, message):
    source = f"""(creator-critic-loop (max-iterations 1) (requirements "r") {clause}
  (creator (lambda (r c n) "d")) (iterator (lambda (r d f n) d)))"""
    with pytest.raises(error, match=message) as raised:
        run(source)
    assert raised.value.node is not None


def test_a_check_lambda_that_returns_no_verdict_is_an_error_at_the_clause():
    source = """(creator-critic-loop (max-iterations 1) (requirements "r") (checks (lambda (draft) 42))
  (creator (lambda (r c n) "d")) (iterator (lambda (r d f n) d)))"""
    with pytest.raises(DslValueError, match="a check returns #t or nil when it holds, #f or a message"):
        run(source)


MALFORMED = [
    ("(iterative-loop (max-iterations 1) (initial-input 1) (test-command \"t\")\n"
     "  (executor car) (validator car) (controller car) (analyst car))",
     DslSyntaxError,
     "<string>:2:51: iterative-loop has no clause (analyst car) (its clauses: max-iterations initial-input "
     "test-command executor validator controller)\n      (executor car) (validator car) (controller car) "
     "(analyst car))\n                                                      ^"),
    ("(iterative-loop (max-iterations 1) (initial-input 1)\n  (executor car) (validator car) (controller car))",
     DslSyntaxError,
     "<string>:1:1: iterative-loop is missing the clause (test-command ...) (it needs: max-iterations "
     "initial-input test-command executor validator controller)\n    (iterative-loop (max-iterations 1) "
     "(initial-input 1)\n    ^"),
    ("(creator-critic-loop (max-iterations 1) (requirements 1) (creator car)\n"
     "  (critic car) (iterator car) (creator cdr))",
     DslSyntaxError,
     "<string>:2:31: creator-critic-loop: clause 'creator' is given twice\n      (critic car) (iterator car) "
     "(creator cdr))\n                                  ^"),
    ("(director-evaluator-loop (max-iterations 1) (initial-director-input 1)\n"
     "  (director (lambda (x) x)) (executor car) (evaluator car) (controller car))",
     ArityError,
     "<string>:2:3: director-evaluator-loop: the director must take 2 argument(s) (current_input iteration), "
     "but lambda takes 1\n      (director (lambda (x) x)) (executor car) (evaluator car) (controller car))\n"
     "      ^"),
    ("(director-evaluator-loop (max-iterations 1) (initial-director-input 1)\n"
     "  (director 42) (executor car) (evaluator car) (controller car))",
     DslTypeError,
     "<string>:2:3: director-evaluator-loop: the director must be a procedure of 2 argument(s) (current_input "
     "iteration), got 42\n      (director 42) (executor car) (evaluator car) (controller car))\n      ^"),
    ("(iterative-loop (max-iterations -1) (initial-input 1) (test-command \"t\")\n"
     "  (executor car) (validator car) (controller car))",
     DslValueError,
     "<string>:1:17: max-iterations must be an integer from 0 to 1000, got -1\n    (iterative-loop (max-iterations -1) "
     "(initial-input 1) (test-command \"t\")\n                    ^"),
]


@pytest.mark.parametrize("source, error, rendered", MALFORMED)
def test_malformed_clauses_are_errors_at_their_position_before_the_loop_starts(source, error, rendered):
    with pytest.raises(error) as raised:
        run(source)
    assert str(raised.value) == rendered


def test_a_malformed_decision_is_a_dsl_error_at_the_controller_clause():
    with pytest.raises(DslValueError) as raised:
        run(iterative(controller="(lambda (r v input n) (list 'finish r))"))
    assert str(raised.value).startswith(
        "<string>:9:5: the controller returned (finish (attempt \"task\" 1)), which is not a decision: "
        "expected (list 'continue next-input) or (list 'stop value)")


def test_a_malformed_verdict_is_a_dsl_error_at_the_critic_clause():
    source = """(creator-critic-loop (max-iterations 2) (requirements "r")
  (creator (lambda (r c n) "draft")) (critic (lambda (r d n) 42)) (iterator (lambda (r d v n) d)))"""
    with pytest.raises(DslValueError, match=r"<string>:2:38: the critic returned 42, which is not a verdict"):
        run(source)


def test_a_dsl_error_inside_a_phase_propagates_with_its_own_position():
    with pytest.raises(UnboundName) as raised:
        run(iterative(validator="(lambda (c n) undefined-name)"))
    assert str(raised.value).startswith("<string>:8:30: unbound name 'undefined-name'")


def test_an_atom_in_a_phase_is_a_role_call_of_the_loops_run_with_its_own_history():
    source = """(defatom user:improve (params (text string)) (instructions "Improve {{text}}.")
  (returns (improved string)))
(iterative-loop
  (max-iterations 3)
  (initial-input "v0")
  (test-command "true")
  (executor (lambda (input n) (get-field (user:improve (text input)) "improved")))
  (validator (lambda (c n) (if (= n 3) 0 1)))
  (controller (lambda (r v input n) (if (= v 0) (list 'stop r) (list 'continue r)))))"""
    lm = scripted_lm([{"improved": "v1"}, {"improved": "v2"}, {"improved": "v3"}])
    program = compile_program(source)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = program()
    assert (result.result, result.stop_reason, result.success, result.lm_calls) == ("v3", "stopped", True, 3)
    assert [step.iteration for step in result.trace if step.role == "user:improve"] == [1, 2, 3]
    history = result.histories["user:improve"]
    assert history.messages == [{"text": "v0", "improved": "v1"}, {"text": "v1", "improved": "v2"},
                                {"text": "v2", "improved": "v3"}]
    # What the third call was shown: the first two calls as earlier turns, keyed by the signature's fields.
    signature = program.named_predictors()[0][1].signature
    rendered = dspy.ChatAdapter().format(signature, demos=[], inputs={
        "text": "v2", "history": dspy.History(messages=history.messages[:2])})
    assert [message["role"] for message in rendered] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert rendered[1]["content"].startswith("[[ ## text ## ]]\nv0")
    assert rendered[2]["content"].startswith("[[ ## improved ## ]]\nv1")
    third = lm.engine.requests[2]
    assert [message.role for message in third.messages] == ["user", "assistant", "user", "assistant", "user"]


def test_an_atom_whose_lm_fails_for_good_returns_a_failed_record_and_a_warning():
    source = """(defatom user:ask (params (q string)) (instructions "Answer {{q}}."))
(define answer (user:ask (q "why")))
(list (get-field answer "status") (null? (get-field answer "content")))"""
    lm = scripted_lm([RuntimeError("model crashed")] * 4)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = compile_program(source)()
    assert result.result == ("FAILED", True)
    assert result.stop_reason == "completed"
    assert any("atom user:ask failed" in warning for warning in result.warnings)


def test_a_spent_lm_budget_inside_a_loop_ends_it_gracefully():
    source = """(defatom user:write (params (n int)) (instructions "Write {{n}}."))
(iterative-loop
  (max-iterations 5)
  (initial-input 1)
  (test-command "true")
  (executor (lambda (input n) (user:write (n n))))
  (validator (lambda (c n) 1))
  (controller (lambda (r v input n) (list 'continue input))))"""
    lm = scripted_lm([{"content": f"answer {number}"} for number in range(5)])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = compile_program(source, budget=Budget(max_lm_calls=2))()
    assert result.lm_calls == 2
    assert result.result["content"] == "answer 1"
    assert any("max_lm_calls" in warning for warning in result.warnings)


def test_loop_forms_are_dsl_errors_never_python_errors_for_any_phase_value():
    for value in ("42", "\"text\"", "'()", "(list 1 2 3)", "#t"):
        with pytest.raises(DslError):
            run(iterative(controller=f"(lambda (r v input n) {value})"))


# Each form with phases that note (role, iteration) and never stop on their own: the loop runs to
# max-iterations. `expected` is the phases called in one iteration (the creator only in the first).
NOTING = {
    "iterative-loop": ("""(iterative-loop (max-iterations {n}) (initial-input "in") (test-command "t")
  (executor (lambda (input n) (note 'executor n) (list 'result n)))
  (validator (lambda (command n) (note 'validator n) 1))
  (controller (lambda (result validation input n) (note 'controller n) (list 'continue input))))""",
                       ["executor", "validator", "controller"], ("result", "{n}")),
    "director-evaluator-loop": ("""(director-evaluator-loop (max-iterations {n}) (initial-director-input "goal")
  (director (lambda (input n) (note 'director n) "plan"))
  (executor (lambda (plan n) (note 'executor n) (list 'result n)))
  (evaluator (lambda (result plan n) (note 'evaluator n) "FAIL"))
  (controller (lambda (feedback plan result n) (note 'controller n) (list 'continue "goal"))))""",
                                ["director", "executor", "evaluator", "controller"], ("result", "{n}")),
    "creator-critic-loop": ("""(creator-critic-loop (max-iterations {n}) (requirements "r")
  (creator (lambda (requirements context n) (note 'creator n) "draft"))
  (critic (lambda (requirements draft n) (note 'critic n) #f))
  (iterator (lambda (requirements draft verdict n) (note 'iterator n) (string-append draft "+"))))""",
                            ["critic", "iterator"], None),
}


def noted_run(source: str):
    return run("(define calls '())\n(define (note role n) (set! calls (append calls (list (list role n)))))\n"
               f"(define value {source})\n(list value calls)")


@pytest.mark.parametrize("max_iterations", [0, 1, 3])
@pytest.mark.parametrize("form", list(NOTING))
def test_every_phase_gets_1_based_iterations_and_the_loop_stops_at_max_iterations(form, max_iterations):
    source, per_iteration, last_result = NOTING[form]
    (value, calls), warnings = noted_run(source.format(n=max_iterations))
    if form == "creator-critic-loop":
        # The creator drafts in iteration 1; each later iteration is a revision; the critic judges each draft.
        expected = [("creator", 1), ("critic", 1)] if max_iterations else []
        for n in range(2, max_iterations + 1):
            expected += [("iterator", n), ("critic", n)]
        last_value = "draft" if max_iterations else ()  # all judged alike: the best is the earliest
    else:
        expected = [(role, n) for n in range(1, max_iterations + 1) for role in per_iteration]
        last_value = (last_result[0], max_iterations) if max_iterations else ()
    assert list(calls) == expected
    assert value == last_value  # the last executor result (refine: the best draft); nil when nothing ran
    assert warnings == ([f"<string>:3:15: {form}: stopped at max_iterations={max_iterations}"]
                        if max_iterations else [])


@pytest.mark.parametrize("form, source", [
    ("director-evaluator-loop", """(director-evaluator-loop (max-iterations 3) (initial-director-input "goal")
  (director (lambda (input n) input)) (executor (lambda (plan n) plan)) (evaluator (lambda (result plan n) "PASS"))
  (controller (lambda (feedback plan result n) (list 'halt result))))"""),
    ("iterative-loop", """(iterative-loop (max-iterations 3) (initial-input "in") (test-command "t")
  (executor (lambda (input n) input)) (validator (lambda (command n) 0))
  (controller (lambda (result validation input n) (list 'stop))))"""),
])
def test_a_malformed_decision_is_an_error_at_the_controller_clause_of_every_form(form, source):
    with pytest.raises(DslValueError) as raised:
        run(source)
    assert str(raised.value).splitlines()[0].startswith("<string>:3:3: the controller returned (")
    assert "which is not a decision: expected (list 'continue next-input) or (list 'stop value)" in str(raised.value)


def test_a_primitive_or_host_callable_phase_of_the_wrong_arity_is_an_error_at_its_clause():
    source = ("(director-evaluator-loop (max-iterations 1) (initial-director-input 1)\n"
              "  (director list) (executor car) (evaluator list) (controller list))")
    with pytest.raises(ArityError) as raised:
        run(source)
    assert str(raised.value) == (
        "<string>:2:19: director-evaluator-loop: the executor must take 2 argument(s) (plan iteration), but "
        "primitive 'car' cannot be called with 2\n"
        "      (director list) (executor car) (evaluator list) (controller list))\n"
        "                      ^")


def test_a_dsl_error_in_a_phase_is_neither_retried_nor_a_graceful_stop():
    source = """(defatom user:write (params (n int)) (instructions "Write {{n}}."))
(iterative-loop (max-iterations 3) (initial-input 1) (test-command "t")
  (executor (lambda (input n) (user:write (n n))))
  (validator (lambda (command n) (tick) (car '())))
  (controller (lambda (result validation input n) (list 'stop result))))"""
    ticks = []
    lm = scripted_lm([{"content": "code"}])
    program = compile_program(source, tools={"tick": lambda: ticks.append(1)})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()), pytest.raises(DslValueError) as raised:
        program()
    assert str(raised.value).startswith("<string>:4:41: 'car' of nil: the list is empty")
    assert (len(ticks), len(lm.engine.requests)) == (1, 1)  # the validator ran once, nothing ran after it


def test_an_atom_that_fails_inside_a_phase_returns_a_failed_record_and_the_loop_goes_on():
    source = """(defatom user:write (params (n int)) (instructions "Write {{n}}."))
(iterative-loop (max-iterations 3) (initial-input 1) (test-command "t")
  (executor (lambda (input n) (user:write (n n))))
  (validator (lambda (command n) 0))
  (controller (lambda (result validation input n)
                (if (equal? (get-field result "status") "FAILED")
                    (list 'continue input)
                    (list 'stop (list n (get-field result "content")))))))"""
    lm = scripted_lm([RuntimeError("model crashed"), {"content": "code"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = compile_program(source)()
    assert result.result == (2, "code")
    assert result.warnings == ["<string>:2:1: iterative-loop: atom user:write failed: user:write failed after 1 "
                               "attempt(s): LMUnexpectedError: [scripted/test] model crashed"]
    assert [(step.role, step.iteration, step.error) for step in result.trace if step.role == "user:write"] == [
        ("user:write", 1, "LMUnexpectedError: [scripted/test] model crashed"), ("user:write", 2, None)]


def test_a_loops_max_iterations_warning_reaches_the_compiled_programs_prediction():
    source = """(iterative-loop (max-iterations 2) (initial-input 1) (test-command "t")
  (executor (lambda (input n) (* input 10))) (validator (lambda (command n) 1))
  (controller (lambda (result validation input n) (list 'continue result))))"""
    result = compile_program(source)()
    # The program ends as its last loop form did: unsuccessful, at that loop's max-iterations.
    assert (result.result, result.stop_reason, result.success) == (100, "max_iterations", False)
    assert result.warnings == ["<string>:1:1: iterative-loop: stopped at max_iterations=2"]
    assert [(step.role, step.iteration) for step in result.trace][:3] == [
        ("executor", 1), ("validator", 1), ("controller", 1)]


# --- a person as a phase: (human) ------------------------------------------------------------------------------

SLOGAN = """(creator-critic-loop
  (max-iterations 3)
  (requirements "A slogan for a bakery")
  (creator (lambda (requirements context iteration) "Fresh bread"))
  (critic (human "Is it warm enough?"))
  (iterator (lambda (requirements draft feedback iteration) (string-append draft ", " feedback))))"""


def test_a_human_phase_answers_with_the_roles_fields_and_sees_the_phases_inputs():
    import loops

    asked = []

    def person(question):
        asked.append(question)
        return {"approved": len(asked) > 1, "feedback": "baked daily"}

    with loops.answering(person):
        value, warnings = run(SLOGAN)
    assert (value, warnings) == ("Fresh bread, baked daily", [])
    assert [(question.role, question.note, question.inputs["draft"]) for question in asked] == [
        ("critic", "Is it warm enough?", "Fresh bread"), ("critic", "Is it warm enough?", "Fresh bread, baked daily")]


def test_a_human_phase_of_each_loop_form_answers_with_that_phases_fields():
    import loops

    answers = {"validator": {"passed": True}, "controller": {"action": "stop"}, "evaluator": {"status": "PASS"}}
    with loops.answering(lambda question: answers[question.role]):
        (value, seen), _ = run(iterative(validator="(human)", controller="(human)"))
        goal, _ = run("(director-evaluator-loop (max-iterations 2) (initial-director-input \"a poem\")\n"
                      "  (director (lambda (input n) (string-append \"plan: \" input)))\n"
                      "  (executor (lambda (plan n) (string-append \"did \" plan)))\n"
                      "  (evaluator (human)) (controller (lambda (f p r n) (list 'continue p))))")
    assert (value, seen) == (("attempt", "task", 1), (("executor", "task", 1),))
    assert goal == "did plan: a poem"


@pytest.mark.parametrize("source, rendered", [
    ("(define p (human))", "<string>:1:11: (human) is a person answering a loop form's phase: write it as the phase "
                           "itself, e.g. (critic (human)) in a creator-critic-loop\n    (define p (human))\n"
                           "              ^"),
    (SLOGAN.replace('(human "Is it warm enough?")', "(human 42)"),
     "<string>:5:11: creator-critic-loop: critic: a person is (human) or (human \"what to look for\")\n"
     "      (critic (human 42))\n              ^"),
])
def test_human_outside_a_phase_or_with_other_than_text_is_a_syntax_error_at_its_position(source, rendered):
    with pytest.raises(DslSyntaxError) as raised:
        run(source)
    assert str(raised.value) == rendered


def test_a_compiled_program_pauses_at_a_human_phase_and_resumes_where_it_was(tmp_path):
    import loops

    path, program = tmp_path / "runs.db", compile_program(f"(define drafts 0)\n{SLOGAN}")
    paused = program(checkpoint=path, run_id="p1")
    assert (paused.stop_reason, paused.success) == ("awaiting_input", False)
    assert [(step.role, step.human) for step in paused.trace] == [("creator", False)]
    question = loops.pending_question(path, "p1")  # asked by the loop form's run, nested in p1
    assert (question.role, question.note, question.inputs["draft"]) == ("critic", "Is it warm enough?",
                                                                       "Fresh bread")

    loops.answer(path, "p1", approved=False, feedback="baked daily")
    assert program(checkpoint=path, run_id="p1").stop_reason == "awaiting_input"
    loops.answer(path, "p1", approved=True)
    done = program(checkpoint=path, run_id="p1")
    assert (done.stop_reason, done.success, done.result) == ("approved", True, "Fresh bread, baked daily")
    assert [(step.role, step.human, step.replayed) for step in done.trace] == [
        ("creator", False, True), ("critic", True, True), ("iterator", False, True), ("critic", True, False),
        ("program", False, False)]


def test_a_program_with_a_human_phase_nobody_to_answer_and_no_checkpoint_is_refused_before_it_runs(monkeypatch):
    import io

    from loops import ConfigurationError

    monkeypatch.setattr("sys.stdin", io.StringIO())
    with pytest.raises(ConfigurationError, match=r"^the \(human\) phase of the program is answered by a person"):
        compile_program(SLOGAN)()
    # `(human)` as quoted data asks nobody: the program runs.
    assert compile_program("(define x '(human)) (length x)")().final == 1


def test_a_persons_wait_at_a_human_phase_is_not_charged_to_the_programs_clock():
    import time

    import loops
    from loops.sexp import Limits

    source = f"(define (spin k) (if (= k 0) 5000 (spin (- k 1))))\n(define slogan {SLOGAN})\n(list slogan (spin 5000))"
    program = compile_program(source, limits=Limits(timeout_s=1.0), budget=Budget(max_iterations=1, timeout_s=1.0))

    def slow(question):
        time.sleep(1.3)  # longer than the program's whole wall clock
        return {"approved": True}

    with loops.answering(slow):
        result = program()
    assert (result.stop_reason, result.result) == ("approved", ("Fresh bread", 5000))

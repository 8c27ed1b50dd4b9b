"""loops.identity: a program is recorded by its class's public name, and what was recorded before by the module
that defined the class then still resumes and loads. The old names below are written as they were recorded, on
purpose: they are what a checkpoint file or a saved program of that time holds."""

from __future__ import annotations

import json
import sqlite3

import dspy
import pytest

from loops import Budget, CreatorCriticIterator, DirectorExecutorEvaluatorController, load
from loops.checkpoint import program_difference
from loops.errors import ReplayDivergence
from loops.identity import canonical, public_path
from loops.sexp import SexpProgram
from tests.loops.test_long_loops import never_approving
from tests.scripted import calls, scripted_lm


class MyLoop(CreatorCriticIterator):
    """A user's loop: it keeps its own module's name."""


def test_a_class_is_named_by_the_shortest_module_that_exports_it_and_a_users_by_its_own():
    assert public_path(CreatorCriticIterator) == ("loops", "CreatorCriticIterator")
    assert public_path(Budget) == ("loops", "Budget")
    assert public_path(SexpProgram) == ("loops.sexp", "SexpProgram")
    assert public_path(MyLoop) == (__name__, "MyLoop")


def test_a_name_recorded_by_the_defining_module_reads_as_the_public_name():
    assert canonical("loops.creator_critic.CreatorCriticIterator") == "loops.CreatorCriticIterator"
    assert canonical("loops.creator_critic:CreatorCriticIterator") == "loops:CreatorCriticIterator"
    assert canonical("loops.budget:Budget") == "loops:Budget"
    assert canonical("loops.sexp.program:SexpProgram") == "loops.sexp:SexpProgram"
    assert canonical("loops.CreatorCriticIterator") == "loops.CreatorCriticIterator"
    # A user's class is not looked up, nor a name that is no class of the library's.
    assert canonical(f"{__name__}.MyLoop") == f"{__name__}.MyLoop"
    assert canonical("loops.no_such_module.Loop") == "loops.no_such_module.Loop"
    assert canonical("loops.creator_critic.judge") == "loops.creator_critic.judge"


def test_a_fingerprint_recorded_by_the_defining_module_is_the_same_program_and_another_class_is_not():
    now = CreatorCriticIterator().fingerprint()
    identity, _, roles = now.partition(" ")
    assert identity.startswith("loops.CreatorCriticIterator:")
    then = now.replace("loops.CreatorCriticIterator:", "loops.creator_critic.CreatorCriticIterator:")
    assert program_difference(then, now) is None
    other = now.replace("loops.CreatorCriticIterator:", "loops.director.DirectorExecutorEvaluatorController:")
    assert program_difference(other, now) == (
        "loops.DirectorExecutorEvaluatorController then, loops.CreatorCriticIterator now")


def test_a_checkpoint_recorded_before_with_the_defining_modules_name_resumes(tmp_path):
    path = tmp_path / "runs.db"
    with dspy.context(lm=scripted_lm(never_approving)):
        first = CreatorCriticIterator(max_iterations=2, checkpoint=path)(requirements="a slogan", run_id="r1")
    with sqlite3.connect(path) as db:
        (program,), = db.execute("SELECT program FROM runs WHERE run_id = 'r1'")
        assert program.startswith("loops.CreatorCriticIterator:")
        db.execute("UPDATE runs SET program = ? WHERE run_id = 'r1'",
                   (program.replace("loops.CreatorCriticIterator:", "loops.creator_critic.CreatorCriticIterator:"),))

    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm):
        resumed = CreatorCriticIterator(max_iterations=3, checkpoint=path)(requirements="a slogan", run_id="r1")

    assert resumed.replayed == first.lm_calls > 0
    assert (resumed.stop_reason, resumed.iterations, calls(lm), resumed.lm_calls) == ("max_iterations", 3, 2, 2)
    with dspy.context(lm=scripted_lm(never_approving)), pytest.raises(ReplayDivergence, match="another program"):
        DirectorExecutorEvaluatorController(checkpoint=path)(initial_input="a slogan", run_id="r1")


def test_a_program_saved_before_with_the_defining_modules_name_loads(tmp_path):
    program = CreatorCriticIterator(max_iterations=5, budget=Budget(max_iterations=5, max_lm_calls=40))
    program.save(tmp_path / "now.json")
    saved = json.loads((tmp_path / "now.json").read_text())
    assert saved["loops"]["kind"] == "loops:CreatorCriticIterator"
    assert saved["loops"]["arguments"]["budget"]["__dataclass__"] == "loops:Budget"
    saved["loops"]["kind"] = "loops.creator_critic:CreatorCriticIterator"
    saved["loops"]["arguments"]["budget"]["__dataclass__"] = "loops.budget:Budget"
    (tmp_path / "before.json").write_text(json.dumps(saved))

    loaded = load(tmp_path / "before.json")
    assert type(loaded) is CreatorCriticIterator and loaded.budget.max_lm_calls == 40
    again = CreatorCriticIterator()
    again.load(tmp_path / "before.json")
    assert again.budget.max_lm_calls == 40

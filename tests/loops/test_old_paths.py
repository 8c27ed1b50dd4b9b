"""The paths of before the rooms (docs/architecture.md, "The rooms as packages"): each old module path is the very
module of its room, so code written before, a saved program that names `loops.checks:Count` and a checkpoint whose
pickles name `loops.checkpoint._Fields` or `loops.steps.Step` keep working. The old names below are written as
they were recorded, on purpose (the script that moved the modules leaves this file as it is)."""

from __future__ import annotations

import importlib
import json
import pickle
import sqlite3

import dspy
import pytest

import loops
from loops import CreatorCriticIterator, load
from tests.loops.test_long_loops import never_approving
from tests.scripted import calls, scripted_lm

MOVED = sorted(loops._MOVED.items())


@pytest.mark.parametrize(("old", "room"), MOVED)
def test_an_old_path_is_the_very_module_of_its_room(old, room):
    assert importlib.import_module(f"loops.{old}") is importlib.import_module(f"loops.{room}.{old}")


def test_code_written_before_the_rooms_imports_and_patches_through_the_old_paths(monkeypatch):
    from loops.checks import Count
    from loops.code.draws import Draw
    from loops.creator_critic import CreatorCriticIterator as Old

    assert Old is CreatorCriticIterator and Count.__module__ == "loops.vocabulary.builtin_checks"
    assert Draw.__module__ == "loops.patterns.code.draws"
    import loops.patterns.creator_critic as room

    monkeypatch.setattr("loops.creator_critic.judge", "patched")  # a patch of the old path is a patch of the room's
    assert room.judge == "patched"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("loops.no_such_module")


def test_a_program_saved_before_the_rooms_names_its_checks_by_the_old_module_and_loads(tmp_path):
    from loops.vocabulary.checks import Count, Include

    CreatorCriticIterator(checks=[Count("word", max=40), Include("BPA-free")]).save(tmp_path / "now.json")
    saved = json.loads((tmp_path / "now.json").read_text())
    saved["loops"]["kind"] = "loops.creator_critic:CreatorCriticIterator"
    for check in saved["loops"]["arguments"]["checks"]:
        check["__dataclass__"] = "loops.checks:" + check["__dataclass__"].partition(":")[2]
    assert saved["loops"]["arguments"]["checks"][0]["__dataclass__"] == "loops.checks:Count"
    (tmp_path / "before.json").write_text(json.dumps(saved))

    assert load(tmp_path / "before.json").checks == (Count("word", max=40), Include("BPA-free"))


def test_a_record_pickled_before_the_rooms_names_loops_checkpoint_records_and_unpickles(monkeypatch):
    from loops.recording.checkpoint_records import CallRecord

    record = CallRecord(0, "creator", "digest", False, b"payload")
    with monkeypatch.context() as before:
        before.setattr(CallRecord, "__module__", "loops.checkpoint_records")
        data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    assert b"loops.checkpoint_records" in data and b"loops.recording" not in data
    assert pickle.loads(data) == record


def test_a_checkpoint_whose_pickles_name_the_old_modules_resumes(tmp_path, monkeypatch):
    from loops.recording.checkpoint import _Fields
    from loops.running.steps import Step
    from loops.vocabulary.usage import Usage

    path = tmp_path / "runs.db"
    with dspy.context(lm=scripted_lm(never_approving)):
        first = CreatorCriticIterator(max_iterations=2, checkpoint=path)(requirements="a slogan", run_id="r1")
    # Each call's payload as a checkpoint of before the rooms pickled it: its classes named by their old modules.
    with monkeypatch.context() as before, sqlite3.connect(path) as db:
        for cls, old in ((_Fields, "loops.checkpoint"), (Step, "loops.steps"), (Usage, "loops.usage")):
            before.setattr(cls, "__module__", old)
        for seq, payload in list(db.execute("SELECT seq, payload FROM calls WHERE run_id = 'r1'")):
            old_payload = pickle.dumps(pickle.loads(payload), protocol=pickle.HIGHEST_PROTOCOL)
            assert b"loops.steps" in old_payload and b"loops.running" not in old_payload
            db.execute("UPDATE calls SET payload = ? WHERE run_id = 'r1' AND seq = ?", (old_payload, seq))

    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm):
        resumed = CreatorCriticIterator(max_iterations=3, checkpoint=path)(requirements="a slogan", run_id="r1")

    assert resumed.replayed == first.lm_calls > 0
    assert (resumed.stop_reason, resumed.iterations, calls(lm)) == ("max_iterations", 3, 2)
    assert [step.role for step in resumed.trace][:4] == [step.role for step in first.trace]

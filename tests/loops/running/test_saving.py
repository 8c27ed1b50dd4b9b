"""loops.running.saving: which LM a saved role comes back with (the round trip itself: tests/optimize/test_run.py)."""

import dspy

from loops import CreatorCriticIterator, load
from loops.lm import resolve
from loops.running.saving import lm_reference


def test_a_role_keeps_its_model_string_but_never_a_servers_address(tmp_path):
    program = CreatorCriticIterator()
    program.critic.set_lm(dspy.LM("openai/gpt-4o-mini"))
    program.creator.set_lm(resolve("openai/smollm2", api_base="http://127.0.0.1:8080/v1"))
    path = tmp_path / "program.json"
    program.save(path)

    loaded = load(path)

    assert loaded.critic.lm.model == "openai/gpt-4o-mini"
    # The server's model name alone would reach the provider's public address: the role takes the context's LM.
    assert loaded.creator.predict.lm is None
    assert lm_reference(resolve("local")) == "local"


def test_saving_says_which_roles_name_no_lm_of_their_own(tmp_path, caplog):
    program = CreatorCriticIterator()
    program.critic.set_lm(resolve("local"))

    with caplog.at_level("WARNING", logger="loops"):
        program.save(tmp_path / "program.json")

    [record] = caplog.records
    assert record.getMessage().startswith(f"{tmp_path / 'program.json'}: the saved program names no LM for "
                                          "creator.predict, iterator: they run on the context's LM")


def test_saving_builds_the_programs_state_once(tmp_path, monkeypatch):
    built, dump_state = [], CreatorCriticIterator.dump_state
    monkeypatch.setattr(CreatorCriticIterator, "dump_state",
                        lambda self, *args, **kwargs: built.append(self) or dump_state(self, *args, **kwargs))
    program = CreatorCriticIterator()
    program.save(tmp_path / "program.json")
    assert built == [program]


def test_checks_survive_save_and_load_and_a_python_object_among_them_is_asked_for_again(tmp_path):
    import pydantic
    import pytest

    from loops import ConfigurationError, DirectorExecutorEvaluatorController
    from loops.patterns.code import Draw
    from loops.vocabulary.checks import Count, Include, MatchesModel, MatchesSchema

    checks = [Count("word", max=40), "include=BPA-free", MatchesSchema({"type": "object"})]
    program = CreatorCriticIterator(checks=checks, critic="checks", draws=[Draw(), Draw(sampled=True, seed=3)])
    program.save(tmp_path / "refine.json")
    loaded = load(tmp_path / "refine.json")
    assert loaded.checks == (Count("word", max=40), Include("BPA-free"), MatchesSchema({"type": "object"}))
    assert loaded.settings()["critic"] == "checks" and loaded.draws == program.draws

    director = DirectorExecutorEvaluatorController(checks=["ends-with=?"], evaluator="checks")
    director.save(tmp_path / "direct.json")
    assert load(tmp_path / "direct.json").settings()["evaluator"] == "checks"

    class Product(pydantic.BaseModel):
        name: str

    def friendly(draft):
        return "hello" in draft.lower()

    CreatorCriticIterator(checks=[MatchesModel(Product), friendly]).save(tmp_path / "custom.json")
    with pytest.raises(ConfigurationError, match=r"pass it again, e.g. loops.load\(path, checks=...\)"):
        load(tmp_path / "custom.json")
    assert load(tmp_path / "custom.json", checks=[friendly]).checks == (friendly,)


def test_a_program_saved_before_the_checks_moved_to_loops_builtin_checks_still_loads(tmp_path):
    import json

    from loops.vocabulary.checks import Count, Include

    CreatorCriticIterator(checks=[Count("word", max=40), Include("BPA-free")]).save(tmp_path / "refine.json")
    saved = json.loads((tmp_path / "refine.json").read_text())
    text = json.dumps(saved).replace('"loops.vocabulary.builtin_checks:', '"loops.vocabulary.checks:')
    assert '"loops.vocabulary.checks:Count"' in text  # as a program saved before the split names its checks
    (tmp_path / "before.json").write_text(text)
    assert load(tmp_path / "before.json").checks == (Count("word", max=40), Include("BPA-free"))

"""loops.saving: which LM a saved role comes back with (the round trip itself: tests/optimize/test_run.py)."""

import dspy

from loops import CreatorCriticIterator, load
from loops.lm import resolve
from loops.saving import lm_reference


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

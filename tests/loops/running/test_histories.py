"""`Histories`: each role's turns, what its prompt shows of them, and the characters they put in the prompts."""

from loops.running.histories import Histories


def test_a_role_is_shown_its_window_and_the_chars_count_what_the_prompts_show():
    histories = Histories()
    histories.set_window("critic", 2)
    chars = [histories.add("critic", {"draft": "x" * size}) for size in (10, 20, 30)]
    assert chars == [10, 30, 50]  # the oldest turn left the window
    assert [turn["draft"] for turn in histories.shown("critic")] == ["x" * 20, "x" * 30]
    assert histories.add("creator", {"draft": "abc"}) == 53  # no window: every turn shown
    assert list(histories.as_dspy()) == ["critic", "creator"]


def test_with_summary_the_older_turns_are_folded_into_one():
    histories = Histories(summary=True)
    histories.set_window("critic", 1)
    for draft in ("one", "two", "three"):
        histories.add("critic", {"draft": draft})
    folded, kept = histories.shown("critic")
    assert folded == {"draft": "[2 earlier turn(s), condensed] one | two"} and kept == {"draft": "three"}
    histories.forget("critic")
    assert histories.shown("critic") == []

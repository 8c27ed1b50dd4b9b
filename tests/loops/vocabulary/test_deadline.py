"""`Deadline`: the run's one clock, read by the run and `loops.vocabulary.context`, moved once after a person's wait."""

from loops.vocabulary import context
from loops.vocabulary.deadline import Deadline


def test_a_persons_wait_moves_the_one_deadline_for_every_reader():
    now = [100.0]
    deadline = Deadline(30, clock=lambda: now[0])
    now[0] += 10
    assert deadline.elapsed() == 10
    with context.running(object(), deadline):
        before = context.deadline()
        assert before == deadline.at and 29 < context.time_left() <= 30
        context.paused(5)  # a person took 5 s: not the run's time
        assert context.deadline() == before + 5 == deadline.at
    assert deadline.elapsed() == 5
    assert Deadline(None).at is None and Deadline(None).left() is None

"""The embedded model's thread count: the cores other processes leave free, or LOOPS_LLAMA_THREADS."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from loops.errors import ConfigurationError
from loops.lm.cores import GENERATION_THREADS, FreeCores, fixed_threads, thread_counts
from tests.processes import alive

SPIN = "while True: pass"


def test_the_environment_fixes_the_count_or_leaves_it_to_the_load(monkeypatch):
    monkeypatch.delenv("LOOPS_LLAMA_THREADS", raising=False)
    assert fixed_threads() is None
    monkeypatch.setenv("LOOPS_LLAMA_THREADS", "3")
    assert fixed_threads() == 3
    for wrong in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv("LOOPS_LLAMA_THREADS", wrong)
        with pytest.raises(ConfigurationError, match="LOOPS_LLAMA_THREADS=.* Fix: set it to a whole number >= 1"):
            fixed_threads()


def test_the_model_reads_on_the_free_cores_and_generates_on_one_unless_the_environment_fixes_both(monkeypatch):
    monkeypatch.delenv("LOOPS_LLAMA_THREADS", raising=False)
    assert GENERATION_THREADS == 1
    assert thread_counts(2) == (1, 2)
    assert thread_counts(1) == (1, 1)
    monkeypatch.setenv("LOOPS_LLAMA_THREADS", "2")
    assert thread_counts(1) == (2, 2)


@pytest.mark.embedded
def test_the_shared_model_is_given_both_counts(monkeypatch):
    from loops.lm import embedded

    monkeypatch.delenv("LOOPS_LLAMA_THREADS", raising=False)
    llama = embedded._shared_model()
    llama.use_threads(2)
    assert (llama.n_threads, llama.n_threads_batch) == (1, 2)
    llama.use_threads(1)
    assert (llama.n_threads, llama.n_threads_batch) == (1, 1)


def test_the_count_stays_between_one_and_the_physical_cores():
    cores = FreeCores()
    count = cores.update(wait=True)
    assert 1 <= count <= max(1, len(os.sched_getaffinity(0)))
    assert cores.update() == count  # too soon to look again: the last count


def test_processes_keeping_every_core_busy_leave_one_thread():
    cores = FreeCores()
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(len(cores.cpus))]
    try:
        time.sleep(0.3)
        cores.update()  # starts a window with every spinner running
        time.sleep(1.0)
        others = cores.others_use()
        assert others is not None and others > len(cores.cpus) - 0.6
        assert cores.update(wait=True) == 1
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert not any(alive(spinner.pid) for spinner in spinners)


def test_this_process_and_the_children_it_waited_for_are_not_counted_as_load():
    cores = FreeCores()
    _, _, mine_before = cores._sample()
    started = time.process_time()
    while time.process_time() - started < 0.5:  # this process busy
        pass
    subprocess.run([sys.executable, "-c", "import time\nstarted = time.process_time()\n"
                    "while time.process_time() - started < 0.5: pass"], check=True)  # a child, reaped
    _, _, mine_after = cores._sample()
    # others_use() subtracts this from what the cores did: neither half second was another process's.
    assert mine_after - mine_before >= 0.95

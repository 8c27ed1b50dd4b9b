"""How many threads the embedded model reads and generates with: the cores other processes leave free to read
prompts, one thread to generate.

llama.cpp's threads wait for each other at every step of a token, spinning, so one thread that shares its core
with another process holds all of them up. Measured on a 2-core machine: idle, two threads read a prompt
~1.9x faster than one; with other processes keeping both cores busy, two threads took 3.3x longer than one
(benchmarks/README.md, "Threads"). So the count follows what is free when the model loads and when each
generation starts: the cores this process may run on, less the CPU that other processes used since the
last look. This process's own CPU time is taken out (its threads, and the children it waited for, such as a
validator's test run: they do not run while the model generates), and steal time (a virtual machine's
neighbours) counts as used.

Generating is another matter: one token at a time is too little work for SmolLM2-135M to share, and on two
threads their barriers cost more than the second core gives, even on an idle machine (quiet, the refine loop's
104 tokens took 3.5-3.8 s on two threads against 1.77 s on one: benchmarks/README.md, "The embedded model's
speed"). So the model generates on one thread (llama.cpp's `n_threads`) and reads on the free cores
(`n_threads_batch`), as llama.cpp's own tools let `-t` and `-tb` differ.

`LOOPS_LLAMA_THREADS` fixes both counts instead, e.g. for a benchmark.
"""

from __future__ import annotations

import math
import os
import time

from loops.errors import ConfigurationError

__all__ = ["GENERATION_THREADS", "THREADS_VARIABLE", "FreeCores", "fixed_threads", "thread_counts"]

THREADS_VARIABLE = "LOOPS_LLAMA_THREADS"
# A window shorter than this says more about the scheduler's last tick (10 ms) than about the load.
_SHORTEST_WINDOW_S = 0.2
# A core that other processes use for less than this share still gets a thread: below it, an extra thread
# gained more than the waits at its barriers cost (benchmarks/README.md, "Threads").
_TOLERATED_USE = 0.4
GENERATION_THREADS = 1


def fixed_threads() -> int | None:
    """The thread count `LOOPS_LLAMA_THREADS` sets, None when it is unset."""
    text = os.environ.get(THREADS_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigurationError(f"{THREADS_VARIABLE}={text!r} is not a thread count. Fix: set it to a whole "
                                 "number >= 1, or unset it to use the cores other processes leave free")
    return int(text)


def thread_counts(reading: int) -> tuple[int, int]:
    """(generating, reading) threads for a model that reads on `reading` threads: `LOOPS_LLAMA_THREADS`, when set,
    fixes both; else generation takes `GENERATION_THREADS` of them."""
    fixed = fixed_threads()
    if fixed is not None:
        return fixed, fixed
    return min(reading, GENERATION_THREADS), reading


class FreeCores:
    """The cores other processes leave free, measured over the time since the last look (psutil: the
    system's CPU times against this process's): `cpus` are the CPUs this process may run on, `most` the
    threads it uses at most, `threads` the last count. Not thread-safe: the model's lock serialises its users."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._process = psutil.Process()
        try:
            self.cpus = sorted(self._process.cpu_affinity())
        except (AttributeError, psutil.Error):  # macOS has no affinity: every core
            self.cpus = list(range(psutil.cpu_count() or 1))
        # As llama.cpp's own tools: one thread per physical core (a core's hardware threads share its arithmetic).
        self.most = max(1, min(len(self.cpus), psutil.cpu_count(logical=False) or len(self.cpus)))
        self._last = self._sample()
        self.threads = max(1, self.most // 2)  # until a window long enough was measured

    def _sample(self) -> tuple[float, float, float]:
        """(now, CPU seconds used on this process's cores, CPU seconds of this process and its reaped children)."""
        per_cpu = self._psutil.cpu_times(percpu=True)
        used = 0.0
        for cpu in self.cpus:
            if cpu < len(per_cpu):
                times = per_cpu[cpu]._asdict()
                # guest time is counted in user time already; idle and waiting on disks are free
                total = sum(times.values()) - times.get("guest", 0.0) - times.get("guest_nice", 0.0)
                used += total - times["idle"] - times.get("iowait", 0.0)
        own = self._process.cpu_times()
        mine = own.user + own.system + getattr(own, "children_user", 0.0) + getattr(own, "children_system", 0.0)
        return time.monotonic(), used, mine

    def others_use(self) -> float | None:
        """How many cores other processes used since the last look, None if too little time passed to say."""
        now, used, mine = self._sample()
        then, used_then, mine_then = self._last
        if now - then < _SHORTEST_WINDOW_S:
            return None
        self._last = (now, used, mine)
        return max(0.0, (used - used_then) - (mine - mine_then)) / (now - then)

    def update(self, wait: bool = False) -> int:
        """The thread count for the next generation: the free cores now, or the last count if too little
        time passed since the last look (`wait`: wait until enough has)."""
        if wait:
            time.sleep(max(0.0, _SHORTEST_WINDOW_S - (time.monotonic() - self._last[0])))
        others = self.others_use()
        if others is not None:
            free = len(self.cpus) - others
            self.threads = max(1, min(self.most, math.floor(free + _TOLERATED_USE)))
        return self.threads

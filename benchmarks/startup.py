"""Start-up cost: `import loops` and `loops --help` against `import dspy`, each a fresh process.

    .venv/bin/python -m benchmarks.startup [--rounds 15]

Every round starts each candidate once, in an order rotated per round (interleaved, so that a machine
busy with other work slows all of them alike), and measures the CPU time of the child process (user plus
system, from `resource.getrusage(RUSAGE_CHILDREN)`), not the wall clock. Prints each candidate's median
and its ratio to `import dspy`'s median; the goal is at most 1.2 for `import loops` and `loops --help`.
`compile (model ...)` compiles a DSL program whose atom names a hosted model by its bare name
(`gpt-4-turbo`, as the seed programs do), which must not load LiteLLM.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """(defatom user:hello (params (name string)) (instructions "Greet {{name}}.") (returns (greeting string))
  (model "gpt-4-turbo"))
(user:hello (name who))"""


def candidates(program: Path) -> dict[str, list[str]]:
    python = sys.executable
    script = Path(python).with_name("loops")
    command = [str(script)] if script.exists() else [python, "-m", "loops"]
    return {
        "import dspy": [python, "-c", "import dspy"],
        "import loops": [python, "-c", "import loops"],
        "loops --help": [*command, "--help"],
        "compile (model ...)": [python, "-c", f"import loops.sexp; loops.sexp.compile({str(program)!r})"],
    }


def cpu_seconds(command: list[str]) -> float:
    """The CPU time (user + system) of one run of `command` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "100"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        program = Path(scratch) / "hosted_atom.sexp"
        program.write_text(PROGRAM, encoding="utf-8")
        commands = candidates(program)
        names = list(commands)
        for name in names:  # once each first: warm the page cache and the bytecode caches
            cpu_seconds(commands[name])
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_number in range(arguments.rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(cpu_seconds(commands[name]))
    baseline = statistics.median(times["import dspy"])
    print(f"CPU seconds of a fresh process, median of {arguments.rounds} interleaved rounds "
          f"(ratio to `import dspy`; the goal: `import loops` and `loops --help` at most 1.2):")
    for name in names:
        median = statistics.median(times[name])
        low, high = statistics.quantiles(times[name], n=4)[0], statistics.quantiles(times[name], n=4)[2]
        print(f"  {name:22} {median:6.3f} s  (IQR {low:.3f}-{high:.3f})   ratio {median / baseline:5.2f}")


if __name__ == "__main__":
    main()

"""The Execute–Validate loop on MBPP, before and after `loops.optimize.run`, on the embedded model.

Optimizes on the train split, scores on the validation split (43 tasks), and prints the report:
tasks solved before and after, the mean score (share of tests passed), LM calls, tokens and wall time
per stage.

    .venv/bin/python -m benchmarks.optimize_mbpp --optimizer bootstrap --out /tmp/fix.optimized.json
    .venv/bin/python -m benchmarks.optimize_mbpp --train 10 --val 5 --max-iterations 1   # a quick look

The same run through the CLI: `loops optimize fix --data PATH --optimizer bootstrap --out FILE`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT / ".." / "shared" / "data" / "mbpp" / "sanitized-mbpp-dev.jsonl"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.optimize_mbpp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="sanitized MBPP JSON lines (default: %(default)s)")
    parser.add_argument("--optimizer", default="bootstrap", help="bootstrap | random-search | mipro | gepa | simba")
    parser.add_argument("--train", type=int, default=None, help="the first N train tasks (default: all 120)")
    parser.add_argument("--val", type=int, default=None, help="the first N validation tasks (default: all 43)")
    parser.add_argument("--max-iterations", type=int, default=2, help="the loop's iterations per task (default: 2)")
    parser.add_argument("--samples", type=int, default=1, help="candidates per iteration (default: 1)")
    parser.add_argument("--demos", type=int, default=4, help="bootstrapped demos per role (default: 4)")
    parser.add_argument("--threads", type=int, default=2, help="tasks scored at once (default: 2: one generates "
                        "while the other runs its tests)")
    parser.add_argument("--out", default="/tmp/fix.optimized.json", help="where the optimized program is saved")
    args = parser.parse_args(argv)

    import dspy

    import loops.optimize
    from loops import ExecuteValidateController
    from loops.lm import local_lm
    from loops.optimize.datasets import mbpp

    trainset = mbpp(args.data, "train", args.train)
    valset = mbpp(args.data, "validation", args.val)
    program = ExecuteValidateController(max_iterations=args.max_iterations, samples=args.samples)
    options = {"max_bootstrapped_demos": args.demos} if args.optimizer in ("bootstrap", "random-search",
                                                                           "mipro") else {}
    started = time.monotonic()
    with dspy.context(lm=local_lm()):
        optimized, report = loops.optimize.run(program, trainset, valset, optimizer=args.optimizer, out=args.out,
                                               num_threads=args.threads, **options)
    print(report.summary())
    print(f"wall time {time.monotonic() - started:.0f} s; saved to {args.out}")
    solved_before = {example.task_id for example, score in zip(valset, report.before.per_example, strict=True)
                     if score >= 1.0}
    solved_after = {example.task_id for example, score in zip(valset, report.after.per_example, strict=True)
                    if score >= 1.0}
    print(json.dumps({"solved_before": sorted(solved_before), "solved_after": sorted(solved_after),
                      "gained": sorted(solved_after - solved_before), "lost": sorted(solved_before - solved_after)}))


if __name__ == "__main__":
    main()

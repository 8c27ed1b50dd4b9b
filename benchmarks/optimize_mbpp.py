"""The Execute–Validate loop on MBPP, before and after `loops.optimize.run`, on the embedded model.

Optimizes on the train split, scores on the validation split (43 tasks), and prints the report:
tasks solved before and after, the mean score (share of tests passed), which program was kept, LM
calls, tokens and wall time per stage. A pass whose code only returns the tested values
(`loops.optimize.metrics.honest`) counts as a failure, in the search and in the scores.

    .venv/bin/python -m benchmarks.optimize_mbpp --optimizer bootstrap --out /tmp/fix.optimized.json
    .venv/bin/python -m benchmarks.optimize_mbpp --train 10 --val 5 --max-iterations 1   # a quick look

The `draws` optimizer chooses the loop's candidates on the train split (each kind once per train
task, recorded in `--trials` so that a rerun resumes); `--choose-only` skips the two validation
scorings and only saves the program, to be measured once with `benchmarks.mbpp --configs file:PATH`:

    .venv/bin/python -m benchmarks.optimize_mbpp --optimizer draws --choose-only \\
        --trials /tmp/draws-trials.jsonl --out /tmp/fix.draws.json

The same run through the CLI: `loops optimize fix --data PATH --optimizer draws --out FILE`.
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
    parser.add_argument("--optimizer", default="bootstrap",
                        help="bootstrap | random-search | mipro | gepa | simba | draws")
    parser.add_argument("--train", type=int, default=None, help="the first N train tasks (default: all 120)")
    parser.add_argument("--val", type=int, default=None, help="the first N validation tasks (default: all 43)")
    parser.add_argument("--max-iterations", type=int, default=2, help="the loop's iterations per task (default: 2)")
    parser.add_argument("--samples", type=int, default=None,
                        help="candidates per iteration (default: 1; with --optimizer draws, the model's defaults)")
    parser.add_argument("--demos", type=int, default=4, help="bootstrapped demos per role (default: 4)")
    parser.add_argument("--threads", type=int, default=2, help="tasks scored at once (default: 2: one generates "
                        "while the other runs its tests)")
    parser.add_argument("--trials", default=None, help="draws: JSON lines of the trials, appended and resumed from")
    parser.add_argument("--choose-only", action="store_true",
                        help="draws: choose on train and save the program, without scoring on validation")
    parser.add_argument("--out", default="/tmp/fix.optimized.json", help="where the optimized program is saved")
    args = parser.parse_args(argv)

    import dspy

    import loops.optimize
    from loops import Budget, ExecuteValidateController
    from loops.lm import local_lm
    from loops.optimize.datasets import mbpp
    from loops.optimize.draws import DrawsOptimizer
    from loops.optimize.metrics import execute_validate_metric, honest

    trainset = mbpp(args.data, "train", args.train)
    valset = mbpp(args.data, "validation", args.val)
    samples = args.samples if args.samples is not None or args.optimizer == "draws" else 1
    # No wall-clock limit (Budget's default is 300 s): on a loaded machine a limit would change outcomes.
    program = ExecuteValidateController(budget=Budget(max_iterations=args.max_iterations, timeout_s=None),
                                        samples=samples)
    metric = honest(execute_validate_metric)
    options = {"max_bootstrapped_demos": args.demos} if args.optimizer in ("bootstrap", "random-search",
                                                                           "mipro") else {}
    if args.optimizer == "draws" and args.trials:
        options["trials"] = args.trials
    started = time.monotonic()
    if args.choose_only:
        if args.optimizer != "draws":
            parser.error("--choose-only is for --optimizer draws")
        optimizer = DrawsOptimizer(metric, **options)
        with dspy.context(lm=local_lm()):
            chosen = optimizer.compile(program, trainset=trainset)
        loops.optimize.save(chosen, args.out)
        print(json.dumps(optimizer.findings, indent=1))
        print(f"wall time {time.monotonic() - started:.0f} s; saved to {args.out}")
        return
    with dspy.context(lm=local_lm()):
        _, report = loops.optimize.run(program, trainset, valset, metric, optimizer=args.optimizer, out=args.out,
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

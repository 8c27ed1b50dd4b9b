"""What each optimizer costs on one program kind: Creator–Critic–Iterator.

For each optimizer in turn, `loops.optimize.run` on the same train/validation split, with the defaults of
`loops.optimize.OPTIMIZERS`; prints per optimizer the loop runs, LM calls, tokens and wall time of its
optimize stage, and the scores before and after.

`--lm scripted` (the default) answers with the test suite's learnable scripted LM
(tests/optimize/universal.py: easy tasks succeed untaught, hard ones once a role has demos or the
optimized instruction), so the counts show what each optimizer asks for in a minute, whatever the
model; `--lm local` runs the embedded model on the built-in writing set (slow: a loop run is several
LM calls of seconds each).

    .venv/bin/python -m benchmarks.optimizer_cost                    # all five, scripted, 4 train / 4 validation
    .venv/bin/python -m benchmarks.optimizer_cost --lm local --optimizers bootstrap --train 2 --val 2
"""

from __future__ import annotations

import argparse
import json


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.optimizer_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizers", default="bootstrap,random-search,mipro,gepa,simba")
    parser.add_argument("--train", type=int, default=4)
    parser.add_argument("--val", type=int, default=4)
    parser.add_argument("--max-iterations", type=int, default=None,
                        help="the loop's iterations (default: 1 scripted, as its LM takes history for teaching; "
                             "2 local)")
    parser.add_argument("--lm", choices=("scripted", "local"), default="scripted")
    args = parser.parse_args(argv)

    import dspy

    import loops.optimize
    from loops import CreatorCriticIterator
    from loops.lm import local_lm
    from loops.optimize.datasets import builtin

    if args.lm == "local":
        examples = builtin("writing")
        trainset, valset = examples[:args.train], examples[args.train:args.train + args.val]
        make_lm = local_lm
    else:
        from tests.optimize.universal import learnable_lm

        half = args.train // 2
        trainset = [dspy.Example(requirements=f"{'easy' if n < half else 'hard'} note {n}").with_inputs(
            "requirements") for n in range(args.train)]
        valset = [dspy.Example(requirements=f"hard note {100 + n}").with_inputs("requirements")
                  for n in range(args.val)]
        make_lm = learnable_lm
    max_iterations = args.max_iterations or (2 if args.lm == "local" else 1)
    rows = []
    for name in args.optimizers.split(","):
        options = {"bsize": min(4, len(trainset))} if name == "simba" else {}
        with dspy.context(lm=make_lm()):
            _, report = loops.optimize.run(CreatorCriticIterator(max_iterations=max_iterations), trainset,
                                           valset, optimizer=name, progress=False, **options)
        stage = report.stages["optimize"]
        rows.append({"optimizer": name, "loop_runs": stage.loop_runs, "lm_calls": stage.lm_calls,
                     "tokens": stage.tokens, "seconds": round(stage.seconds, 1),
                     "before": round(report.before.score, 3), "after": round(report.after.score, 3),
                     "changes": report.changes})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'optimizer':<14} {'loop runs':>9} {'LM calls':>9} {'tokens':>9} {'seconds':>8} {'score':>14}")
    for row in rows:
        print(f"{row['optimizer']:<14} {row['loop_runs']:>9} {row['lm_calls']:>9} {row['tokens']:>9} "
              f"{row['seconds']:>8} {row['before']:>6} -> {row['after']:<6}")


if __name__ == "__main__":
    main()

"""What each optimizer costs, and what it is worth, on each program kind.

For each pattern and each optimizer in turn, `loops.optimize.run` on the same small train/validation
split, with the defaults of `loops.optimize.OPTIMIZERS`; prints per run the loop runs, LM calls, tokens and
wall time of its optimize stage, the validation score of the baseline and of the optimizer's program, and
which of the two `run` kept (never a regression: the kept program scores at least the baseline's).

`--lm scripted` (the default) answers with the test suite's learnable scripted LM
(tests/optimize/universal.py: easy tasks succeed untaught, hard ones once a role has demos or the
optimized instruction), so the counts show what each optimizer asks for in a minute, whatever the
model; `--lm local` runs the embedded model on the built-in sets (slow: a loop run is several LM calls
of seconds each). `--patterns` chooses among `refine` (Creator–Critic on the writing set), `fix`
(Execute–Validate on the built-in code tasks, one candidate per iteration), `direct` (the Director on the
goals set) and `dsl` (examples/creator_critic.sexp); scripted runs cover `refine` only. With `--out`,
each run's row is appended as a JSON line and a rerun skips the (pattern, optimizer) pairs it holds.

    .venv/bin/python -m benchmarks.optimizer_cost                    # all five, scripted, 4 train / 4 validation
    .venv/bin/python -m benchmarks.optimizer_cost --lm local --optimizers bootstrap --train 2 --val 2
    .venv/bin/python -m benchmarks.optimizer_cost --lm local --patterns refine,fix,direct,dsl --train 3 --val 3 \\
        --optimizers bootstrap,random-search,mipro,gepa,simba,draws --small --out /tmp/optimizers.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PRODUCTS = ["a reusable water bottle", "a folding bicycle", "a desk lamp", "a rain jacket", "a coffee grinder",
            "a pair of running shoes", "a travel backpack", "a wireless speaker"]
# Budgets sized for a slow model (`--small`): each metric call is a whole loop run of several LM calls.
SMALL = {"random-search": {"num_candidate_programs": 2}, "gepa": {"max_metric_calls": 12},
         "simba": {"num_candidates": 2, "max_steps": 1}}


def programs(max_iterations: int) -> dict[str, Any]:
    """Per pattern: the baseline program, and its examples (train and validation are cut from them)."""
    import dspy

    from loops import CreatorCriticIterator, DirectorExecutorEvaluatorController, ExecuteValidateController
    from loops.optimize.datasets import builtin
    from loops.sexp import compile as compile_program

    return {
        "refine": (lambda: CreatorCriticIterator(max_iterations=max_iterations), lambda: builtin("writing")),
        "fix": (lambda: ExecuteValidateController(max_iterations=max_iterations, samples=1),
                lambda: builtin("code")),
        "direct": (lambda: DirectorExecutorEvaluatorController(max_iterations=max_iterations),
                   lambda: builtin("goals")),
        "dsl": (lambda: compile_program(REPO_ROOT / "examples" / "creator_critic.sexp"),
                lambda: [dspy.Example(product=product, **{"max-words": 8}).with_inputs("product", "max-words")
                         for product in PRODUCTS]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.optimizer_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizers", default="bootstrap,random-search,mipro,gepa,simba")
    parser.add_argument("--patterns", default="refine", help="refine,fix,direct,dsl (scripted: refine only)")
    parser.add_argument("--train", type=int, default=4)
    parser.add_argument("--val", type=int, default=4)
    parser.add_argument("--max-iterations", type=int, default=None,
                        help="the loop's iterations (default: 1 scripted, as its LM takes history for teaching; "
                             "2 local)")
    parser.add_argument("--small", action="store_true",
                        help="smaller searches for a slow model: random-search 2 candidates, gepa 12 metric calls, "
                             "simba 2 candidates and 1 step")
    parser.add_argument("--lm", choices=("scripted", "local"), default="scripted")
    parser.add_argument("--out", default=None, help="JSON lines the rows are appended to; a rerun resumes")
    args = parser.parse_args(argv)

    import dspy

    import loops.optimize
    from loops.errors import ConfigurationError
    from loops.lm import local_lm

    max_iterations = args.max_iterations or (2 if args.lm == "local" else 1)
    done = _done(args.out)
    rows = []
    for pattern in args.patterns.split(","):
        if args.lm == "local":
            make_program, make_examples = programs(max_iterations)[pattern]
            examples = make_examples()
            trainset, valset = examples[:args.train], examples[args.train:args.train + args.val]
            make_lm = local_lm
        else:
            from loops import CreatorCriticIterator
            from tests.optimize.universal import learnable_lm

            half = args.train // 2
            trainset = [dspy.Example(requirements=f"{'easy' if n < half else 'hard'} note {n}").with_inputs(
                "requirements") for n in range(args.train)]
            valset = [dspy.Example(requirements=f"hard note {100 + n}").with_inputs("requirements")
                      for n in range(args.val)]
            make_lm, make_program = learnable_lm, (lambda: CreatorCriticIterator(max_iterations=max_iterations))
        for name in args.optimizers.split(","):
            if (pattern, name) in done:
                continue
            options = {**(SMALL.get(name, {}) if args.small else {})}
            if name == "simba":
                options["bsize"] = min(4, len(trainset))
            try:
                with dspy.context(lm=make_lm()):
                    _, report = loops.optimize.run(make_program(), trainset, valset, optimizer=name, progress=False,
                                                   **options)
            except ConfigurationError as refused:  # refused before any LM call (mipro on the embedded model, draws)
                row = {"pattern": pattern, "optimizer": name, "refused": str(refused)}
            else:
                stage = report.stages["optimize"]
                row = {"pattern": pattern, "optimizer": name, "loop_runs": stage.loop_runs,
                       "lm_calls": stage.lm_calls, "tokens": stage.tokens, "seconds": round(stage.seconds, 1),
                       "before": round(report.before.score, 3), "after": round(report.after.score, 3),
                       "kept": report.kept, "kept_score": round(
                           report.after.score if report.kept == "optimized" else report.before.score, 3),
                       "changes": report.changes, "findings": report.findings}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
    print_table([*done.values(), *rows])


def _done(path: str | None) -> dict[tuple[str, str], dict[str, Any]]:
    if not path or not Path(path).exists():
        return {}
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(row.get("pattern", "refine"), row["optimizer"]): row for row in rows}


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'pattern':<8} {'optimizer':<14} {'loop runs':>9} {'LM calls':>9} {'tokens':>9} {'seconds':>8} "
          f"{'validation: baseline -> optimized':>34}  kept")
    for row in rows:
        if "refused" in row:
            print(f"{row['pattern']:<8} {row['optimizer']:<14} refused before any LM call: {row['refused'][:90]}")
            continue
        print(f"{row['pattern']:<8} {row['optimizer']:<14} {row['loop_runs']:>9} {row['lm_calls']:>9} "
              f"{row['tokens']:>9} {row['seconds']:>8} {row['before']:>24} -> {row['after']:<7}  {row['kept']}")


if __name__ == "__main__":
    main()

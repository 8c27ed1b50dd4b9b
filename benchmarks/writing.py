"""Writing loops on checkable tasks (`loops.optimize.writing`), on the embedded model.

    critic   the built-in critic, as the loop applies it, on the labeled drafts of a split: agreement with
             the truth of the programmatic checks; `--demos K` teaches it K labeled verdicts of the train
             split first (`loops.optimize.critic.balanced_demos`), the recipe of docs/optimize.md
    refine   `loops refine` on the tasks of a split, given each task's checks (`checks=` of the call, the
             public API; `--no-checks`: the loop as it was before checks, judged by its critic alone): the
             share of final drafts that pass every check; `--config` `defaults` (the loop as it is built,
             defaults by model) or `json` (the roles answering in JSON, untaught: the embedded defaults before
             loops.patterns.prose); `--samples`, `--critic` and `--max-iterations` set the loop's own options
    direct   `loops direct` on the same tasks, its final result checked the same way
    optimize refine optimized on the train tasks toward their checks (`loops.optimize.checks_metric`), then
             scored on train and on `--split`, before and after
    candidates  each kind of first draft (`CANDIDATES`: greedy with or without the worked examples, seeded
             samples with or without them), one creator call each, checked on its own: which kind passes
             which task (what the refine defaults' draws are chosen by, on train)

`--served` runs the loops against llama-cpp-python's server on loopback (the embedded GGUF, `--model
openai/smollm2 --api-base ...`), through the same code path, instead of in-process.

Each judged draft or run is appended to `--out` as a JSON line as it ends, and a rerun skips what the file
holds; `--summarize` prints the figures of files already written.

    .venv/bin/python -m benchmarks.writing critic --split heldout --out /tmp/critic-heldout.jsonl
    .venv/bin/python -m benchmarks.writing critic --split heldout --demos 8 --out /tmp/critic-heldout.jsonl
    .venv/bin/python -m benchmarks.writing refine --split heldout --out /tmp/refine-heldout.jsonl
    .venv/bin/python -m benchmarks.writing refine --split heldout --max-iterations 1 --out /tmp/refine-heldout.jsonl
    .venv/bin/python -m benchmarks.writing candidates --split train --out /tmp/candidates-train.jsonl
    .venv/bin/python -m benchmarks.writing --summarize /tmp/critic-heldout.jsonl /tmp/refine-heldout.jsonl

`critic --margins` also records, for each boolean field of the critic's answer, the model's own preference
between `true` and `false` where it wrote that field (log P(true) - log P(false), read off llama.cpp's
logits before any penalty or grammar), and the summary prints how well each margin separates good drafts
from bad ones (ROC AUC, 0.5 = no signal) and the best agreement any threshold on it reaches: whether a
threshold fitted on train could teach the critic what its sampled verdict does not show.

`--code` names the code that ran in the records (e.g. the commit of a checkout run with PYTHONPATH), so
that a measurement of an older version of the loops can sit beside the current one.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def _given_draft(requirements: str, context: str, iteration: int) -> str:
    return context


_VERDICT_FIELDS = ("accuracy_passed", "completeness_passed", "quality_passed", "approved")


class _Margins:
    """The embedded engine, keeping each request and its answer so that the critic's margins can be read."""

    def __init__(self) -> None:
        from loops.lm.embedded import LlamaEngine

        class Recording(LlamaEngine):
            def complete(engine, request: Any) -> Any:
                response = super().complete(request)
                self.last = (request, response.message.text)
                return response

        self.engine, self.last = Recording(), None

    def lm(self) -> Any:
        import dspy

        from loops.lm.embedded import MODEL, AsyncLlamaEngine

        return dspy.LM(MODEL, engine=self.engine, async_engine=AsyncLlamaEngine(self.engine), temperature=0.0,
                       max_tokens=512, cache=False)

    def of_last(self) -> dict[str, float | None]:
        """log P(true) - log P(false) at each verdict field of the last answer, the prompt and the answer up
        to the field fed back to the model."""
        import re

        import numpy as np
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        from loops.lm import embedded

        llama = embedded._shared_model()
        request, answer = self.last
        # The prompt as llama.cpp renders it for a chat completion: the model's own template and special tokens.
        formatter = Jinja2ChatFormatter(llama.metadata["tokenizer.chat_template"],
                                        eos_token=llama._model.token_get_text(llama.token_eos()),
                                        bos_token=llama._model.token_get_text(llama.token_bos()))
        prompt = formatter(messages=embedded._llama_messages(request)).prompt
        ids = {word: [llama.tokenize(spelling.encode(), add_bos=False, special=True)[0]
                      for spelling in (word, " " + word)] for word in ("true", "false")}
        margins: dict[str, float | None] = {}
        with embedded._generation_lock:
            for field in _VERDICT_FIELDS:
                found = re.search(rf'"{field}"\s*:\s*', answer)
                if found is None:
                    margins[field] = None
                    continue
                tokens = llama.tokenize((prompt + answer[:found.end()]).encode(), add_bos=False, special=True)
                # The model's context still holds the prompt and the answer: feed only what differs (at least
                # the last token, whose logits are read).
                kept = llama.longest_token_prefix(llama.input_ids[:llama.n_tokens], tokens[:-1])
                llama.n_tokens = kept
                llama.eval(tokens[kept:])
                logits = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(llama.n_vocab(),))
                margins[field] = round(float(np.logaddexp.reduce(logits[ids["true"]])
                                             - np.logaddexp.reduce(logits[ids["false"]])), 4)
        return margins


def critic_records(split: str, demos: int, done: set[str], margins: _Margins | None = None) -> Any:
    """The critic's verdict on each labeled draft of `split`, as the loop acts on it (one iteration, the
    draft handed on by the creator)."""
    from loops import CreatorCriticIterator
    from loops.optimize import writing

    judge = CreatorCriticIterator(creator=_given_draft, max_iterations=1)
    if demos:
        from loops.optimize.critic import balanced_demos

        judge.critic.demos = balanced_demos("train", demos)
    for example in writing.critic_examples(split):
        if f"{example.task_id}|{example.draft}" in done:
            continue
        started = time.monotonic()
        result = judge(requirements=example.requirements, context=example.draft)
        verdict = (result.best_attempt or {}).get("verdict") or {}
        yield f"{example.task_id}|{example.draft}", {
            "task_id": example.task_id, "truth": bool(example.approved), "approved": bool(result.success),
            "agrees": bool(result.success) == bool(example.approved),
            "said": {key: verdict.get(key) for key in _VERDICT_FIELDS},
            **({"margins": margins.of_last()} if margins is not None and margins.last is not None else {}),
            "warnings": list(result.warnings), "seconds": round(time.monotonic() - started, 1)}
        if margins is not None:
            margins.last = None


# The kinds of first draft `candidates` compares (each one creator call, as `loops.patterns.code.Draw`): greedy with or
# without the worked examples (loops.patterns.prose.WORKED_DRAFTS), without the repeat penalty, and seeded samples.
def _candidates() -> dict[str, Any]:
    from loops.patterns.code import Draw

    every = (0, 1, 2)
    kinds = {"greedy+examples": Draw(examples=every), "greedy": Draw(),
             "greedy+examples+no-penalty": Draw(examples=every, frequency_penalty=0.0)}
    for seed in range(1, 5):
        kinds[f"sample{seed}+examples"] = Draw(sampled=True, seed=seed, examples=every)
        kinds[f"sample{seed}"] = Draw(sampled=True, seed=seed)
    return kinds


def _loop_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {} if args.config == "defaults" else {"plain_text": False, "examples": False}
    for name in ("max_iterations", "samples", "critic"):
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    if args.served:  # a served model gets the capable-model defaults; the small one writes as the embedded one
        options.setdefault("plain_text", True)
        options.setdefault("examples", True)
        if not args.no_checks:
            options.setdefault("critic", "checks")
            options.setdefault("samples", 6)
    return options


def loop_records(kind: str, split: str, args: argparse.Namespace, done: set[str]) -> Any:
    """Each task of `split` run through `refine` or `direct`, its final text checked."""
    from loops import CreatorCriticIterator, DirectorExecutorEvaluatorController
    from loops.optimize import writing

    options = _loop_options(args)
    if kind == "direct":
        options.pop("samples", None)
        if "critic" in options:
            options["evaluator"] = options.pop("critic")
    loop = CreatorCriticIterator(**options) if kind == "refine" else DirectorExecutorEvaluatorController(**options)
    for task in writing.tasks(split)[:args.limit]:
        if task.id in done:
            continue
        started = time.monotonic()
        checks = {} if args.no_checks else {"checks": list(task.checks)}
        result = loop(requirements=task.requirements, **checks) if kind == "refine" else loop(
            initial_input=task.requirements, **checks)
        check = writing.check(task, None if result.final is None else str(result.final))
        steps = [step for step in result.trace if step.outputs and (
            step.role.split(".")[0] in ("creator", "iterator", "executor"))]
        texts = [step.outputs.get("draft") or step.outputs.get("improved_draft") or step.outputs.get("result")
                 for step in steps]
        passing = [step for step, text in zip(steps, texts, strict=True) if writing.check(task, text).passed]
        yield task.id, {
            "task_id": task.id, "passes": check.passed, "failures": check.failures, "success": bool(result.success),
            "final": None if result.final is None else str(result.final), "texts": texts,
            "texts_pass": [writing.check(task, text).passed for text in texts], "iterations": result.iterations,
            "first_pass": None if not passing else f"{passing[0].role}#{passing[0].iteration}",
            "lm_calls": result.lm_calls, "warnings": list(result.warnings),
            "seconds": round(time.monotonic() - started, 1)}


def fit_and_selection(train: list, optimizer: str) -> tuple[list, list]:
    """What an optimizer fits on and what it selects its candidates on, both from `train`: for one that selects
    on a validation set, a seeded third of `train` apart; for the others, all of it (they never read the second)."""
    from loops.optimize import OPTIMIZERS

    if not OPTIMIZERS[optimizer].uses_valset:
        return train, train
    apart = set(random.Random(0).sample(range(len(train)), len(train) // 3))
    return ([example for index, example in enumerate(train) if index not in apart],
            [example for index, example in enumerate(train) if index in apart])


def optimize_records(args: argparse.Namespace, done: set[str]) -> Any:
    """refine optimized on the train tasks toward their checks (`checks_metric`, each example's own checks), with
    `--optimizer`; the baseline and the kept program scored on train and on `--split` (held-out).

    The optimizer never sees `--split`: one that selects among its candidates on a validation set (random
    search, MIPRO, GEPA) gets a seeded third of the train tasks for it and fits on the rest."""
    import loops.optimize
    from loops import CreatorCriticIterator
    from loops.optimize import checks_metric
    from loops.optimize.writing import refine_examples

    if "optimize" in done:
        return
    started = time.monotonic()
    baseline = CreatorCriticIterator(**_loop_options(args))
    train, scored = refine_examples("train"), refine_examples(args.split)
    fit, selection = fit_and_selection(train, args.optimizer)
    metric = checks_metric()
    kept, report = loops.optimize.run(baseline, fit, selection, metric, optimizer=args.optimizer, progress=False,
                                      keep="optimized")
    scores = {name: [loops.optimize.evaluate(program, examples, metric, progress=False)[0].score
                     for program in (baseline, kept)]
              for name, examples in (("train", train), ("scored", scored))}
    yield "optimize", {"optimizer": args.optimizer, **scores, "changes": report.changes,
                       "lm_calls": report.lm_calls, "seconds": round(time.monotonic() - started, 1)}


def candidate_records(split: str, done: set[str]) -> Any:
    """Each kind of first draft (`_candidates`) of each task of `split`, checked on its own."""
    from loops import CreatorCriticIterator
    from loops.optimize import writing

    for name, draw in _candidates().items():
        loop = CreatorCriticIterator(max_iterations=1, critic="checks", draws=[draw])
        for task in writing.tasks(split):
            if f"{task.id}|{name}" in done:
                continue
            started = time.monotonic()
            result = loop(requirements=task.requirements, checks=list(task.checks))
            check = writing.check(task, None if result.final is None else str(result.final))
            yield f"{task.id}|{name}", {"task_id": task.id, "kind": name, "passes": check.passed,
                                        "failures": check.failures, "final": result.final, "lm_calls": result.lm_calls,
                                        "seconds": round(time.monotonic() - started, 1)}


def run(args: argparse.Namespace) -> None:
    import contextlib

    import dspy

    from loops.lm import local_lm, resolve

    label = _label(args)
    out = Path(args.out)
    done = {record["key"] for record in _read([out]) if record["label"] == label and record.get("code") == args.code}
    margins = _Margins() if args.margins else None
    if args.command == "critic":
        records = critic_records(args.split, args.demos, done, margins)
    elif args.command == "candidates":
        records = candidate_records(args.split, done)
    elif args.command == "optimize":
        records = optimize_records(args, done)
    else:
        records = loop_records(args.command, args.split, args, done)
    out.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if args.served:
            from benchmarks.parse_rate import SERVED_MODEL, llama_server

            base_url = stack.enter_context(llama_server())
            # Uncached like the embedded model: DSPy's cache would answer a rerun without asking the server.
            lm = resolve(f"openai/{SERVED_MODEL}", api_base=base_url, temperature=0.0, max_tokens=512).copy(cache=False)
        else:
            lm = margins.lm() if margins else local_lm()
        stack.enter_context(dspy.context(lm=lm))
        handle = stack.enter_context(out.open("a", encoding="utf-8"))
        for key, record in records:
            handle.write(json.dumps({"label": label, "key": key, "code": args.code, **record}, default=str) + "\n")
            handle.flush()
            print(f"[{label}] {key[:60]!r}: {record.get('agrees', record.get('passes'))} {record['seconds']} s",
                  file=sys.stderr, flush=True)
    summarize([out])


def _label(args: argparse.Namespace) -> str:
    served = "/served" if args.served else ""
    if args.command == "critic":
        return f"critic/{args.split}/demos={args.demos}{'/margins' if args.margins else ''}"
    if args.command == "candidates":
        return f"candidates/{args.split}{served}"
    if args.command == "optimize":
        options = "".join(f"/{name}={getattr(args, name)}" for name in ("max_iterations", "samples")
                          if getattr(args, name) is not None)
        return f"optimize/{args.optimizer}/train+{args.split}{options}{served}"
    options = "".join(f"/{name}={getattr(args, name)}" for name in ("max_iterations", "samples", "critic")
                      if getattr(args, name) is not None)
    return f"{args.command}/{args.split}/{args.config}{options}{'/no-checks' if args.no_checks else ''}{served}"


def _read(paths: list[Path]) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        if path.exists():
            records += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return records


def summarize(paths: list[Path]) -> None:
    """Per label (and code): agreement of the critic, or the share of final texts that pass."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = defaultdict(list)
    for record in {(record["label"], record.get("code"), record["key"]): record for record in _read(paths)}.values():
        groups[(record["label"], record.get("code"))].append(record)
    for (label, code), records in groups.items():
        seconds = sum(record["seconds"] for record in records)
        where = f" [{code}]" if code else ""
        if label.startswith("critic/"):
            agree = sum(record["agrees"] for record in records)
            approved = sum(record["approved"] for record in records)
            truth = sum(record["truth"] for record in records)
            print(f"{label}{where}: agreement {agree}/{len(records)} = {agree / len(records):.1%}; approved "
                  f"{approved}, truly good {truth}; {seconds:.0f} s")
            _summarize_margins(records)
        elif label.startswith("candidates/"):
            _summarize_candidates(label, where, records)
        elif label.startswith("optimize/"):
            for record in records:
                print(f"{label}{where}: checks_metric on train {record['train'][0]:.3f} -> {record['train'][1]:.3f}, "
                      f"on the scored split {record['scored'][0]:.3f} -> {record['scored'][1]:.3f}; "
                      f"{record['lm_calls']} LM calls; {record['seconds']:.0f} s; changes {record['changes']}")
        else:
            passed = sum(record["passes"] for record in records)
            calls = sum(record["lm_calls"] for record in records)
            # The library never edits a draft: every final text is one a writing role wrote, word for word.
            written = sum(record["final"] is None or record["final"] in record["texts"] for record in records)
            print(f"{label}{where}: final text passes {passed}/{len(records)} = {passed / len(records):.1%}; "
                  f"{calls} LM calls; {seconds:.0f} s; final text is a writing role's own {written}/{len(records)}")


def _summarize_candidates(label: str, where: str, records: list[dict[str, Any]]) -> None:
    """Per kind of first draft: the tasks it passes, and the tasks any of the kinds before it in the list passed."""
    kinds: dict[str, set[str]] = defaultdict(set)
    tasks = {record["task_id"] for record in records}
    for record in records:
        kinds[record["kind"]] |= {record["task_id"]} if record["passes"] else set()
    print(f"{label}{where}: {len(tasks)} tasks")
    union: set[str] = set()
    for kind, passed in kinds.items():
        new = passed - union
        union |= passed
        print(f"  {kind}: passes {len(passed)}; new {len(new)}; any so far {len(union)}")


def _summarize_margins(records: list[dict[str, Any]]) -> None:
    scored = [record for record in records if record.get("margins")]
    for field in _VERDICT_FIELDS if scored else ():
        pairs = [(record["margins"][field], record["truth"]) for record in scored
                 if record["margins"][field] is not None]
        good = [margin for margin, truth in pairs if truth]
        bad = [margin for margin, truth in pairs if not truth]
        if not good or not bad:
            continue
        auc = sum((g > b) + 0.5 * (g == b) for g in good for b in bad) / (len(good) * len(bad))
        best = max(sum((margin > threshold) == truth for margin, truth in pairs)
                   for threshold in [float("-inf"), *(margin for margin, _ in pairs)])
        print(f"  margin of {field}: ROC AUC {auc:.3f}; the best threshold agrees on {best}/{len(pairs)} = "
              f"{best / len(pairs):.1%} ({len(good)} good, {len(bad)} bad)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.writing", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=("critic", "refine", "direct", "candidates", "optimize"))
    parser.add_argument("--optimizer", default="bootstrap", help="optimize: the optimizer (loops.optimize.run)")
    parser.add_argument("--split", default="train", choices=("train", "heldout"))
    parser.add_argument("--demos", type=int, default=0, help="critic: labeled verdicts of the train split shown")
    parser.add_argument("--margins", action="store_true",
                        help="critic: also record the model's log P(true) - log P(false) at each verdict field")
    parser.add_argument("--config", default="defaults", choices=("defaults", "json"),
                        help="refine/direct: the loop as built (defaults by model), or its roles in JSON, untaught")
    parser.add_argument("--max-iterations", type=int, default=None, help="refine/direct: the loop's iterations")
    parser.add_argument("--samples", type=int, default=None, help="refine: candidates per iteration [by model]")
    parser.add_argument("--critic", choices=("checks", "llm"), default=None,
                        help="refine: who approves once the checks hold (direct: the evaluator) [by model]")
    parser.add_argument("--no-checks", action="store_true", help="refine/direct: give the loop no checks (the "
                        "tasks' checks still score the final text)")
    parser.add_argument("--served", action="store_true", help="run against llama-cpp-python's server on loopback "
                        "(the embedded GGUF) instead of in-process")
    parser.add_argument("--limit", type=int, default=None, help="refine/direct: the first N tasks of the split only")
    parser.add_argument("--out", default="/tmp/writing.jsonl", help="JSON lines appended to; a rerun resumes")
    parser.add_argument("--code", default=None, help="a name for the code that ran, kept in the records")
    parser.add_argument("--summarize", nargs="+", metavar="JSONL", help="only print the figures of these files")
    args = parser.parse_args(argv)
    if args.summarize:
        summarize([Path(path) for path in args.summarize])
        return
    if args.command is None:
        parser.error("give a command (critic, refine, direct, candidates, optimize) or --summarize")
    run(args)


if __name__ == "__main__":
    main()

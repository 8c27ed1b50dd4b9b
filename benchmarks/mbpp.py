"""MBPP through the Execute–Validate–Controller loop, with the embedded SmolLM2-135M model.

Each task's prompt (task text plus its test asserts, as in the MBPP paper) goes to
`ExecuteValidateController`; the loop writes `solution.py` into a per-task temporary workspace that
already holds `test_solution.py` (one pytest test per assert) and validates with pytest.

    .venv/bin/python -m benchmarks.mbpp --configs single --out /tmp/mbpp-single.jsonl
    .venv/bin/python -m benchmarks.mbpp --limit 3 --configs single,repair --out /tmp/mbpp-quick.jsonl
    .venv/bin/python -m benchmarks.mbpp --summarize /tmp/mbpp-single.jsonl /tmp/mbpp-repair.jsonl
    .venv/bin/python -m benchmarks.mbpp --configs file:/tmp/fix.draws.json --out /tmp/mbpp-draws.jsonl

A pass whose code only returns the tested values (`if n == 10: return 16796`:
`loops.patterns.code.hardcoded_asserts`) is not counted as solved: its record says `hardcoded` (the asserts so
answered) and the summary counts such passes apart. `file:PATH` runs a saved program (`loops.load`,
e.g. the `draws` optimizer's) with the benchmark's workspace, validator and budget.

Records are appended to `--out` as JSON lines and flushed after every task, so a partial run can be
summarised; `--resume` skips the (config, task) pairs already in `--out`. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loops.optimize.datasets import MBPP_TEST_COMMAND, MBPP_TEST_FILE, mbpp_prompt, mbpp_test_file

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT / ".." / "shared" / "data" / "mbpp" / "sanitized-mbpp-dev.jsonl"
TEST_FILE = MBPP_TEST_FILE
TEST_COMMAND = MBPP_TEST_COMMAND
# Generous: on a loaded machine a tight limit would fail code that passes (a timeout depends on load).
TEST_TIMEOUT_S = 30
# solution.py is rewritten within seconds; .pyc files are validated by whole-second mtime and size,
# so a stale cache could otherwise be imported. Keep the workspaces free of bytecode.
TEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}

CONFIGS: dict[str, dict[str, Any]] = {
    "single": {
        "about": "one attempt (max_iterations=1, samples=1, tests_controller so no analyst call after it)",
        "options": {"max_iterations": 1, "samples": 1, "controller": "tests"},
    },
    "defaults": {
        "about": "what `loops fix` does on the model: policy, samples, analyst and max_iterations by "
                 "loops.patterns.code.code_loop_defaults",
        "options": {},
    },
    "repair": {
        "about": "up to 4 attempts, policy=repair, the LLM-analyst controller",
        "options": {"max_iterations": 4, "policy": "repair", "samples": 1, "analyst": True},
    },
    "fresh": {
        "about": "up to 4 attempts, policy=fresh (T=0.7 after the first), tests_controller",
        "options": {"max_iterations": 4, "policy": "fresh", "samples": 1, "controller": "tests"},
    },
    "auto": {
        "about": "up to 4 attempts, policy=auto (repair until the executor repeats itself, then fresh), LLM analyst",
        "options": {"max_iterations": 4, "policy": "auto", "samples": 1, "analyst": True},
    },
    "repair-rules": {
        "about": "up to 4 attempts, policy=repair, tests_controller (failure digest, no analyst LLM)",
        "options": {"max_iterations": 4, "policy": "repair", "samples": 1, "controller": "tests"},
    },
}
# `sNiM` (e.g. s4i3): the embedded defaults with samples=N and max_iterations=M, for tuning.
_TUNED = re.compile(r"s(\d+)i(\d+)$")
# `passk`: --k independent samples per task at --temperature (default PASSK_TEMPERATURE, the loop's
# FRESH_TEMPERATURE), each tested; for the pass@k curve.
PASSK_TEMPERATURE = 0.7


def config_options(config: str) -> dict[str, Any]:
    if config.startswith("file:"):
        return {}
    tuned = _TUNED.match(config)
    if tuned:
        return {"samples": int(tuned.group(1)), "max_iterations": int(tuned.group(2))}
    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}")
    return dict(CONFIGS[config]["options"])


CATEGORIES = ("timeout", "SyntaxError", "NameError", "RecursionError", "TypeError", "AssertionError", "other")
_EXCEPTION = re.compile(r"\b([A-Z]\w*(?:Error|Exception))\b")
_FEEDBACK_MARK = "Your previous attempt failed:\n"


# --- tasks ----------------------------------------------------------------------------------------


def load_tasks(path: str | os.PathLike[str], split: str, limit: int | None = None,
               task_ids: set[int] | None = None) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        tasks = [json.loads(line) for line in handle if line.strip()]
    tasks = [task for task in tasks if split == "all" or task["split"] == split]
    if task_ids:
        tasks = [task for task in tasks if task["task_id"] in task_ids]
    return tasks[:limit] if limit else tasks


build_prompt = mbpp_prompt  # the dataset's own rendering (loops.optimize.datasets), one copy of it
build_test_file = mbpp_test_file


# --- reading a run ---------------------------------------------------------------------------------


def failure_kinds(validation: Any) -> list[str]:
    """Exception names in a failed test run's output, in order of first appearance."""
    output = f"{validation.stdout}\n{validation.stderr}"
    return list(dict.fromkeys(_EXCEPTION.findall(output)))


def failure_category(validation: Any) -> str | None:
    """The main reason a test run failed; None when it passed."""
    if validation is None:
        return "no_attempt"
    if validation.ok:
        return None
    if validation.timed_out:
        return "timeout"
    kinds = set(failure_kinds(validation))
    if kinds & {"SyntaxError", "IndentationError", "TabError"}:
        return "SyntaxError"
    for kind in ("NameError", "RecursionError", "TypeError", "AssertionError"):
        if kind in kinds:
            return kind
    return "other"


def _attempts(trace: list[Any], extract_code) -> list[dict[str, Any]]:
    """One entry per candidate (an executor call): its answer, its test run, what the loop fed back."""
    entries: list[dict[str, Any]] = []
    for step in trace:
        if step.role.startswith("executor"):
            entry = {"iteration": step.iteration, "role": step.role, "executor_error": step.error,
                     "executor_attempts": step.attempts, "note": step.note}
            task = (step.inputs or {}).get("task", "")
            if not isinstance(task, str):  # a custom executor's input
                task = str(task)
            entry["feedback_in"] = task.split(_FEEDBACK_MARK, 1)[1] if _FEEDBACK_MARK in task else None
            if step.outputs is not None:
                raw = step.outputs.get("code") or ""
                entry["raw_code"] = raw
                entry["code"] = extract_code(raw)
                entry["notes"] = step.outputs.get("notes")
            entries.append(entry)
        elif step.role == "validator" and step.outputs is not None and entries:
            validation = step.outputs.get("result")
            entry = entries[-1]
            entry["_validation"] = validation
            entry["ok"] = validation.ok
            entry["tests_passed"] = validation.passed
            entry["tests_failed"] = validation.failed
            entry["category"] = failure_category(validation)
            entry["kinds"] = failure_kinds(validation) if not validation.ok else []
        elif step.role == "analyst" and entries:
            entry = entries[-1]
            entry["analyst_error"] = step.error
            if step.outputs is not None:
                entry["analyst"] = {key: step.outputs.get(key) for key in ("success", "analysis", "next_input")}
    return entries


def check_code(code: str, task: dict[str, Any]) -> Any:
    """Run the task's tests on `code` in a scratch workspace; returns the ValidationResult."""
    from loops import PytestValidator, Workspace

    with Workspace() as workspace:
        workspace.write({TEST_FILE: build_test_file(task), "solution.py": code})
        return PytestValidator(workspace=workspace, timeout_s=TEST_TIMEOUT_S, env=TEST_ENV)(TEST_COMMAND)


def make_module(config: str, workspace: Any, validator: Any, task_timeout_s: float | None = None) -> Any:
    import dspy

    from loops import Budget, ExecuteValidateController, tests_controller
    from loops.patterns.code import code_loop_defaults

    options = config_options(config)
    if options.pop("controller", None) == "tests":
        options["controller"] = tests_controller
    # `loops fix` takes max_iterations from the same rule as the module's other defaults.
    iterations = options.pop("max_iterations", None) or code_loop_defaults(dspy.settings.lm).max_iterations
    # Budget's default timeout_s (300 s) would make the result depend on how busy the machine is:
    # by default a task gets all its iterations, however long they take (max_tokens bounds each call).
    if config.startswith("file:"):
        from loops import load

        saved = load(config.removeprefix("file:"), workspace=workspace, validator=validator)
        saved.budget = saved.budget.override(timeout_s=task_timeout_s)
        return saved
    return ExecuteValidateController(workspace=workspace, validator=validator,
                                     budget=Budget(max_iterations=iterations, timeout_s=task_timeout_s), **options)


def first_answers(task: dict[str, Any], calls: list[tuple[dict[str, Any], Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """Answers to the loop's first request (the prompt and the interface read from the tests), one
    per (config, demos) in `calls`, each extracted, aliased to the tests' names and tested."""
    import dspy

    from loops import Workspace
    from loops.patterns.code import align_names, extract_code, hardcoded_asserts, read_interface
    from loops.patterns.execute_validate import PLAIN_TEXT
    from loops.signatures.execute_validate import ExecutorSignature
    from loops.signatures.results import CodeRequest

    with Workspace() as workspace:
        workspace.write({TEST_FILE: build_test_file(task)})
        interface = read_interface(workspace.path, TEST_COMMAND, "solution.py")
    request = CodeRequest(prompt=build_prompt(task), interface=interface.describe("solution.py"),
                          expected_names=interface.names)
    executor = dspy.Predict(ExecutorSignature)
    answers = []
    for config, demos in calls:
        with dspy.context(adapter=PLAIN_TEXT):
            answer = executor(task=request.task(), target_file="solution.py", file_context="",
                              history=dspy.History(messages=[]), config=dict(config or {}), demos=list(demos or ()))
        code, aliases = align_names(extract_code(answer.code or ""), request.expected_names)
        check = check_code(code, task)
        hardcoded = hardcoded_asserts(code, build_test_file(task)) if check.ok else []
        answers.append({"passed": check.ok and not hardcoded, "hardcoded": hardcoded,
                        "category": "hardcoded" if hardcoded else failure_category(check), "aliases": aliases,
                        "code": code})
    return request, answers


def sample_task(task: dict[str, Any], k: int, temperature: float = PASSK_TEMPERATURE) -> dict[str, Any]:
    """`k` independent answers at `temperature` to the loop's first request, each tested."""
    started = time.monotonic()
    request, samples = first_answers(
        task, [({"temperature": temperature, "rollout_id": rollout}, None) for rollout in range(1, k + 1)])
    return {"config": "passk", "task_id": task["task_id"], "k": k, "temperature": temperature,
            "passed": any(sample["passed"] for sample in samples),
            "passes": sum(sample["passed"] for sample in samples), "lm_calls": k,
            "seconds": round(time.monotonic() - started, 2),
            "distinct_codes": len({sample["code"] for sample in samples}), "interface": request.interface,
            "samples": samples}


def candidate_task(task: dict[str, Any]) -> dict[str, Any]:
    """Each candidate of the embedded defaults' first iteration (`loops.patterns.execute_validate.draws`),
    drawn as the loop draws it but each tested on its own: which kind of candidate passes which task."""
    from loops.patterns.code import EMBEDDED_CODE_LOOP as DEFAULTS
    from loops.patterns.code import draws

    plan = draws(DEFAULTS.samples, DEFAULTS.examples, DEFAULTS.penalty_variants)
    started = time.monotonic()
    _, answers = first_answers(task, [draw.executor_call(number) for number, draw in enumerate(plan, 1)])
    for draw, answer in zip(plan, answers, strict=True):
        answer["kind"] = candidate_kind(draw)
    return {"config": "candidates", "task_id": task["task_id"], "passed": any(answer["passed"] for answer in answers),
            "lm_calls": len(plan), "seconds": round(time.monotonic() - started, 2), "candidates": answers}


def candidate_kind(draw: Any) -> str:
    """A draw's name in records and tables (`loops.optimize.draws.kind_name`): `greedy` or `sampled`, then
    `+examples` (all of them) or `+example3` (one, numbered from 1), `+frequency_penalty=0.2`."""
    from loops.optimize.draws import kind_name

    return kind_name(draw)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c passed (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def passk_curve(records: list[dict[str, Any]]) -> dict[int, float]:
    """Expected tasks solved with k samples, k = 1..n, summed over the tasks' records."""
    mine = [record for record in records if record["config"] == "passk" and "passes" in record]
    n = min((record["k"] for record in mine), default=0)
    return {k: sum(pass_at_k(record["k"], record["passes"], k) for record in mine) for k in range(1, n + 1)}


def run_task(config: str, task: dict[str, Any], task_timeout_s: float | None = None) -> dict[str, Any]:
    from loops import PytestValidator, Workspace
    from loops.patterns.code import code_of, extract_code, hardcoded_asserts

    with Workspace() as workspace:
        workspace.write({TEST_FILE: build_test_file(task)})
        validator = PytestValidator(workspace=workspace, timeout_s=TEST_TIMEOUT_S, env=TEST_ENV)
        module = make_module(config, workspace, validator, task_timeout_s)
        settings = {**module.settings(), "max_iterations": module.budget.max_iterations}
        started = time.monotonic()
        result = module(initial_input=build_prompt(task), test_command=TEST_COMMAND)
        seconds = time.monotonic() - started

    attempts = _attempts(result.trace, extract_code)
    validated = [entry for entry in attempts if "_validation" in entry]
    last = validated[-1]["_validation"] if validated else None
    first_pass = next((entry["iteration"] for entry in validated if entry["ok"]), None)
    hardcoded = hardcoded_asserts(code_of(result.final), build_test_file(task)) if result.success else []
    calls_by_role: Counter[str] = Counter()
    tokens_by_role: dict[str, Counter[str]] = {}
    for step in result.trace:
        calls_by_role[step.role] += step.lm_calls
        if step.tokens:
            tokens_by_role.setdefault(step.role, Counter()).update(step.tokens)
    record: dict[str, Any] = {
        "config": config,
        "task_id": task["task_id"],
        "settings": settings,
        "candidates": sum(1 for entry in attempts if "raw_code" in entry),
        "passed": bool(result.success) and not hardcoded,
        "hardcoded": hardcoded,
        "iterations": result.iterations,
        "stop_reason": result.stop_reason,
        "lm_calls": result.lm_calls,
        "lm_calls_by_role": {role: calls for role, calls in calls_by_role.items() if calls},
        "tokens_by_role": {role: dict(tokens) for role, tokens in tokens_by_role.items()},
        "seconds": round(seconds, 2),
        "first_pass_iteration": first_pass,
        "failure_category": ("hardcoded" if hardcoded else None) if result.success else failure_category(last),
        "failure_kinds": failure_kinds(last) if last is not None and not last.ok else [],
        "distinct_codes": len({entry.get("code") for entry in attempts if "code" in entry}),
        "warnings": list(result.warnings),
        # The loop aliases a rightly written function to the name the tests call (align_names).
        "aliases": getattr(result.final, "notes", {}).get("aliases", []) if result.success else [],
    }

    # What code extraction does: run the tests on the first answer as the model wrote it, too.
    first = next((entry for entry in attempts if "raw_code" in entry), None)
    if first is not None:
        raw_check = check_code(first["raw_code"], task)
        extracted_check = check_code(first["code"], task)
        record.update({
            "first_raw_passed": raw_check.ok,
            "first_extracted_passed": extracted_check.ok,
            "first_raw_category": failure_category(raw_check),
            "first_extracted_category": failure_category(extracted_check),
            "first_extraction_changed": first["raw_code"].strip() != first["code"].strip(),
        })
    else:
        record.update({"first_raw_passed": None, "first_extracted_passed": None, "first_raw_category": None,
                       "first_extracted_category": None, "first_extraction_changed": None})

    for entry in attempts:
        entry.pop("_validation", None)
    record["attempts"] = attempts
    return record


# --- running and summarising -----------------------------------------------------------------------


def read_records(paths: list[str]) -> list[dict[str, Any]]:
    """Records from JSON-lines files; a (config, task) pair recorded twice counts once (the last)."""
    latest: dict[tuple[str, Any], dict[str, Any]] = {}
    for path in paths:
        if not Path(path).exists():
            continue
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    latest[(record["config"], record.get("adapter"), record["task_id"])] = record
    return list(latest.values())


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for config in dict.fromkeys(_label(record) for record in records):
        mine = [record for record in records if _label(record) == config]
        passed = sum(record["passed"] for record in mine)
        failures = Counter(record.get("failure_category") for record in mine if not record["passed"])
        rows.append({
            "config": config,
            "tasks": len(mine),
            "passed": passed,
            "pass_rate": passed / len(mine) if mine else 0.0,
            "lm_calls": sum(record.get("lm_calls") or 0 for record in mine),
            "seconds": sum(record.get("seconds") or 0 for record in mine),
            "gained_after_first": sum(1 for record in mine
                                      if record["passed"] and (record.get("first_pass_iteration") or 1) > 1),
            "first_raw_passed": sum(1 for record in mine if record.get("first_raw_passed")),
            "first_extracted_passed": sum(1 for record in mine if record.get("first_extracted_passed")),
            "harness_errors": sum(1 for record in mine if record.get("harness_error")),
            "hardcoded": sorted(record["task_id"] for record in mine if record.get("hardcoded")),
            "failures": {category: failures[category]
                         for category in (*CATEGORIES, "hardcoded", "no_attempt", "harness_error")
                         if failures[category]},
        })
    return rows


def _label(record: dict[str, Any]) -> str:
    """A summary row per config, and per adapter when the records say which one they ran under."""
    return f"{record['config']}/{record['adapter']}" if record.get("adapter") else record["config"]


def print_summary(rows: list[dict[str, Any]], expected: int | None = None) -> None:
    headers = ["config", "tasks", "passed", "pass rate", "LM calls", "loop time", "gained it.2-4",
               "1st raw/extracted pass", "hard-coded passes (not counted)", "failure categories (final attempt)"]
    table_rows = []
    for row in rows:
        tasks = f"{row['tasks']}" + (f"/{expected} (partial)" if expected and row["tasks"] < expected else "")
        table_rows.append([
            row["config"], tasks, str(row["passed"]), f"{row['pass_rate']:.1%}", str(row["lm_calls"]),
            f"{row['seconds']:.0f}s", str(row["gained_after_first"]),
            f"{row['first_raw_passed']}/{row['first_extracted_passed']}",
            " ".join(map(str, row["hardcoded"])) or "none",
            ", ".join(f"{name} {count}" for name, count in row["failures"].items()),
        ])
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print("\t".join(headers))
        for cells in table_rows:
            print("\t".join(cells))
        return
    table = Table(title="MBPP (sanitized) with ExecuteValidateController + SmolLM2-135M")
    for header in headers:
        table.add_column(header, overflow="fold")
    for cells in table_rows:
        table.add_row(*cells)
    Console(width=160).print(table)


def run(args: argparse.Namespace) -> None:
    import dspy

    from loops.lm import local_lm

    # "model": no adapter in the context, so the model's own rule applies (its profile), as in the CLI.
    adapters = {"model": lambda: None, "json": dspy.JSONAdapter}

    configs = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in configs
               if name not in ("passk", "candidates") and name not in CONFIGS and not _TUNED.match(name)
               and not name.startswith("file:")]
    if unknown:
        sys.exit(f"unknown config(s) {unknown}; choose from {', '.join(CONFIGS)}, passk, candidates, sNiM "
                 "(the embedded defaults with samples=N, max_iterations=M, e.g. s5i2) or file:PATH (a saved program)")
    task_ids = {int(value) for value in args.task_ids.split(",")} if args.task_ids else None
    tasks = load_tasks(args.data, args.split, args.limit, task_ids)
    done = ({(record["config"], record["task_id"]) for record in read_records([args.out])
             if record.get("adapter", args.adapter) == args.adapter} if args.resume else set())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(args.out, "a", encoding="utf-8") as out, \
            dspy.context(lm=local_lm(), adapter=adapters[args.adapter]()):
        for config in configs:
            for number, task in enumerate(tasks, 1):
                if (config, task["task_id"]) in done:
                    continue
                try:
                    if config == "passk":
                        record = {**sample_task(task, args.k, args.temperature), "adapter": args.adapter}
                    elif config == "candidates":
                        record = {**candidate_task(task), "adapter": args.adapter}
                    else:
                        record = {**run_task(config, task, args.task_timeout), "adapter": args.adapter}
                except Exception as exc:  # keep going: one broken task must not end the benchmark
                    record = {"config": config, "task_id": task["task_id"], "passed": False,
                              "failure_category": "harness_error", "harness_error": f"{type(exc).__name__}: {exc}"}
                out.write(json.dumps(record, default=str) + "\n")
                out.flush()
                print(f"[{config} {number}/{len(tasks)}] task {task['task_id']}: "
                      f"{'PASS' if record['passed'] else 'fail'} it={record.get('iterations')} "
                      f"calls={record.get('lm_calls')} {record.get('seconds')}s "
                      f"{record.get('failure_category') or ''} {record.get('harness_error') or ''}",
                      file=sys.stderr, flush=True)
    print(f"wall time {time.monotonic() - started:.0f}s", file=sys.stderr)
    records = [record for record in read_records([args.out]) if record["config"] in configs
               and record["task_id"] in {task["task_id"] for task in tasks}]
    print_summary(summarize(records), expected=len(tasks))
    print_curve(records)
    print_candidates(records)


def print_curve(records: list[dict[str, Any]]) -> None:
    """The pass@k curve of the `passk` records, if any: expected tasks solved with k samples."""
    curve = passk_curve(records)
    if not curve:
        return
    mine = [record for record in records if record["config"] == "passk" and "passes" in record]
    tasks = len(mine)
    temperatures = ", ".join(str(value) for value in sorted({record.get("temperature") for record in mine}))
    print(f"pass@k over {tasks} tasks at temperature {temperatures} (unbiased estimator):")
    for k, solved in curve.items():
        print(f"  k={k}: {solved:.2f} tasks ({solved / tasks:.1%})")


def print_candidates(records: list[dict[str, Any]]) -> None:
    """The tasks each kind of candidate passes, of the `candidates` records, if any."""
    mine = [record for record in records if record["config"] == "candidates" and "candidates" in record]
    if not mine:
        return
    passed: dict[str, list[int]] = {}
    for record in mine:
        for answer in record["candidates"]:
            passed.setdefault(answer["kind"], [])
            if answer["passed"]:
                passed[answer["kind"]].append(record["task_id"])
    print(f"candidates of the first iteration, each tested on its own, over {len(mine)} tasks:")
    for kind, tasks in passed.items():
        print(f"  {kind}: {len(tasks)} {sorted(tasks)}")
    union = sorted(record["task_id"] for record in mine if record["passed"])
    print(f"  any: {len(union)} {union}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mbpp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="sanitized MBPP JSON lines (default: %(default)s)")
    parser.add_argument("--split", default="validation", help="train | validation | prompt | all")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks of the split")
    parser.add_argument("--task-ids", default=None, help="comma list of task ids to run")
    parser.add_argument("--configs", default="single",
                        help=f"comma list of {', '.join(CONFIGS)}, passk (the pass@k samples), candidates "
                             "(each kind of candidate of the embedded defaults tested on its own) or sNiM "
                             "(the embedded defaults with samples=N, max_iterations=M)")
    parser.add_argument("--k", type=int, default=8, help="samples per task of the passk config (default: 8)")
    parser.add_argument("--temperature", type=float, default=PASSK_TEMPERATURE,
                        help="sampling temperature of the passk config (default: %(default)s)")
    parser.add_argument("--out", default="/tmp/mbpp.jsonl", help="JSON-lines file records are appended to")
    parser.add_argument("--adapter", choices=("model", "json"), default="model",
                        help="the context adapter (the executor always answers in plain text): model = the one "
                             "the LM brings (its profile: CompactJSONAdapter for the embedded model), "
                             "json = dspy.JSONAdapter")
    parser.add_argument("--task-timeout", type=float, default=None,
                        help="wall-clock limit of one task's loop in seconds (default: none)")
    parser.add_argument("--resume", action="store_true", help="skip (config, task) pairs already in --out")
    parser.add_argument("--summarize", nargs="+", metavar="JSONL", help="only print the summary of these files")
    parser.add_argument("--expected", type=int, default=None, help="with --summarize: tasks in a full run")
    args = parser.parse_args(argv)
    if args.summarize:
        records = read_records(args.summarize)
        print_summary(summarize(records), expected=args.expected)
        print_curve(records)
        print_candidates(records)
        return
    run(args)


if __name__ == "__main__":
    main()

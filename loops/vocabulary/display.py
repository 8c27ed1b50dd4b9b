"""How a loop's result and its trace steps show themselves: a few lines of text in a terminal or a
`repr`, HTML in Jupyter, and a few words per step for live tables (`step_outcome`).

It sits below the runtime (it needs nothing of it: a step and a result are read by their fields), so
the runtime's `LoopResult` and `Step` render through it without importing any display code of a
notebook's. Everything here needs only the standard library; `loops.notebook` adds the DataFrame and
the plot.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

from loops.errors import ContractError
from loops.signatures.creator_critic import CRITERIA
from loops.signatures.results import ValidationResult
from loops.vocabulary.contracts import as_validation, outcome_passed, verdict_approved

__all__ = [
    "dsl_error_html",
    "history_html",
    "lm_calls_text",
    "result_html",
    "result_text",
    "step_html",
    "step_judgement",
    "checks_held",
    "step_outcome",
    "step_role",
    "step_verdict",
]

_SHORT = 100  # characters of a value shown in a summary before it is cut
_WRITTEN = 48  # characters of a draft shown as a writing role's outcome
_CRITERIA = tuple(f"{name}_passed" for name in CRITERIA)
_STYLE = ("<style>.loops-result table{border-collapse:collapse;font-size:90%}"
          ".loops-result td,.loops-result th{padding:2px 8px;text-align:left;vertical-align:top}"
          ".loops-result pre{white-space:pre-wrap;margin:0}</style>")


# --- what one step did -----------------------------------------------------------------------------------


def step_judgement(step: Any) -> tuple[str, float] | None:
    """How a judging step scored the work, as (what was measured, a value from 0 to 1), or None for a
    step that judges nothing (a creator, an executor) or failed.

    A run of checks: the share held. The built-in critic: the share of its three criteria met (a custom
    critic: approved, 1 or 0); the validator: the share of tests passed (1 or 0 by exit code when it does
    not count tests); the evaluator: 1 for PASS, 0 for FAIL. Custom phases are read through their contracts
    (`loops.vocabulary.contracts`), so a validator's bool or exit code counts too."""
    if step.error or not step.outputs:
        return None
    outputs = step.outputs
    if _is_checks(step):
        return "checks held", outputs["held"] / outputs["total"] if outputs["total"] else float(outputs["passed"])
    if all(name in outputs for name in _CRITERIA):
        return "criteria met", sum(bool(outputs[name]) for name in _CRITERIA) / len(_CRITERIA)
    validation = _validation(step)
    if validation is not None:
        if validation.passed is not None and validation.failed is not None and validation.passed + validation.failed:
            return "tests passed", validation.passed / (validation.passed + validation.failed)
        return "tests passed", float(validation.ok)
    verdict = _verdict(step)
    if verdict is not None:
        return verdict[0], float(verdict[1])
    return None


def step_verdict(step: Any) -> bool | None:
    """Whether a judging step passed the work as the loop took it: the critic's approval, the tests' pass, the
    evaluator's PASS, overruled where the loop noted it did (the junk floor, a verdict that contradicts itself);
    None for a step that judges nothing."""
    if step.error or not step.outputs or step_judgement(step) is None:
        return None
    if any(part.endswith(("not approved", "FAIL")) for part in (getattr(step, "note", None) or "").split("; ")):
        return False
    validation = _validation(step)
    if validation is not None:
        return validation.ok
    verdict = _verdict(step)
    if verdict is not None:
        return verdict[1]
    return step_judgement(step)[1] == 1.0


def checks_held(step: Any) -> float | None:
    """The share of its checks a judging step found held, read from any of its outputs named for checks (a
    `{check: held}` mapping, or a list of booleans or of records with `held`, `passed` or `ok`); None when it
    reports none."""
    fields = _value(step)  # a phase's value (a custom critic's dict), else the role's fields
    for name, value in (fields.items() if isinstance(fields, Mapping) else ()):
        if "check" not in name.lower():
            continue
        items = list(value.values()) if isinstance(value, Mapping) else value if isinstance(value, list) else None
        held = [item if isinstance(item, bool) else _held(item) for item in items or ()]
        if held and all(isinstance(item, bool) for item in held):
            return sum(held) / len(held)
    return None


def _held(item: Any) -> bool | None:
    for key in ("held", "passed", "ok"):
        value = item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)
        if isinstance(value, bool):
            return value
    return None


def step_outcome(step: Any) -> str:
    """A few words on what the step came to: an error, checks held, a verdict, a test run, a decision, the start
    of a draft, or "ok"; then what the loop made of it, when it noted something (a verdict it overruled, code it
    did not test again)."""
    outcome = _outcome(step)
    note = getattr(step, "note", None)
    return f"{outcome}; {note}" if note else outcome


def _outcome(step: Any) -> str:
    if step.error:
        return f"error: {_cut(step.error, 60)}"
    outputs = step.outputs or {}
    if _is_checks(step):  # "2/3 checks", and what the first failed one says
        failed = outputs.get("failed") or []
        detail = f": {_cut(failed[0]['message'], 60)}" if failed else ""
        return f"{outputs['held']}/{outputs['total']} checks" + (" (junk)" if outputs.get("floor") else "") + detail
    if all(name in outputs for name in _CRITERIA) and "approved" in outputs:
        met = sum(bool(outputs[name]) for name in _CRITERIA)
        return f"{'approved' if outputs['approved'] else 'needs revision'} ({met}/{len(_CRITERIA)} criteria)"
    validation = _validation(step)
    if validation is not None:
        counts = f", {validation.passed} passed, {validation.failed} failed" if validation.passed is not None else ""
        return f"{'tests pass' if validation.ok else 'tests fail'} (exit {validation.exit_code}{counts})"
    verdict = _verdict(step)
    if verdict is not None:
        measure, good = verdict
        if measure == "critic approved":
            return "approved" if good else "needs revision"
        return "PASS" if good else "FAIL"
    if "action" in outputs:
        return f"decides: {outputs['action']}"
    written = outputs.get("draft", outputs.get("improved_draft"))
    if isinstance(written, str):  # a writing role's text: what the loop did is in it
        return f"wrote {_cut(' '.join(written.split()), _WRITTEN)!r}"
    if isinstance(outputs.get("success"), bool):
        return "judges: success" if outputs["success"] else "judges: failure"
    return "ok"


def step_role(step: Any) -> str:
    """The step's role, marked when a person answered it (`loops.running.person`)."""
    return f"{step.role} (a person)" if getattr(step, "human", False) else step.role


def lm_calls_text(result: Any) -> str:
    """A run's LM requests in a few words: those this process sent, and beside them the calls answered from a
    checkpoint's record (`replayed`) or from DSPy's cache (`cached`), when there were any."""
    extra = [f"{result.get(name)} {name}" for name in ("replayed", "cached") if result.get(name)]
    return f"{result.get('lm_calls')}" + (f" (+{', +'.join(extra)})" if extra else "")


def _is_checks(step: Any) -> bool:
    """Whether the step is a run of checks (`Run.check`): its outputs are a `CheckReport`'s."""
    outputs = step.outputs or {}
    return step.role == "checks" and "held" in outputs and "total" in outputs


def _value(step: Any) -> Any:
    """What the step returned: a phase's value (its outputs are {"result": value}), else the role's fields."""
    outputs = step.outputs or {}
    return outputs["result"] if set(outputs) == {"result"} else outputs


def _validation(step: Any) -> Any:
    """The step's test run as a `ValidationResult`, when it is one (the validator's, or a phase's that
    returned one), else None."""
    value = _value(step)
    if not (step.role == "validator" or isinstance(value, ValidationResult)):
        return None
    try:
        return as_validation(value)
    except ContractError:
        return None


def _verdict(step: Any) -> tuple[str, bool] | None:
    """An evaluator's PASS/FAIL or a critic's approval, as (what was measured, whether it passed)."""
    value = _value(step)
    try:
        if step.role == "evaluator" or (isinstance(value, Mapping) and "status" in value):
            return "evaluator passed", outcome_passed(value)
        if step.role == "critic":
            return "critic approved", verdict_approved(value)
    except (ContractError, TypeError, ValueError):
        return None
    return None


# --- text and HTML ---------------------------------------------------------------------------------------


def result_text(result: Any) -> str:
    """A loop's prediction in a few lines: the outcome, the final value cut short, the warnings, and the
    trace and histories counted rather than dumped (they are on `.trace` and `.histories`)."""
    trace = list(result.get("trace") or ())
    histories = result.get("histories") or {}
    lines = [f"LoopResult(success={result.get('success')!r}, stop_reason={result.get('stop_reason')!r}, "
             f"iterations={result.get('iterations')}, lm_calls={lm_calls_text(result)}, "
             f"tokens={result.get('tokens')},",
             f"    final={_cut(repr(result.get('final')), _SHORT)},"]
    if result.get("warnings"):
        lines.append(f"    warnings={result.get('warnings')!r},")
    if result.get("error") is not None:
        lines.append(f"    error={_cut(repr(result.get('error')), _SHORT)},")
    steps = ", ".join(f"{step.role}#{step.iteration}" for step in trace[:12]) + (", ..." if len(trace) > 12 else "")
    lines.append(f"    trace=[{len(trace)} steps: {steps}],")
    turns = ", ".join(f"{role}: {len(history.messages)}" for role, history in histories.items())
    lines.append(f"    histories={{{turns}}} turns)")
    return "\n".join(lines)


def result_html(result: Any) -> str:
    """A loop's prediction as HTML: a summary table, the trace as a table, each role's history in a
    folded <details> block."""
    summary = [("final", _pre(result.get("final"))), ("success", _escape(result.get("success"))),
               ("stop reason", _escape(result.get("stop_reason"))), ("iterations", _escape(result.get("iterations"))),
               ("LM calls", _escape(lm_calls_text(result))), ("tokens", _escape(result.get("tokens")))]
    if result.get("cost_usd"):
        summary.append(("cost", f"${result.get('cost_usd'):.4f}"))
    if result.get("warnings"):
        summary.append(("warnings", "<br>".join(_escape(warning) for warning in result.get("warnings"))))
    if result.get("error") is not None:
        summary.append(("error", _escape(result.get("error"))))
    rows = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in summary)
    parts = [_STYLE, "<div class='loops-result'>", f"<table>{rows}</table>",
             f"<h4>trace ({len(result.get('trace') or ())} role calls)</h4>", _trace_table(result.get("trace") or ())]
    histories = result.get("histories") or {}
    if histories:
        parts.append("<h4>histories</h4>")
        parts.extend(history_html(role, history) for role, history in histories.items())
    parts.append("</div>")
    return "".join(parts)


def step_html(step: Any) -> str:
    """One trace step as HTML: the table row's facts, then its inputs and outputs."""
    facts = _trace_table([step])
    fields = [("inputs", step.inputs), ("outputs", step.outputs)]
    if step.note:
        fields.append(("note", step.note))
    details = "".join(f"<tr><th>{name}</th><td>{_fields_html(value)}</td></tr>" for name, value in fields)
    return f"{_STYLE}<div class='loops-result'>{facts}<table>{details}</table></div>"


def history_html(role: str, history: Any) -> str:
    """A role's `dspy.History` as a folded <details> block: one numbered turn per entry, field by field."""
    messages = list(getattr(history, "messages", history) or ())
    turns = "".join(f"<tr><th>{number}</th><td>{_fields_html(turn)}</td></tr>"
                    for number, turn in enumerate(messages, start=1))
    return (f"<details><summary><b>{_escape(role)}</b>: {len(messages)} turn(s)</summary>"
            f"<table>{turns}</table></details>")


def dsl_error_html(error: Any) -> str:
    """A DSL error (`loops.sexp.DslError`) as HTML: its kind, position and message, then the source line
    with a caret under the column (as `str(error)` shows them in a terminal)."""
    node = getattr(error, "node", None)
    message = getattr(error, "message", str(error))
    where = f"{_escape(node.location)}: " if node is not None else ""
    excerpt = f"<pre>{_escape(node.excerpt())}</pre>" if node is not None else ""
    return (f"<div class='loops-dsl-error' style='border-left:3px solid #c00;padding-left:8px'>"
            f"<b>{_escape(type(error).__name__)}</b> {where}{_escape(message)}{excerpt}</div>")


def _trace_table(trace: Iterable[Any]) -> str:
    header = "".join(f"<th>{name}</th>" for name in ("role", "iteration", "seconds", "tokens in/out", "attempts",
                                                      "outcome"))
    rows = []
    for step in trace:
        tokens = f"{step.tokens['input']}/{step.tokens['output']}" if step.tokens else "-"
        note = f" <i>({_escape(_cut(step.note, 80))})</i>" if step.note else ""
        rows.append(f"<tr><td>{_escape(step_role(step))}</td><td>{step.iteration}</td><td>{step.seconds:.1f}</td>"
                    f"<td>{tokens}</td><td>{step.attempts}</td><td>{_escape(_outcome(step))}{note}</td></tr>")
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def _fields_html(value: Any) -> str:
    if not isinstance(value, Mapping):
        return _pre(value)
    return "".join(f"<b>{_escape(name)}</b>{_pre(field)}" for name, field in value.items())


def _pre(value: Any) -> str:
    return f"<pre>{_escape(_cut(value if isinstance(value, str) else repr(value), 2_000))}</pre>"


def _escape(value: Any) -> str:
    return html.escape(str(value))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"

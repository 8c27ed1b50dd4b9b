"""A scripted LM that answers any signature: the loops' roles as a helpful model would, and the
optimizers' own prompts (MIPROv2's proposer, GEPA's reflection, SIMBA's advice) with plausible values."""

import json
import re

from tests.scripted import scripted_lm

CODE = "def f():\n    return 1\n"
INSTRUCTION = "Answer the task exactly and briefly."
_FIELD = re.compile(r"^\d+\. `([^`]+)` \((.+?)\)(?::|$)", re.MULTILINE)


def _value(name, kind):
    if kind.startswith("Literal["):
        options = re.findall(r"'([^']*)'", kind)
        return next((option for option in ("PASS", "stop") if option in options), options[0])
    if kind == "bool":
        return True
    if kind in ("int", "float"):
        return 1
    if kind.startswith("dict"):
        return {}
    if kind.startswith("list"):
        return []
    if name == "code":
        return CODE
    if "instruction" in name:
        return INSTRUCTION
    return f"a {name.replace('_', ' ')}"


def _output_fields(request):
    """The output fields a ChatAdapter request asks for, with their types."""
    system = request.system if isinstance(request.system, str) else ""
    block = system.split("Your output fields are:")[-1].split("All interactions will be structured")[0]
    return {name: kind.strip() for name, kind in _FIELD.findall(block)} if "Your output fields are:" in system else {}


def answer(engine, request):
    system = request.system if isinstance(request.system, str) else ""
    if system.startswith("You are the EXECUTOR. Write the complete contents"):  # plain text: the code itself
        return CODE
    fields = {name: _value(name, kind) for name, kind in _output_fields(request).items()}
    if not fields:
        return json.dumps({"answer": "ok"})
    return json.dumps(fields) if "Outputs will be a JSON object" in system else fields


def universal_lm():
    return scripted_lm(answer, name="scripted/universal")


def _taught(request):
    """A role was taught when its prompt holds the optimized instruction or demos (with one iteration a
    role has no history, so any assistant message before its question is a demo)."""
    system = request.system if isinstance(request.system, str) else ""
    return INSTRUCTION in system or any(message.role == "assistant" for message in request.messages)


def learnable(engine, request):
    """Creator–Critic roles that do well on easy tasks, and on hard ones only once taught: a taught
    creator or iterator writes a GOOD draft; a critic approves a GOOD draft, or any draft once taught."""
    outputs = set(_output_fields(request))
    question = request.messages[-1].text or ""
    if outputs == {"reasoning", "draft"}:
        good = _taught(request) or "easy" in question
        return {"reasoning": "plan", "draft": "GOOD draft" if good else "plain draft"}
    if outputs == {"improved_draft"}:
        return {"improved_draft": "GOOD draft" if _taught(request) else "plain draft"}
    if "approved" in outputs:
        approved = _taught(request) or "GOOD" in question.split("[[ ## draft ## ]]")[-1]
        return {"accuracy_passed": approved, "completeness_passed": approved, "quality_passed": approved,
                "feedback": "" if approved else "make it GOOD", "approved": approved}
    return answer(engine, request)


def learnable_lm():
    return scripted_lm(learnable, name="scripted/learnable")

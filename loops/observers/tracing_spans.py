"""The spans of a loop run: the GenAI conventions they follow (`SPANS`, `ATTRIBUTES`, the one table
docs/tracing.md shows; `latest_conventions`), and the observer that turns a run's events into spans (`_Spans`,
on `loops.vocabulary.context`'s observer protocol), the current OpenTelemetry context kept while a role's work runs.

Its own room because what a span is named and carries changes with the semantic conventions and the run's
events, never with how tracing is switched on and exported (`loops.observers.tracing`, which re-exports the public names
here). It imports OpenTelemetry only inside its functions, as `loops.observers.tracing` does.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Mapping, Sequence
from typing import Any

from loops.errors import RoleFailed
from loops.vocabulary import context
from loops.vocabulary.display import step_outcome

__all__ = ["ATTRIBUTES", "LATEST_OPT_IN", "SPANS", "latest_conventions"]

LATEST_OPT_IN = "gen_ai_latest_experimental"


# The spans, by what they stand for: (name, kind, gen_ai.operation.name).
SPANS: Mapping[str, tuple[str, str, str | None]] = {
    "run": ("invoke_workflow {pattern}", "INTERNAL", "invoke_workflow"),
    "role call": ("invoke_agent {role}", "INTERNAL", "invoke_agent"),
    "command": ("execute_tool {executable}", "INTERNAL", "execute_tool"),
    "LM request": ("chat {model}", "CLIENT", "chat"),
    "batch example": ("loops.batch.example", "INTERNAL", None),
}

# Every attribute and event the spans carry: (name, where, what). docs/tracing.md's table is this one.
ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    ("gen_ai.operation.name", "every GenAI span", "invoke_workflow, invoke_agent, execute_tool or chat"),
    ("gen_ai.workflow.name", "run (latest conventions)", "the loop's class, e.g. CreatorCriticIterator"),
    ("gen_ai.agent.name", "role call; run (v1.36)", "the role (creator, critic, an atom's name); the loop's class"),
    ("gen_ai.conversation.id", "run, role call", "the run id, when the run is checkpointed"),
    ("gen_ai.request.model", "role call, LM request", "the model the role's LM names"),
    ("gen_ai.response.model", "LM request", "the model the answer names"),
    ("gen_ai.provider.name", "role call, LM request (latest)", "the model string's provider prefix (openai, ...)"),
    ("gen_ai.system", "role call, LM request (v1.36)", "the same, under its v1.36 name"),
    ("gen_ai.usage.input_tokens", "run, role call, LM request", "input tokens the LMs reported"),
    ("gen_ai.usage.output_tokens", "run, role call, LM request", "output tokens the LMs reported"),
    ("gen_ai.tool.name", "command", "the command's executable (pytest, python, sh)"),
    ("error.type", "any span that failed", "the exception's class, or timeout"),
    ("loops.pattern", "run", "the loop's class"),
    ("loops.run.id", "run", "the checkpoint's run id"),
    ("loops.run.checkpoint", "run", "the checkpoint file"),
    ("loops.run.recorded_calls", "run", "calls the checkpoint held when the run started (a resumed run)"),
    ("loops.run.nested", "run", "a run within another one (a DSL loop form's)"),
    ("loops.budget.*", "run", "each limit of the run's Budget that is set"),
    ("loops.stop_reason", "run", "why it stopped: approved, max_iterations, timeout, awaiting_input, ..."),
    ("loops.success", "run", "whether it succeeded"),
    ("loops.iterations", "run", "iterations run"),
    ("loops.lm_calls", "run, role call", "LM requests sent (replayed and cached ones apart)"),
    ("loops.replayed_calls", "run", "LM requests the checkpoint's record answered"),
    ("loops.cached_calls", "run, role call", "LM calls DSPy's cache answered"),
    ("loops.tokens", "run", "tokens the run used, replayed calls' included"),
    ("loops.cost_usd", "run, role call", "what the LM requests cost, when a price is known"),
    ("loops.role", "role call", "the role"),
    ("loops.iteration", "role call", "the iteration it belongs to"),
    ("loops.call.kind", "role call", "llm, phase (the user's code) or human (a person)"),
    ("loops.attempts", "role call", "attempts made (retries and re-asks included)"),
    ("loops.outcome", "role call", "what it came to: a verdict, '2/3 checks', tests passed, an error"),
    ("loops.seconds", "role call", "its duration as the trace has it (a person's wait included)"),
    ("loops.command", "command", "the command line"),
    ("loops.command.cwd", "command", "where it ran"),
    ("loops.command.exit_code", "command", "its exit code (-9: killed at its timeout)"),
    ("loops.command.seconds", "command", "how long it ran"),
    ("loops.command.timed_out", "command", "killed at its timeout"),
    ("loops.command.escaped", "command", "processes that left its group and were killed at its end"),
    ("loops.command.passed", "command", "tests passed, when the validator counts them"),
    ("loops.command.failed", "command", "tests failed, when the validator counts them"),
    ("loops.batch.example.id", "batch example", "the example's id"),
    ("loops.batch.backend", "batch example", "asyncio or ray"),
    ("loops.batch.score", "batch example", "the metric's score, when the batch has a metric"),
    ("loops.attempt_failed", "event on a role call", "an attempt failed: attempt, error.type, message, action "
     "(reparse and retry ask again)"),
    ("loops.limit_reached", "event on a run", "a limit stopped the run: reason, message"),
    ("loops.paused", "event on a run", "the run paused for a person: role, question, run id, checkpoint"),
    ("loops.resumed", "event on a run", "the run resumed with the person's answer: role, run id, checkpoint"),
    ("loops.call_replayed", "event on a run", "a call answered from the checkpoint's record: role, iteration, "
     "outcome, tokens"),
)


def latest_conventions() -> bool:
    """Whether `OTEL_SEMCONV_STABILITY_OPT_IN` asks for the latest experimental GenAI conventions."""
    return LATEST_OPT_IN in {part.strip() for part in os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")}


# --- the spans ---------------------------------------------------------------------------------------------------


def _provider_of(model: str | None) -> str | None:
    """The provider a LiteLLM model string names (`openai/gpt-4o-mini` -> openai), if it names one."""
    if not model or "/" not in model:
        return None
    return model.split("/", 1)[0]


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values OpenTelemetry can hold: None left out, others as text."""
    kept = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            kept[name] = value
        elif isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
            kept[name] = list(value)
        else:
            kept[name] = str(value)
    return kept


# The role call whose work runs in this thread or task (its scope), and the LM request it is waiting on.
_call: contextvars.ContextVar[context.CallInfo | None] = contextvars.ContextVar("loops_traced_call", default=None)
_request: contextvars.ContextVar[Any] = contextvars.ContextVar("loops_traced_request", default=None)


class _Current:
    """A span as the current OpenTelemetry context of this thread or task, and the call it stands for as the
    traced call (`_call`), while the block runs."""

    __slots__ = ("call", "span", "tokens")

    def __init__(self, span: Any, call: context.CallInfo | None):
        self.span, self.call = span, call

    def __enter__(self) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        self.tokens = (otel_context.attach(trace.set_span_in_context(self.span)),
                       None if self.call is None else _call.set(self.call))

    def __exit__(self, *exc_info: Any) -> None:
        from opentelemetry import context as otel_context

        attached, called = self.tokens
        if called is not None:
            _call.reset(called)
        otel_context.detach(attached)


class _Spans:
    """The observer that turns a run's events into spans (`loops.vocabulary.context.Observer`). Open spans are kept by
    the identity of what they stand for (the run's, the call's, the command's, the example's info), so concurrent runs
    share nothing. An LM request's `chat` span opens when the run lets it through (`request_sent`) and closes with its
    answer (`lm_answered`), both in the thread or task that sends it."""

    def __init__(self, tracer: Any):
        from opentelemetry import trace

        self._trace = trace
        self.tracer = tracer
        self.latest = latest_conventions()
        self.conventions = "latest experimental" if self.latest else "v1.36.0"
        self._provider_key = "gen_ai.provider.name" if self.latest else "gen_ai.system"
        self._open: dict[int, Any] = {}  # id(info) -> span
        self._usage: dict[int, list[int]] = {}  # id(run info) -> [input, output] of its own calls
        self._depth: dict[int, int] = {}  # id(run info) -> calls in flight (a phase's calls are nested)
        self._requests: dict[int, list[Any]] = {}  # id(call info) -> its chat spans not answered yet
        self.example_traces: dict[int, int] | None = None  # id(example info) -> its trace, kept in a worker

    # A run ---------------------------------------------------------------------------------------------------

    def run_started(self, run: context.RunInfo) -> None:
        name_key = "gen_ai.workflow.name" if self.latest else "gen_ai.agent.name"
        budget = {f"loops.budget.{limit}": value for limit, value in run.budget.items()
                  if value is not None and limit != "context_warning_ratio"}
        self._start(run, f"invoke_workflow {run.pattern}", {
            "gen_ai.operation.name": "invoke_workflow", name_key: run.pattern, "gen_ai.conversation.id": run.run_id,
            "loops.pattern": run.pattern, "loops.run.id": run.run_id, "loops.run.checkpoint": run.checkpoint,
            "loops.run.recorded_calls": run.recorded_calls or None, "loops.run.nested": run.nested, **budget})
        self._usage[id(run)] = [0, 0]

    def run_finished(self, run: context.RunInfo, result: Any, error: BaseException | None) -> None:
        span = self._open.pop(id(run), None)
        usage = self._usage.pop(id(run), [0, 0])
        self._depth.pop(id(run), None)
        if span is None:
            return
        if result is not None:
            span.set_attributes(_attributes({
                "loops.stop_reason": result.get("stop_reason"), "loops.success": bool(result.get("success")),
                "loops.iterations": result.get("iterations"), "loops.lm_calls": result.get("lm_calls"),
                "loops.replayed_calls": result.get("replayed"), "loops.cached_calls": result.get("cached"),
                "loops.tokens": result.get("tokens"), "loops.cost_usd": result.get("cost_usd"),
                "gen_ai.usage.input_tokens": usage[0], "gen_ai.usage.output_tokens": usage[1]}))
            if result.get("stop_reason") == "error":
                failure = result.get("error")
                self._failed(span, failure if isinstance(failure, BaseException) else None, str(failure))
        if error is not None and not isinstance(error, GeneratorExit):
            self._failed(span, error)
        span.end()

    def limit_reached(self, run: context.RunInfo, limit: BaseException) -> None:
        self._event(run, "loops.limit_reached", {"reason": getattr(limit, "reason", None), "message": str(limit)})

    def paused(self, run: context.RunInfo, question: Any) -> None:
        self._event(run, "loops.paused", {"role": getattr(question, "role", None),
                                          "question": str(getattr(question, "text", lambda: question)())[:1000],
                                          "loops.run.id": run.run_id, "loops.run.checkpoint": run.checkpoint})

    def resumed(self, run: context.RunInfo, role: str) -> None:
        self._event(run, "loops.resumed", {"role": role, "loops.run.id": run.run_id,
                                           "loops.run.checkpoint": run.checkpoint})

    def call_replayed(self, run: context.RunInfo, step: Any, nested: bool) -> None:
        tokens = step.tokens or {}
        self._event(run, "loops.call_replayed", {
            "role": step.role, "iteration": step.iteration, "outcome": step_outcome(step), "nested": nested,
            "gen_ai.usage.input_tokens": tokens.get("input"), "gen_ai.usage.output_tokens": tokens.get("output")})
        usage = self._usage.get(id(run))
        if usage is not None and not nested:
            usage[0] += tokens.get("input", 0)
            usage[1] += tokens.get("output", 0)

    # A role call --------------------------------------------------------------------------------------------

    def call_started(self, call: context.CallInfo) -> None:
        run = call.run
        self._start(call, f"invoke_agent {call.role}", {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": call.role,
            "gen_ai.conversation.id": run.run_id, "gen_ai.request.model": call.model,
            self._provider_key: _provider_of(call.model), "loops.role": call.role, "loops.iteration": call.iteration,
            "loops.call.kind": call.kind})
        self._depth[id(run)] = self._depth.get(id(run), 0) + 1

    def attempt_failed(self, call: context.CallInfo | None, attempt: int, error: BaseException, action: str) -> None:
        span = None if call is None else self._open.get(id(call))
        if span is not None:
            self._unanswered(call, error)
            span.add_event("loops.attempt_failed", _attributes({
                "attempt": attempt, "error.type": type(error).__qualname__, "message": str(error)[:1000],
                "action": action}))

    def call_finished(self, call: context.CallInfo | None, step: Any, error: BaseException | None) -> None:
        span = None if call is None else self._open.pop(id(call), None)
        if span is None:
            return
        self._unanswered(call, error)
        run = call.run
        depth = self._depth.get(id(run), 1) - 1
        self._depth[id(run)] = depth
        if step is not None:
            tokens = step.tokens or {}
            span.set_attributes(_attributes({
                "gen_ai.usage.input_tokens": tokens.get("input"), "gen_ai.usage.output_tokens": tokens.get("output"),
                "loops.lm_calls": step.lm_calls, "loops.cached_calls": step.cached or None,
                "loops.cost_usd": step.cost_usd, "loops.attempts": step.attempts, "loops.outcome": step_outcome(step),
                "loops.seconds": round(step.seconds, 3)}))
            usage = self._usage.get(id(run))
            if usage is not None and depth == 0:  # a phase's tokens include those of the calls it made
                usage[0] += tokens.get("input", 0)
                usage[1] += tokens.get("output", 0)
            if step.error and error is None:
                self._failed(span, None, step.error)
        if error is not None and not isinstance(error, GeneratorExit):
            self._failed(span, error)
        span.end()

    # A command ----------------------------------------------------------------------------------------------

    def command_started(self, command: context.CommandInfo) -> None:
        executable = os.path.basename(command.command.split()[0]) if command.command.split() else "command"
        self._start(command, f"execute_tool {executable}", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": executable, "loops.command": command.command,
            "loops.command.cwd": command.cwd})

    def command_finished(self, command: context.CommandInfo, result: Any, error: BaseException | None) -> None:
        span = self._open.pop(id(command), None)
        if span is None:
            return
        if result is not None:
            span.set_attributes(_attributes({
                "loops.command.exit_code": result.exit_code, "loops.command.seconds": result.seconds,
                "loops.command.timed_out": result.timed_out, "loops.command.escaped": list(result.escaped) or None,
                "loops.command.passed": result.passed, "loops.command.failed": result.failed}))
            if result.timed_out:
                span.set_attribute("error.type", "timeout")
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, result.error))
        if error is not None:
            self._failed(span, error)
        span.end()

    # A batch's example --------------------------------------------------------------------------------------

    def example_started(self, example: context.ExampleInfo) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry.propagate import extract

        origin = self._trace.get_current_span(extract(dict(example.origin))).get_span_context()
        links = [self._trace.Link(origin)] if origin.is_valid else []
        # A trace of its own (an empty parent context), linked to where the batch was started from.
        span = self.tracer.start_span("loops.batch.example", context=otel_context.Context(), links=links,
                                      attributes=_attributes({"loops.batch.example.id": example.key,
                                                              "loops.batch.backend": example.backend}))
        self._open[id(example)] = span
        if self.example_traces is not None:
            self.example_traces[id(example)] = span.get_span_context().trace_id

    def example_finished(self, example: context.ExampleInfo, record: Any, error: BaseException | None) -> None:
        span = self._open.pop(id(example), None)
        if span is None:
            return
        if record is not None:
            span.set_attributes(_attributes({"loops.success": record.get("success"),
                                             "loops.stop_reason": record.get("stop_reason"),
                                             "loops.batch.score": record.get("score")}))
            if "error" in record:
                self._failed(span, None, record["error"])
        if error is not None:
            self._failed(span, error)
        span.end()

    # Scopes: the span current while its run, call or example works ------------------------------------------

    def scope(self, what: Any) -> contextlib.AbstractContextManager | None:
        span = self._open.get(id(what))
        return None if span is None else _Current(span, what if isinstance(what, context.CallInfo) else None)

    # LM requests ---------------------------------------------------------------------------------------------

    def request_sent(self, run: context.RunInfo) -> None:
        call, earlier = _call.get(), _request.get()
        if earlier is not None and earlier.is_recording():  # sent again, the earlier one never answered
            self._failed(earlier, None, "no answer: the request was sent again")
            earlier.end()
        model = None if call is None else call.model
        span = self.tracer.start_span(f"chat {model}" if model else "chat", kind=self._trace.SpanKind.CLIENT,
                                      attributes=_attributes({"gen_ai.operation.name": "chat",
                                                              "gen_ai.request.model": model,
                                                              self._provider_key: _provider_of(model)}))
        _request.set(span)
        if call is not None:
            self._requests.setdefault(id(call), []).append(span)

    def lm_answered(self, call_id: str | None, model: str, usage: Mapping[str, Any]) -> None:
        span = _request.get()
        if span is None or not span.is_recording():
            return
        _request.set(None)
        if "gen_ai.request.model" not in span.attributes:  # a phase's own LM: known from its answer
            span.update_name(f"chat {model}")
            span.set_attributes(_attributes({"gen_ai.request.model": model, self._provider_key: _provider_of(model)}))
        span.set_attributes(_attributes({"gen_ai.response.model": model,
                                         "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
                                         "gen_ai.usage.output_tokens": usage.get("completion_tokens")}))
        span.end()

    def _unanswered(self, call: context.CallInfo, error: BaseException | None) -> None:
        """End the call's LM requests that got no answer (failed, abandoned at the deadline)."""
        for span in self._requests.pop(id(call), ()):
            if span.is_recording():
                self._failed(span, error, None if error is not None else "no answer")
                span.end()

    # Helpers ------------------------------------------------------------------------------------------------

    def _start(self, key: Any, name: str, attributes: Mapping[str, Any]) -> None:
        self._open[id(key)] = self.tracer.start_span(name, attributes=_attributes(attributes))

    def _event(self, run: context.RunInfo, name: str, attributes: Mapping[str, Any]) -> None:
        span = self._open.get(id(run))
        if span is not None:
            span.add_event(name, _attributes(attributes))

    def _failed(self, span: Any, error: BaseException | None, message: str | None = None) -> None:
        if error is not None:
            span.record_exception(error)
        # A role that failed for good (`RoleFailed`) is named by what made it fail: a rate limit, a parse error.
        cause = error.__cause__ if isinstance(error, RoleFailed) and error.__cause__ is not None else error
        span.set_attribute("error.type", type(cause).__qualname__ if cause is not None else "_OTHER")
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message or str(error)))

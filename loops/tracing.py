"""A loop run as OpenTelemetry spans, named as the GenAI semantic conventions name them, for the tools DSPy
users already run (MLflow, Phoenix, Langfuse, Jaeger: anything that reads OTLP).

    import loops.tracing
    loops.tracing.enable()        # spans to OTEL_EXPORTER_OTLP_ENDPOINT, as OTEL_SERVICE_NAME (default "loops")
    loop(requirements="A haiku")  # one trace: the run, each role call, each command, each LM request

or `--otel` on any `loops` command. One span per run (`invoke_workflow`), one per role call (`invoke_agent`),
one per validator command (`execute_tool`), one per LM request (`chat`); a retry, a limit reached, a pause
for a person, a resume and a replayed call are events on them (`ATTRIBUTES`, docs/tracing.md). A DSL
program is a run whose `program` phase holds a span per loop form (its own run) and per atom call.

The spans hang on the run's observer protocol (`loops.context.Observer`), which every path of the runtime,
the validators and the batch goes through; tracing off is no observer at all. The role's span is the current
OpenTelemetry context while its predictor runs (in a worker thread or a task alike), so the spans of DSPy's
own instrumentations (`mlflow.dspy.autolog()`, OpenInference's `DSPyInstrumentor`) nest under it. A batch
gives each example a trace of its own; on Ray, each worker's spans come home with its results and leave
through this process's exporters.

The names follow `OTEL_SEMCONV_STABILITY_OPT_IN`: with `gen_ai_latest_experimental` in it, the latest
experimental conventions (`gen_ai.provider.name`, `gen_ai.workflow.name`); without, those of v1.36.0
(`gen_ai.system`, and the workflow's name as `gen_ai.agent.name`).

OpenTelemetry is an optional extra: `pip install 'loops[tracing]'`. This module imports without it; `enable`
says how to install it.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from loops import context
from loops.display import step_outcome
from loops.errors import ConfigurationError, MissingDependencyError, RoleFailed

__all__ = ["ATTRIBUTES", "LATEST_OPT_IN", "SPANS", "Tracing", "carrier", "disable", "enable", "enabled",
           "export", "latest_conventions", "spans_of", "trace_in_worker", "worker_settings"]

LATEST_OPT_IN = "gen_ai_latest_experimental"
DEFAULT_SERVICE = "loops"
INSTRUMENTATION = "loops"
_log = logging.getLogger("loops.tracing")

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


class Tracing:
    """Tracing as `enable` turned it on: the tracer provider the spans go through, the observer that makes
    them, and the span processors `enable` added (`processors`)."""

    def __init__(self, provider: Any, observer: _Spans, processors: list[Any]):
        self.provider, self.observer, self.processors = provider, observer, processors

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export what the processors still hold; False when it did not finish within `timeout_s`."""
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def __repr__(self) -> str:
        return f"<loops.tracing: {self.observer.conventions} conventions, {len(self.processors)} exporter(s)>"


_active: Tracing | None = None
_lock = threading.Lock()
# Each provider's exporters that enable() added to it.
_exporting: weakref.WeakKeyDictionary[Any, set[Any]] = weakref.WeakKeyDictionary()


def enable(exporter: Any = None, *, provider: Any = None, endpoint: str | None = None, otlp: bool | None = None,
           service_name: str | None = None) -> Tracing:
    """Trace every loop run of this process from now on, and return how (`Tracing`).

    The spans go through `provider` if given; else through the global tracer provider when one of the SDK's
    is set (yours, MLflow's with `MLFLOW_USE_DEFAULT_TRACER_PROVIDER=false`); else through a new one, set as
    the global provider so that DSPy's own instrumentations share it, named by `service_name`, else
    `OTEL_SERVICE_NAME`, else "loops". They are exported to `exporter` (any OpenTelemetry `SpanExporter`), and
    over OTLP/HTTP to `endpoint` or to what `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`
    say (headers from `OTEL_EXPORTER_OTLP_HEADERS`): by default when one of them is given, always with
    `otlp=True` (then to http://localhost:4318 without them, OpenTelemetry's default), never with `otlp=False`.
    Called again, it replaces the earlier call's observer.
    """
    global _active
    trace, sdk = _sdk()
    if provider is None:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, sdk.TracerProvider):
            from opentelemetry.sdk.resources import Resource

            name = service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE
            provider = sdk.TracerProvider(resource=Resource.create({"service.name": name}))
            trace.set_tracer_provider(provider)
    elif not isinstance(provider, sdk.TracerProvider):
        raise ConfigurationError(f"provider must be an opentelemetry.sdk.trace.TracerProvider, got {provider!r:.80}")
    processors = []
    # What an earlier call added to this provider stays there (the SDK cannot take a processor off): not twice.
    added = _exporting.setdefault(provider, set())
    if exporter is not None and id(exporter) not in added:
        processors.append(_batch(exporter))
        added.add(id(exporter))
    wanted = f"otlp {endpoint}"
    if (otlp or (otlp is None and (endpoint is not None or _otlp_configured()))) and wanted not in added:
        processors.append(_batch(_otlp(endpoint)))
        added.add(wanted)
    for processor in processors:
        provider.add_span_processor(processor)
    observer = _Spans(provider.get_tracer(INSTRUMENTATION, _version()))
    with _lock:
        if _active is not None:
            context.stop_observing(_active.observer)
        _active = Tracing(provider, observer, processors)
        context.observe_everywhere(observer)
    return _active


def disable() -> None:
    """Stop tracing loop runs (what was made is flushed; the provider stays as it is for others' spans)."""
    global _active
    with _lock:
        active, _active = _active, None
    if active is not None:
        context.stop_observing(active.observer)
        for processor in active.processors:
            processor.force_flush()


def enabled() -> Tracing | None:
    """How tracing is on (`enable`'s answer), or None when it is off."""
    return _active


def carrier() -> dict[str, str]:
    """The current trace context as W3C `traceparent` headers, for another process or a later link; empty when
    tracing is off or no span is current."""
    if _active is None:
        return {}
    from opentelemetry.propagate import inject

    headers: dict[str, str] = {}
    inject(headers)
    return headers


def worker_settings() -> dict[str, Any] | None:
    """What a batch's worker process needs to trace its examples like this process (None when off): their spans
    come home with their results (`export`)."""
    if _active is None:
        return None
    return {"conventions": os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN")}


def _sdk() -> tuple[Any, Any]:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk import trace as sdk
    except ImportError:
        raise MissingDependencyError("loops.tracing needs OpenTelemetry, which is not installed. Fix: pip install "
                                     "'loops[tracing]'") from None
    return trace, sdk


def _otlp_configured() -> bool:
    return any(os.environ.get(name) for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))


def _otlp(endpoint: str | None) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise MissingDependencyError("exporting loop traces over OTLP needs opentelemetry-exporter-otlp-proto-http. "
                                     "Fix: pip install 'loops[tracing]'") from None
    if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"  # as the SDK does for OTEL_EXPORTER_OTLP_ENDPOINT
    return OTLPSpanExporter(endpoint=endpoint)


def _batch(exporter: Any) -> Any:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(exporter)


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loops")
    except PackageNotFoundError:
        return None


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
    """The observer that turns a run's events into spans (`loops.context.Observer`). Open spans are kept by the
    identity of what they stand for (the run's, the call's, the command's, the example's info), so concurrent
    runs share nothing. An LM request's `chat` span opens when the run lets it through (`request_sent`) and
    closes with its answer (`lm_answered`), both in the thread or task that sends it."""

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


# --- spans made in another process (a batch's Ray workers) -------------------------------------------------------


class _Collector:
    """A span processor keeping each finished span of this process (a Ray worker's) by trace, until `take` (mixed
    with the SDK's `SpanProcessor` when made, which this module cannot import before it is asked to trace)."""

    def __init__(self) -> None:
        self._spans: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: Any) -> None:
        with self._lock:
            self._spans.setdefault(span.context.trace_id, []).append(span)

    def take(self, trace_id: int) -> list[Any]:
        with self._lock:
            return self._spans.pop(trace_id, [])

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_collector: _Collector | None = None


def trace_in_worker(settings: Mapping[str, Any]) -> None:
    """In a batch's worker process: trace its examples as `worker_settings` say, keeping their spans for
    `spans_of` (they are exported by the process that started the batch)."""
    global _collector
    if _collector is not None:
        return
    if settings.get("conventions") is not None:
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = settings["conventions"]
    _, sdk = _sdk()
    _collector = type("_Collecting", (_Collector, sdk.SpanProcessor), {})()  # the SDK's hooks, and ours
    provider = sdk.TracerProvider()
    provider.add_span_processor(_collector)
    enable(provider=provider).observer.example_traces = {}


def spans_of(example: context.ExampleInfo) -> list[dict[str, Any]]:
    """In a worker that traces (`trace_in_worker`): the spans of the example just run, as plain data for
    `export`; empty when the worker does not trace."""
    if _collector is None or _active is None:
        return []
    trace_id = _active.observer.example_traces.pop(id(example), None)
    return [] if trace_id is None else [_plain(span) for span in _collector.take(trace_id)]


def _plain(span: Any) -> dict[str, Any]:
    """A finished span as plain, picklable data."""
    def link_context(value: Any) -> tuple[int, int, int]:
        return value.trace_id, value.span_id, int(value.trace_flags)

    return {
        "name": span.name, "context": link_context(span.context),
        "parent": None if span.parent is None else link_context(span.parent), "kind": span.kind.value,
        "start": span.start_time, "end": span.end_time, "attributes": dict(span.attributes or {}),
        "events": [(event.name, event.timestamp, dict(event.attributes or {})) for event in span.events],
        "links": [(link_context(link.context), dict(link.attributes or {})) for link in span.links],
        "status": (span.status.status_code.value, span.status.description),
        "scope": (span.instrumentation_scope.name, span.instrumentation_scope.version)
        if span.instrumentation_scope else (INSTRUMENTATION, None),
    }


def export(spans: Sequence[Mapping[str, Any]]) -> None:
    """Export spans made in a worker process (`example_trace`) through this process's tracing, as if made here."""
    if _active is None or not spans:
        return
    from opentelemetry import trace
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    def span_context(value: tuple[int, int, int]) -> Any:
        return trace.SpanContext(value[0], value[1], is_remote=False, trace_flags=trace.TraceFlags(value[2]))

    provider = _active.provider
    # The SDK has no public way to hand a finished span to a provider's processors; MLflow reaches them so too.
    processors = provider._active_span_processor
    for plain in spans:
        processors.on_end(ReadableSpan(
            name=plain["name"], context=span_context(plain["context"]),
            parent=None if plain["parent"] is None else span_context(plain["parent"]), resource=provider.resource,
            attributes=plain["attributes"], kind=trace.SpanKind(plain["kind"]),
            events=[Event(name, attributes, timestamp) for name, timestamp, attributes in plain["events"]],
            links=[trace.Link(span_context(link), attributes) for link, attributes in plain["links"]],
            status=trace.Status(trace.StatusCode(plain["status"][0]), plain["status"][1]),
            start_time=plain["start"], end_time=plain["end"],
            instrumentation_scope=InstrumentationScope(*plain["scope"])))

"""A loop run as OpenTelemetry spans, named as the GenAI semantic conventions name them, for the tools DSPy
users already run (MLflow, Phoenix, Langfuse, Jaeger: anything that reads OTLP).

    import loops.observers.tracing
    loops.observers.tracing.enable()  # spans to OTEL_EXPORTER_OTLP_ENDPOINT, as OTEL_SERVICE_NAME (default "loops")
    loop(requirements="A haiku")  # one trace: the run, each role call, each command, each LM request

or `--otel` on any `loops` command. One span per run (`invoke_workflow`), one per role call (`invoke_agent`),
one per validator command (`execute_tool`), one per LM request (`chat`); a retry, a limit reached, a pause
for a person, a resume and a replayed call are events on them (`ATTRIBUTES`, docs/tracing.md). A DSL
program is a run whose `program` phase holds a span per loop form (its own run) and per atom call.

The spans hang on the run's observer protocol (`loops.vocabulary.context.Observer`), which every path of the runtime,
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

What the spans are named and carry, and the observer that makes them, is `loops.observers.tracing_spans`; this module
switches tracing on and off and exports, and re-exports the conventions' names.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from loops.errors import ConfigurationError, MissingDependencyError
from loops.observers.tracing_spans import ATTRIBUTES, LATEST_OPT_IN, SPANS, _Spans, latest_conventions
from loops.vocabulary import context

__all__ = ["ATTRIBUTES", "LATEST_OPT_IN", "SPANS", "Tracing", "carrier", "disable", "enable", "enabled",
           "export", "latest_conventions", "spans_of", "trace_in_worker", "worker_settings"]

DEFAULT_SERVICE = "loops"
INSTRUMENTATION = "loops"
_log = logging.getLogger("loops.observers.tracing")


class Tracing:
    """Tracing as `enable` turned it on: the tracer provider the spans go through, the observer that makes
    them, and the span processors `enable` added (`processors`)."""

    def __init__(self, provider: Any, observer: _Spans, processors: list[Any]):
        self.provider, self.observer, self.processors = provider, observer, processors

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export what the processors still hold; False when it did not finish within `timeout_s`."""
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def __repr__(self) -> str:
        return f"<loops.observers.tracing: {self.observer.conventions} conventions, {len(self.processors)} exporter(s)>"


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
        raise MissingDependencyError("loops.observers.tracing needs OpenTelemetry, which is not installed. Fix: pip "
                                     "install 'loops[tracing]'") from None
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

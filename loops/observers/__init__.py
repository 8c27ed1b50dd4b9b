"""A run as others watch it, each an observer of its events: OpenTelemetry spans (`tracing`, `tracing_spans`) and
status messages while a loop streams (`streaming`).
"""

__all__: list[str] = []

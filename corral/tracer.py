"""The tracer every layer opens its spans with, when spans are recorded at all.

`corral.operations.tracing` installs an SDK provider only when spans are exported
(`OTEL_EXPORTER_OTLP_ENDPOINT`). Until then there is no tracer, and the places that
would open a span (a request, an actor message, an agent call, a store transaction)
open none: a check instead of a no-op span, which costs several microseconds on
every request. Here, below every layer, because each of them asks.
"""

from __future__ import annotations

from opentelemetry import trace


def recording_tracer(name: str) -> trace.Tracer | None:
    """The installed provider's tracer for `name`, or None while none is installed."""
    provider = trace.get_tracer_provider()
    return None if isinstance(provider, trace.ProxyTracerProvider) else provider.get_tracer(name)

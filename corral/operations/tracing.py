"""OpenTelemetry traces of `corral serve`: a tracer provider only when spans go somewhere.

The spans themselves are opened where the work is, with the OpenTelemetry API alone
(the layers below may not import this package): one per API request
(`corral.http.observe`), per actor message (`corral.actors.ref`), per guest agent call
(`corral.vm.client`) and per store transaction (`corral.storage.database`). Each of
those asks `trace.get_tracer_provider()` first and opens nothing while it is still the
API's default proxy: with no provider set a span costs about a microsecond, an SDK
span about thirty, which a node serving thousands of requests a second would feel.

`configure()` therefore installs the SDK's provider only when the standard variables
ask for export: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) set and
`OTEL_SDK_DISABLED` not `true`. The OTLP/HTTP exporter reads the other `OTEL_*`
variables itself (headers, timeout, compression); the resource reads
`OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`. Every span gets the request id and
tenant of the request it was opened under (`RequestStamp`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from corral.http.observe import current

from .logs import node_name


class RequestStamp(SpanProcessor):
    """Puts `corral.request_id` and `corral.tenant_id` of the request being served on
    every span started while serving it, whichever layer opened the span."""

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        request = current()
        if request is None:
            return
        span.set_attribute("corral.request_id", request.request_id)
        if request.tenant_id:
            span.set_attribute("corral.tenant_id", request.tenant_id)


def exporting(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard variables ask for spans to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def new_provider(environ: Mapping[str, str] = os.environ) -> TracerProvider:
    """An SDK provider with Corral's resource and the request stamp; no exporter yet."""
    attributes = {"service.instance.id": node_name(environ)}
    if not environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "corral"
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(RequestStamp())
    return provider


def configure(environ: Mapping[str, str] = os.environ) -> TracerProvider | None:
    """Install the process's provider exporting over OTLP/HTTP, if asked; else None
    (and the API's no-op stays: nothing is recorded, nothing exported)."""
    if not exporting(environ):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = new_provider(environ)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def shutdown(provider: TracerProvider | None) -> None:
    """Export what is still batched (bounded by the exporter's own timeout)."""
    if provider is not None:
        provider.shutdown()

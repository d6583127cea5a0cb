"""Traces (contract §19): nothing without an OTLP endpoint; with a provider, one exec is
a tree of spans from the API route through its actor messages to the agent call, each
carrying the request id of the response."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from corral.operations import tracing
from tests.support import Api

API = "/api/v1"


def _reset_global_provider() -> None:
    """Back to the API's default proxy (what the OpenTelemetry test utilities do)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """An SDK provider for the test's length whose spans land in memory."""
    exporter = InMemorySpanExporter()
    provider = tracing.new_provider({"CORRAL_NODE_NAME": "trace-node"})
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_global_provider()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _reset_global_provider()


def test_without_an_endpoint_nothing_is_set_up_or_exported() -> None:
    assert tracing.configure({}) is None
    assert tracing.configure({"OTEL_SERVICE_NAME": "corral", "OTEL_TRACES_EXPORTER": "otlp"}) is None
    assert tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}) is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not trace.get_current_span().is_recording()


def test_an_endpoint_turns_export_on() -> None:
    assert tracing.exporting({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.exporting({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    _reset_global_provider()
    try:
        provider = tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "CORRAL_NODE_NAME": "n1"})
        assert provider is not None and trace.get_tracer_provider() is provider
        assert provider.resource.attributes["service.name"] == "corral"
        assert provider.resource.attributes["service.instance.id"] == "n1"
        provider.shutdown()
    finally:
        _reset_global_provider()


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        names.append(by_id[parent.span_id].name)
        parent = by_id[parent.span_id].parent
    return names


async def test_one_exec_is_traced_from_the_route_to_the_agent_call(runtime_api: Api, exported: InMemorySpanExporter) -> None:
    api = runtime_api
    owner = await api.create_tenant()
    created = await api.request("POST", f"{API}/sandboxes", key=owner.key, json={})
    assert created.status_code in (200, 201, 202), created.text
    sandbox_id = created.json()["data"]["id"]
    exported.clear()
    executed = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/exec", key=owner.key, json={"command": "echo traced"})
    assert executed.status_code == 200, executed.text
    request_id = executed.headers["X-Request-Id"]

    spans = [span for span in exported.get_finished_spans() if (span.attributes or {}).get("corral.request_id") == request_id]
    by_id = {span.context.span_id: span for span in spans}
    [root] = [span for span in spans if span.kind is trace.SpanKind.SERVER]
    assert root.name == "POST /api/v1/sandboxes/{id}/exec"
    assert root.attributes is not None
    assert root.attributes["http.route"] == "/api/v1/sandboxes/{id}/exec"
    assert root.attributes["http.status_code"] == 200
    assert root.attributes["corral.tenant_id"] == owner.id
    assert len({span.context.trace_id for span in spans}) == 1

    [agent] = [span for span in spans if span.name == "agent POST /exec"]
    assert agent.kind is trace.SpanKind.CLIENT and agent.attributes is not None
    assert agent.attributes["http.status_code"] == 200
    assert _ancestors(agent, by_id)[-1] == root.name

    actors = [span for span in spans if "corral.actor.kind" in (span.attributes or {})]
    assert actors and all(_ancestors(span, by_id)[-1] == root.name for span in actors)
    assert {(span.attributes or {})["corral.actor.id"] for span in actors if (span.attributes or {})["corral.actor.kind"] == "sandbox"} == {sandbox_id}
    for span in spans:  # no token, key or query in any attribute
        for value in (span.attributes or {}).values():
            assert owner.key not in str(value) and "Bearer" not in str(value)

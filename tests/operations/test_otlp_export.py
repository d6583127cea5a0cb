"""As an operator follows a slow request: `corral serve` with JSON logs and an OTLP
endpoint; the access line of a request names its request id, and the trace that
reaches a real OTLP/HTTP receiver carries the same id on its server span."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.serve_process import corral_serve, wait_for
from tests.support import ADMIN_KEY, free_port


class OtlpReceiver:
    """An OTLP/HTTP traces endpoint (protobuf, as the SDK's exporter sends): every span
    received, flattened to a dict, with its service name."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(self.path, ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                """Quiet: the test reads the spans it received, not the server's log."""

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, path: str, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {kv.key: _value(kv.value) for kv in span.attributes}
                    with self.lock:
                        self.spans.append({
                            "path": path, "name": span.name, "kind": span.kind, "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                            "attributes": attributes, "service": resource.get("service.name"),
                            "node": resource.get("service.instance.id"),
                        })

    def spans_of(self, request_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [span for span in self.spans if span["attributes"].get("corral.request_id") == request_id]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.server.shutdown()
        found.server.server_close()


def test_a_request_is_followed_from_its_access_line_to_its_exported_trace(tmp_path: Path, receiver: OtlpReceiver) -> None:
    env = {
        "CORRAL_NODE_NAME": "otlp-node", "CORRAL_LOG_FORMAT": "json", "CORRAL_LOG_LEVEL": "info",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with corral_serve(tmp_path, env) as served:
        base, log_path = served.base, served.log_path
        key = served.owner_key("Traced", "ops@traced.test")
        answered = httpx.get(f"{base}/api/v1/tenant", headers={"Authorization": f"Bearer {key}"})
        assert answered.status_code == 200
        request_id = answered.headers["X-Request-Id"]

        def access_line() -> dict[str, Any] | None:
            for line in log_path.read_text().splitlines():
                if line.startswith("{") and request_id in line:
                    fields = json.loads(line)
                    if fields["logger"] == "corral.access":
                        return fields  # type: ignore[no-any-return]
            return None

        line = wait_for("access line", access_line)
        assert (line["route"], line["status"], line["node"]) == ("/api/v1/tenant", 200, "otlp-node")

        [server_span] = wait_for("exported server span", lambda: [s for s in receiver.spans_of(request_id) if s["kind"] == 2])  # SERVER
        assert server_span["path"] == "/v1/traces"
        assert server_span["name"] == "GET /api/v1/tenant"
        assert server_span["attributes"]["http.status_code"] == 200
        assert server_span["attributes"]["corral.tenant_id"] == line["tenant_id"]
        assert (server_span["service"], server_span["node"]) == ("corral", "otlp-node")

        # The tenant's creation wrote to the store: its transaction spans are children of its request's span.
        creation = [span for span in receiver.spans if span["kind"] == 2 and span["name"] == "POST /api/v1/admin/tenants"]
        assert len(creation) == 1
        creating = wait_for(
            "spans of the creation", lambda: (spans := receiver.spans_of(creation[0]["attributes"]["corral.request_id"])) and len(spans) > 1 and spans
        )
        root = creation[0]
        assert {span["trace_id"] for span in creating} == {root["trace_id"]}
        assert any(span["parent"] == root["span_id"] for span in creating if span["span_id"] != root["span_id"])
        assert key not in json.dumps(receiver.spans) and ADMIN_KEY not in json.dumps(receiver.spans)
    assert ADMIN_KEY not in log_path.read_text() and key not in log_path.read_text()

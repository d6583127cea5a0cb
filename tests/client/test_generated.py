"""The generated client covers the route table, and the pieces under it behave (unit tests)."""

from __future__ import annotations

import httpx
import pytest

from corral.client import (
    OPERATIONS,
    Client,
    CorralError,
    NotFound,
    RateLimited,
    ServerError,
    SSEParser,
)
from corral.client._generated import AsyncOperations, Operations
from corral.http import api_document
from tools import gen_client


def test_the_generated_file_is_up_to_date_with_the_route_table() -> None:
    assert gen_client.TARGET.read_text() == gen_client.generate(), "run: python tools/gen_client.py"


def test_every_api_operation_has_a_sync_and_an_async_method() -> None:
    document = api_document()
    covered = {(method, path) for method, path in OPERATIONS.values()}
    for path, item in document["paths"].items():
        for method, op in item.items():
            if not path.startswith("/api/v1/") or "101" in op["responses"]:
                continue
            assert (method.upper(), path) in covered, (method, path)
    for name in OPERATIONS:
        assert callable(getattr(Operations, name)) and callable(getattr(AsyncOperations, name))
    assert OPERATIONS["create_sandbox"] == ("POST", "/api/v1/sandboxes")
    assert OPERATIONS["list_sandboxes"] == ("GET", "/api/v1/sandboxes")
    assert OPERATIONS["stream_sandbox_process"] == ("GET", "/api/v1/sandboxes/{id}/processes/{pid}/stream")


def test_names_are_mechanical() -> None:
    assert gen_client.singular("sandboxes") == "sandbox"
    assert gen_client.singular("policies") == "policy"
    assert gen_client.singular("processes") == "process"
    assert gen_client.singular("databases") == "database"
    assert gen_client.singular("status") == "status"


def test_sse_parser_handles_split_frames_comments_and_ids() -> None:
    parser = SSEParser()
    assert parser.feed(b": connected\n\nid: 01A\nevent: log\nda") == []
    events = parser.feed(b'ta: {"line": "hi"}\n\n: heartbeat\n\r\ndata: plain\r\n\r\n')
    assert [(e.id, e.event, e.data) for e in events] == [("01A", "log", {"line": "hi"}), (None, "message", "plain")]
    assert parser.last_id == "01A"


def _client(handler: httpx.MockTransport, **options: object) -> Client:
    return Client("http://corral.test", "msk_test", http=httpx.Client(transport=handler), backoff=0.01, **options)  # type: ignore[arg-type]


def _error(status: int, code: str, **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": "no", "request_id": "req_1"}}
    return httpx.Response(status, json=body, headers=headers)


def test_errors_are_one_family_with_code_message_request_id_and_status() -> None:
    client = _client(httpx.MockTransport(lambda request: _error(404, "SANDBOX_NOT_FOUND")))
    with pytest.raises(NotFound) as caught:
        client.get_sandbox("x")
    error = caught.value
    assert isinstance(error, CorralError)
    assert (error.status, error.code, error.message, error.request_id) == (404, "SANDBOX_NOT_FOUND", "no", "req_1")
    assert error.one_line() == "SANDBOX_NOT_FOUND: no (request req_1)"


def test_429_is_retried_after_retry_after_and_5xx_only_when_idempotent() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) == 1:
            return _error(429, "RATE_LIMITED", **{"Retry-After": "0"})
        if request.method == "POST" and "idempotency-key" not in request.headers:
            return _error(503, "UNAVAILABLE")
        if len(calls) < 4:
            return _error(503, "UNAVAILABLE")
        return httpx.Response(200, json={"data": []})

    client = _client(httpx.MockTransport(handler))
    assert client.list_sandboxes() == {"data": []}
    assert calls == ["GET", "GET", "GET", "GET"]  # 429, 503, 503, then success
    calls.clear()
    with pytest.raises(ServerError):
        client.sandbox_stop("x")  # a POST without an Idempotency-Key: not repeated after a 5xx
    assert calls == ["POST", "POST"]  # the 429 is retried, the 503 is not

    def always_429(request: httpx.Request) -> httpx.Response:
        return _error(429, "RATE_LIMITED", **{"Retry-After": "0"})

    limited = _client(httpx.MockTransport(always_429), max_retries=2)
    with pytest.raises(RateLimited) as caught:
        limited.list_sandboxes()
    assert caught.value.retry_after == 0


def test_idempotent_routes_send_one_key_for_every_retry() -> None:
    keys: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers.get("idempotency-key"))
        return _error(502, "BAD_GATEWAY") if len(keys) == 1 else httpx.Response(201, json={"data": {}})

    client = _client(httpx.MockTransport(handler))
    client._call("POST", "/api/v1/deployments", body={"name": "x"}, idempotent=True)
    assert len(keys) == 2 and keys[0] is not None and keys[0] == keys[1]

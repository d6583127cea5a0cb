"""The node's log (contract §19): JSON lines with the request's fields, an access line per
API and preview request carrying the response's request id, the level settings, and no
secret in any line after real work."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio

from corral import current_request
from corral.http.observe import RequestRecord
from corral.net.preview import PreviewRouter, RouteTable
from corral.operations import logs
from tests.support import ADMIN_KEY, Api, Tenant, create_key, free_port

API = "/api/v1"


class Captured:
    """What the node's JSON handler wrote, line by line."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines() if line.strip()]

    def access(self) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line["logger"] == "corral.access"]

    async def access_of(self, responses: list[httpx.Response]) -> dict[str, dict[str, Any]]:
        """The access lines of `responses` by request id, once all are written (just
        after each answer went out)."""
        wanted = {response.headers["X-Request-Id"] for response in responses}
        with trio.fail_after(10):
            while not wanted <= {line["request_id"] for line in self.access()}:
                await trio.sleep(0.01)
        return {line["request_id"]: line for line in self.access()}


@pytest.fixture
def captured() -> Iterator[Captured]:
    """The root logger writes JSON lines at info into a buffer for the test's length."""
    capture = Captured()
    handler = logs.make_handler("json", capture.stream, node="node-test")
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield capture
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)


def record_of(message: str, *args: Any, exc: bool = False, **extra: Any) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    record = logging.LogRecord("corral.test", logging.WARNING, __file__, 1, message, args, exc_info)
    record.__dict__.update(extra)
    return record


def test_a_json_line_has_the_contract_fields_and_the_request_of_the_task() -> None:
    formatter = logs.JsonFormatter("node-a")
    request = RequestRecord("GET", "/api/v1/sandboxes/sbx-1/files", route="/api/v1/sandboxes/{id}/files", tenant_id="t-1")
    token = current_request.enter(request)
    try:
        record = record_of("hello %s", "world", exc=True, sandbox_count=3)
        logs.RequestFields().filter(record)
    finally:
        current_request.leave(token)
    line = json.loads(formatter.format(record))
    assert line["time"].endswith("Z") and line["time"][10] == "T"
    assert (line["level"], line["logger"], line["message"], line["node"]) == ("warning", "corral.test", "hello world", "node-a")
    assert (line["request_id"], line["tenant_id"]) == (request.request_id, "t-1")
    assert line["resource_ids"] == {"id": "sbx-1"}
    assert line["sandbox_count"] == 3
    assert "ValueError: boom" in line["exception"]
    assert "\n" not in formatter.format(record)  # one object a line, a traceback included


def test_outside_a_request_the_request_id_is_null_and_text_lines_carry_it_when_known() -> None:
    record = record_of("idle")
    logs.RequestFields().filter(record)
    assert json.loads(logs.JsonFormatter("n").format(record))["request_id"] is None
    assert "request_id=" not in logs.TextFormatter().format(record)
    token = current_request.enter(RequestRecord("GET", "/api/v1/tenant"))
    try:
        record = record_of("busy")
        logs.RequestFields().filter(record)
    finally:
        current_request.leave(token)
    assert logs.TextFormatter().format(record).endswith(f"busy request_id={record.request_id}")


def test_path_placeholders_other_than_ids_are_left_out() -> None:
    record = RequestRecord("POST", "/api/v1/invites/secret-token-value/accept", route="/api/v1/invites/{token}/accept")
    assert logs.resource_ids(record) == {}
    record = RequestRecord("GET", "/api/v1/agent-runs/r1/artifacts/a1", route="/api/v1/agent-runs/{run_id}/artifacts/{artifact_id}")
    assert logs.resource_ids(record) == {"run_id": "r1", "artifact_id": "a1"}


def test_log_level_option_wins_over_the_variable_which_wins_over_info() -> None:
    assert logs.chosen_level(None, {}) == logging.INFO
    assert logs.chosen_level(None, {"CORRAL_LOG_LEVEL": "warning"}) == logging.WARNING
    assert logs.chosen_level("DEBUG", {"CORRAL_LOG_LEVEL": "warning"}) == logging.DEBUG
    with pytest.raises(logs.LogSettingsError):
        logs.chosen_level(None, {"CORRAL_LOG_LEVEL": "loud"})
    assert logs.chosen_format({}) == "text"
    assert logs.chosen_format({"CORRAL_LOG_FORMAT": "JSON"}) == "json"
    with pytest.raises(logs.LogSettingsError):
        logs.chosen_format({"CORRAL_LOG_FORMAT": "xml"})


def test_configure_sets_the_root_logger_from_the_environment() -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        logs.configure(None, {"CORRAL_LOG_LEVEL": "warning", "CORRAL_LOG_FORMAT": "json", "CORRAL_NODE_NAME": "n7"}, stream)
        logging.getLogger("corral.x").info("not written")
        logging.getLogger("corral.x").warning("written")
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["message"], line["node"], line["level"]) for line in lines] == [("written", "n7", "warning")]


def test_serve_refuses_an_unknown_level_or_format(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from corral.cli import main

    monkeypatch.setenv("CORRAL_LOG_FORMAT", "xml")
    assert main(["serve"]) == 2
    assert "CORRAL_LOG_FORMAT" in capsys.readouterr().err


async def test_an_access_line_per_api_request_with_the_response_request_id(api: Api, tenant: Tenant, captured: Captured) -> None:
    responses = [
        await api.request("GET", f"{API}/tenant", key=tenant.key),
        await api.request("GET", f"{API}/sandboxes/no-such-sandbox?token=query-secret", key=tenant.key),
        await api.request("GET", f"{API}/nowhere/at/all"),
        await api.request("GET", f"{API}/tenant", key="msk_u_wrong-key-that-is-secret"),
    ]
    by_id = await captured.access_of(responses)
    for response in responses:
        line = by_id[response.headers["X-Request-Id"]]
        assert line["status"] == response.status_code
        assert line["bytes"] == len(response.content)
        assert line["duration_ms"] >= 0 and line["kind"] == "api" and line["method"] == "GET"
    assert by_id[responses[0].headers["X-Request-Id"]]["route"] == "/api/v1/tenant"
    assert by_id[responses[0].headers["X-Request-Id"]]["tenant_id"] == tenant.id
    missing = by_id[responses[1].headers["X-Request-Id"]]
    assert missing["route"] == "/api/v1/sandboxes/{id}" and missing["resource_ids"] == {"id": "no-such-sandbox"}
    assert by_id[responses[2].headers["X-Request-Id"]]["route"] == "unmatched"
    text = captured.stream.getvalue()
    for secret in ("query-secret", "msk_u_wrong-key-that-is-secret", tenant.key, "/nowhere/at/all"):
        assert secret not in text


async def test_an_access_line_per_preview_request_without_its_query(captured: Captured) -> None:
    router = PreviewRouter(RouteTable())
    async with trio.open_nursery() as nursery:
        port = await nursery.start(router.serve, "127.0.0.1", free_port())
        async with httpx.AsyncClient() as client:
            response = await client.get(
                f"http://127.0.0.1:{port}/some/path?token=preview-secret", headers={"Host": "nothing.corral.localhost"}
            )
        nursery.cancel_scope.cancel()
    [line] = captured.access()
    assert (line["kind"], line["host"], line["method"], line["status"]) == ("preview", "nothing.corral.localhost", "GET", response.status_code)
    assert line["bytes"] == len(response.content)
    assert "preview-secret" not in captured.stream.getvalue() and "/some/path" not in captured.stream.getvalue()


async def test_no_secret_reaches_the_log_after_real_work(runtime_api: Api, captured: Captured) -> None:
    api = runtime_api
    owner = await api.create_tenant()
    env_value = "env-value-that-must-stay-secret-4711"
    vault_value = "sk-vault-value-that-must-stay-secret-0815"
    created = await api.request("POST", f"{API}/sandboxes", key=owner.key, json={"env": {"SECRET_THING": env_value}})
    assert created.status_code in (200, 201, 202), created.text
    sandbox_id = created.json()["data"]["id"]
    executed = await api.request(
        "POST", f"{API}/sandboxes/{sandbox_id}/exec", key=owner.key, json={"command": "echo ${#SECRET_THING}; exit 3", "env": {"X": env_value}},
    )
    assert executed.status_code == 200, executed.text
    secret = await api.request(
        "POST", f"{API}/egress/secrets", key=owner.key,
        json={"name": "model key", "value": vault_value, "type": "api_key", "scope": "tenant", "allowed_hosts": ["api.example.test"]},
    )
    assert secret.status_code == 201, secret.text
    key = await create_key(api, owner.key)
    assert (await api.request("GET", f"{API}/tenant", key=key["key"])).status_code == 200
    deleted = await api.request("DELETE", f"{API}/sandboxes/{sandbox_id}", key=owner.key)
    await captured.access_of([created, executed, secret, deleted])
    text = captured.stream.getvalue()
    assert len(captured.access()) >= 6
    for value in (env_value, vault_value, key["key"], owner.key, ADMIN_KEY):
        assert value not in text


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_the_direct_access_line_is_the_line_logging_would_write(log_format: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))  # configure() replaces them: restored after
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr(logs, "_access_writer", logs._access_writer)
    stream = io.StringIO()
    logs.configure("info", {"CORRAL_LOG_FORMAT": log_format, "CORRAL_NODE_NAME": "n1"}, stream=stream)
    record = RequestRecord("GET", "/api/v1/sandboxes/3f1c")
    record.route, record.status, record.response_bytes, record.duration_seconds, record.tenant_id = (
        "/api/v1/sandboxes/{id}", 200, 120, 0.0005, "tenant-1",
    )
    logs.access_line(record)  # straight to the handler
    writer, logs._access_writer = logs._access_writer, None
    try:
        logs.access_line(record)  # through logging
    finally:
        logs._access_writer = writer
    direct, through_logging = stream.getvalue().splitlines()
    if log_format == "json":
        direct_fields, logged_fields = json.loads(direct), json.loads(through_logging)
        assert direct_fields.pop("time")[:19] == logged_fields.pop("time")[:19]
        assert direct_fields == logged_fields
    else:
        assert direct.split(" ", 2)[2] == through_logging.split(" ", 2)[2]


def test_the_node_handler_writes_a_warning_at_once_and_an_info_line_soon_after(tmp_path: Any) -> None:
    """Lines below WARNING wait in the buffer a moment (no system call per request);
    one the operator must see now does not, and closing writes what is left."""
    path = tmp_path / "node.log"
    with open(path, "w", buffering=1 << 16, encoding="utf-8") as stream:
        _write_through_the_node_handler(stream, path)


def _write_through_the_node_handler(stream: Any, path: Any) -> None:
    handler = logs.make_handler("text", stream, node="n1")
    logger = logging.getLogger("corral.test.flushing")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.warning("disk reserve reached")
        assert "disk reserve reached" in path.read_text()  # no wait at all
        logger.info("an info line")
        deadline = time.monotonic() + 10
        while "an info line" not in path.read_text():  # the flushing thread, within FLUSH_SECONDS
            assert time.monotonic() < deadline, "an info line never reached the file"
            time.sleep(0.02)
        handler.acquire()
        try:  # a line written while the thread cannot flush (it needs this lock) ...
            handler.stream.write("last words\n")
            handler._dirty = True
        finally:
            handler.release()
        handler.close()  # ... is written by close
        assert "last words" in path.read_text()
    finally:
        logger.removeHandler(handler)
        logger.propagate = True

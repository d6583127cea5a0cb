"""A WebSocket of a resource that lives on another node is forwarded there (issue 30,
`corral.http.forward_ws`): the handshake made again to the home (its subprotocol, or
its refusal as it gave it), messages both ways whole (text and binary), close codes
from either side, and the caller's address signed so the home sees it.

No API route under `/api/v1/{sandboxes|computers|databases}/{id}` is a WebSocket
today (the terminals and desktops are the preview router's, relayed by
`test_preview_across_nodes.py`), so the home here is a real server
(`corral.asgi_server`) with a WebSocket application of the test's, checking the
forwarded header as Corral's front does; the forwarding side is the real front of
Corral's two real nodes in the last test, which proves the request reaches the home."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket

from corral.actors.nodes.homes import Home, Homes
from corral.asgi_server import ServerConfig, serve
from corral.http.forward import Forwarder, forwarding_key
from corral.http.forward_ws import forward_websocket
from corral.storage import Database, open_database
from tests.actors.nodes.test_shared_events import NODE_B_HOST, runtime_env
from tests.pg_server import create_database
from tests.serve_process import corral_serve
from tests.support import RUNTIME_SETTINGS, cleanup_host, free_port

API = "/api/v1"
SECRET = "cluster secret"
_databases = itertools.count()


class HomeApp:
    """The home's WebSocket: it takes the caller's address from a signed forward (as
    Corral's front does), answers with it, echoes, closes with 4001 on "close", and
    records how the caller closed."""

    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder
        self.closes: list[tuple[int, str]] = []
        self.closed = trio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        forwarded = self.forwarder.arrived_forwarded(scope)
        assert (await receive())["type"] == "websocket.connect"
        if scope["path"].endswith("/refuse"):
            body = json.dumps({"error": {"code": "FORBIDDEN", "message": "not yours"}}).encode()
            await send({"type": "websocket.http.response.start", "status": 403,
                        "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"req_home")]})
            await send({"type": "websocket.http.response.body", "body": body})
            return
        protocol = "corral.test" if "corral.test" in scope["subprotocols"] else None
        await send({"type": "websocket.accept", "subprotocol": protocol})
        host = dict(scope["headers"]).get(b"host", b"").decode()
        await send({"type": "websocket.send", "text": json.dumps({
            "client": scope["client"][0], "forwarded": forwarded, "host": host,
            "path": scope["path"], "query": scope["query_string"].decode(),
        })})
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    self.closes.append((message["code"], message.get("reason", "")))
                    return
                if message.get("text") == "close":
                    await send({"type": "websocket.close", "code": 4001, "reason": "asked to"})
                    return
                if message.get("text") is not None:
                    await send({"type": "websocket.send", "text": f"echo: {message['text']}"})
                else:
                    await send({"type": "websocket.send", "bytes": message["bytes"][::-1]})
        finally:
            self.closed.set()


@contextlib.asynccontextmanager
async def two_servers(db: Database, home_url: str | None = None) -> AsyncIterator[tuple[int, HomeApp]]:
    """The home (a real server with `HomeApp`) and node B's server, which forwards every
    WebSocket to the home (or to `home_url`); B's port and the home's app."""
    home = HomeApp(Forwarder(Homes(db, "node-a", shared=True), forwarding_key(SECRET)))
    b = Forwarder(Homes(db, "node-b", shared=True), forwarding_key(SECRET))
    home_port, b_port = free_port(), free_port()
    target = Home("node-a", home_url or f"http://127.0.0.1:{home_port}")

    async def b_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await forward_websocket(b, scope, receive, send, target)

    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        for app, port in ((home, home_port), (b_app, b_port)):
            await nursery.start(
                lambda task_status, app=app, port=port: serve(
                    app, ServerConfig("127.0.0.2" if app is b_app else "127.0.0.1", port), shutdown_trigger=stop.wait,
                    task_status=task_status,
                )
            )
        try:
            yield b_port, home
        finally:
            stop.set()
            await b.aclose()


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[Database]:
    database = open_database(create_database(postgres_url, f"forwarding_ws_{os.getpid()}_{next(_databases)}"))
    try:
        yield database
    finally:
        await database.close()


async def test_messages_go_both_ways_and_the_home_closes_with_its_code(db: Database) -> None:
    async with two_servers(db) as (b_port, _), open_websocket(
        "127.0.0.2", b_port, "/api/v1/sandboxes/sbx/terminal?cols=80", use_ssl=False, subprotocols=["other", "corral.test"],
        max_message_size=8 * 1024 * 1024,
    ) as ws:
        assert ws.subprotocol == "corral.test"
        hello = json.loads(await ws.get_message())
        # The home saw the caller's address (signed by B), the Host, the path and query as sent.
        assert hello == {"client": "127.0.0.1", "forwarded": True, "host": f"127.0.0.2:{b_port}",
                         "path": "/api/v1/sandboxes/sbx/terminal", "query": "cols=80"}
        await ws.send_message("hello")
        assert await ws.get_message() == "echo: hello"
        payload = os.urandom(3 * 1024 * 1024)  # binary, larger than one read
        await ws.send_message(payload)
        assert await ws.get_message() == payload[::-1]
        await ws.send_message("close")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
        assert closed.value.reason is not None and (closed.value.reason.code, closed.value.reason.reason) == (4001, "asked to")


async def test_the_callers_close_code_reaches_the_home(db: Database) -> None:
    async with two_servers(db) as (b_port, home):
        async with open_websocket("127.0.0.2", b_port, "/api/v1/computers/c/x", use_ssl=False) as ws:
            await ws.get_message()
            await ws.aclose(code=4321, reason="done here")
        with trio.fail_after(10):
            await home.closed.wait()
        assert home.closes == [(4321, "done here")]


async def test_the_homes_refusal_comes_back_as_it_gave_it(db: Database) -> None:
    async with two_servers(db) as (b_port, _):
        with pytest.raises(ConnectionRejected) as refused:
            async with open_websocket("127.0.0.2", b_port, "/api/v1/sandboxes/sbx/refuse", use_ssl=False):
                pass
    assert refused.value.status_code == 403
    headers = {bytes(name).lower(): bytes(value) for name, value in refused.value.headers or []}
    assert headers[b"content-type"] == b"application/json" and headers[b"x-request-id"] == b"req_home"
    assert json.loads(refused.value.body or b"") == {"error": {"code": "FORBIDDEN", "message": "not yours"}}


async def test_a_home_that_cannot_be_reached_is_a_503_with_the_envelope(db: Database) -> None:
    async with two_servers(db, home_url=f"http://127.0.0.1:{free_port()}") as (b_port, _):
        with pytest.raises(ConnectionRejected) as refused:
            async with open_websocket("127.0.0.2", b_port, "/api/v1/sandboxes/sbx/x", use_ssl=False):
                pass
    assert refused.value.status_code == 503
    error = json.loads(refused.value.body or b"")["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and "node-a" in error["message"]


async def test_corrals_front_relays_a_websocket_of_node_as_sandbox_through_node_b(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    """Two real nodes: a WebSocket for a sandbox of node A that reaches node B is A's to
    answer (no route takes it there: A's 404 envelope comes back through B); once A is
    killed, and before it is seen lost, B says A cannot be reached."""
    url = create_database(postgres_url, f"forwarding_ws_nodes_{os.getpid()}_{next(_databases)}")
    common = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        with corral_serve(tmp_path / "a", {**common, **runtime_env(RUNTIME_SETTINGS)}, "--node-name", "node-a") as a, corral_serve(
            tmp_path / "b", {**common, **runtime_env(NODE_B_HOST)}, "--node-name", "node-b"
        ) as b:
            key = a.owner_key("Forwarded sockets", "owner@forwarding-ws.example")
            async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
                made = await client.post(f"{a.base}{API}/sandboxes", json={})
                assert made.status_code == 201, made.text
                sandbox = made.json()["data"]
                assert sandbox["node"] == "node-a"
                # Its row (and home) stays after it is destroyed: no instance is left behind by the kill below.
                assert (await client.delete(f"{a.base}{API}/sandboxes/{sandbox['id']}")).status_code == 200
            port = int(b.base.rsplit(":", 1)[1])
            path = f"{API}/sandboxes/{sandbox['id']}/no-such-socket"
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket("127.0.0.1", port, path, use_ssl=False):
                    pass
            assert refused.value.status_code == 404, refused.value.body
            assert json.loads(refused.value.body or b"")["error"]["code"] == "NOT_FOUND"

            a.process.kill()  # its heartbeat is fresh for a few seconds more: B still sends A's sockets there
            a.process.wait()
            with pytest.raises(ConnectionRejected) as unreachable:
                async with open_websocket("127.0.0.1", port, path, use_ssl=False):
                    pass
            assert unreachable.value.status_code == 503, unreachable.value.body
            error = json.loads(unreachable.value.body or b"")["error"]
            assert error["code"] == "SERVICE_UNAVAILABLE" and "node-a" in error["message"]
    finally:
        cleanup_host(**{name: NODE_B_HOST[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})

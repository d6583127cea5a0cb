"""A preview URL works through any node (issue 30): the preview router of a node that
does not host the sandbox or computer relays the request, as it came, to the router of
the node that does, which checks its tokens and reaches the instance. Two real `corral
serve` nodes on one real PostgreSQL, each with a runtime of its own (bridge, subnet,
nftables table): the sandbox and the computer live on node A, and the browser (a
client on 127.0.0.2, so that its address differs from the nodes') talks only to node
B's router; everything the test asks of the API goes through node B too."""

from __future__ import annotations

import base64
import os
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from corral.actors.previews.remote import RelaySigner, RemoteRouters, router_upstream
from corral.cli import build_parser
from corral.config import Settings, SettingsError
from corral.net.preview import (
    RELAY_HEADER,
    Forward,
    PreviewRequest,
    PreviewRouter,
    RouteTable,
    Upstream,
)
from tests.actors.nodes.test_shared_events import NODE_B_HOST, runtime_env
from tests.http.preview_support import APP
from tests.pg_server import create_database
from tests.serve_process import Served, corral_serve
from tests.support import ADMIN_KEY, RUNTIME_SETTINGS, cleanup_host, free_port

API = "/api/v1"
DOMAIN = "corral.localhost"
BROWSER = "127.0.0.2"
"""The browser's address: neither node's (both reach each other from 127.0.0.1)."""
APP_PORT = 8000


@dataclass
class Cluster:
    a: Served
    b: Served
    a_preview: int
    b_preview: int
    bearer: dict[str, str]
    b_edge: int
    """Node B's TLS edge (Caddy, its internal CA) in front of its router: the HTTPS port."""
    b_edge_root: Path

    def api(self, path: str) -> str:
        """An API URL on node B."""
        return f"{self.b.base}{API}{path}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres_url: str, runtime_host: None) -> Iterator[Cluster]:
    url = create_database(postgres_url, f"preview_nodes_{os.getpid()}")
    root = tmp_path_factory.mktemp("preview-nodes")
    common = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0"}
    a_preview, b_preview, b_edge = free_port(), free_port(), free_port()
    (root / "a").mkdir()
    (root / "b").mkdir()
    try:
        with corral_serve(
            root / "a", {**common, **runtime_env(RUNTIME_SETTINGS)}, "--node-name", "node-a", "--preview-port", str(a_preview)
        ) as a, corral_serve(
            root / "b", {**common, **runtime_env(NODE_B_HOST), "CORRAL_ACME_CA": "internal"}, "--node-name", "node-b",
            "--preview-port", str(b_preview), "--edge", "--https-port", str(b_edge), "--http-port", str(free_port()),
        ) as b:
            key = a.owner_key("Previews across nodes", "owner@preview-nodes.example")
            edge_root = root / "b" / "data" / "edge" / "pki" / "authorities" / "local" / "root.crt"
            yield Cluster(a, b, a_preview, b_preview, {"Authorization": f"Bearer {key}"}, b_edge, edge_root)
    finally:
        cleanup_host(**{name: NODE_B_HOST[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})


def browser(port: int) -> httpx.AsyncClient:
    """A client of the router on `port`, from the browser's address; requests name their host."""
    transport = httpx.AsyncHTTPTransport(local_address=BROWSER)
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", transport=transport, timeout=30)


@asynccontextmanager
async def websocket(port: int, host: str, target: str, cookie: str | None = None) -> AsyncIterator[WebSocketConnection]:
    """A WebSocket to `target` of `host` through the router on `port`, from the browser's address."""
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=BROWSER)
        headers = [(b"Cookie", cookie.encode())] if cookie else []
        ws = await wrap_client_stream(nursery, stream, host, target, extra_headers=headers)
        try:
            yield ws
        finally:
            await ws.aclose()
            nursery.cancel_scope.cancel()


async def read_until(ws: WebSocketConnection, needle: bytes, timeout: float = 20) -> bytes:
    seen = b""
    with trio.fail_after(timeout):
        while needle not in seen:
            message = await ws.get_message()
            seen += message if isinstance(message, bytes) else message.encode()
    return seen


async def raw_upgrade(port: int, host: str, target: str) -> tuple[int, bytes]:
    """A WebSocket upgrade through the router on `port`: the status and, after a 101, the
    payload of the server's first frame (else the start of the body)."""
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n\r\n"
    )
    stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=BROWSER)
    async with stream:
        await stream.send_all(head.encode())
        data = b""
        with trio.fail_after(20):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                assert chunk, data
                data += chunk
            response_head, _, rest = data.partition(b"\r\n\r\n")
            status = int(response_head.split(b" ", 2)[1])
            if status != 101:
                return status, rest
            while len(rest) < 2 or len(rest) < 2 + (rest[1] & 0x7F):
                rest += await stream.receive_some(65536)
            return status, rest[2 : 2 + (rest[1] & 0x7F)]


@dataclass
class AppSandbox:
    id: str
    host: str
    """Its preview host for the app's port."""
    token: str
    """A preview token of it."""


@asynccontextmanager
async def app_sandbox(cluster: Cluster, api: httpx.AsyncClient) -> AsyncIterator[AppSandbox]:
    """A sandbox made through node A, running the preview tests' app on `APP_PORT`,
    exposed, with a preview token (all asked through node B), once the app answers
    through B's router; destroyed after."""
    made = await api.post(f"{cluster.a.base}{API}/sandboxes", json={})
    assert made.status_code == 201, made.text
    sandbox = made.json()["data"]
    assert sandbox["node"] == "node-a"
    sid = sandbox["id"]
    try:
        wrote = await api.post(cluster.api(f"/sandboxes/{sid}/files/write"), json={"path": "/workspace/app.py", "content": APP})
        assert wrote.status_code == 201, wrote.text
        started = await api.post(cluster.api(f"/sandboxes/{sid}/processes"), json={"cmd": f"python3 /workspace/app.py {APP_PORT}"})
        assert started.status_code == 201, started.text
        exposed = await api.post(cluster.api(f"/sandboxes/{sid}/expose"), json={"port": APP_PORT})
        assert exposed.status_code == 200, exposed.text
        minted = await api.post(cluster.api(f"/sandboxes/{sid}/preview-token"), json={})
        assert minted.status_code == 200, minted.text
        app = AppSandbox(sid, f"{APP_PORT}-{sandbox['slug']}.sandbox.{DOMAIN}", minted.json()["data"]["token"])
        async with browser(cluster.b_preview) as through_b:
            with trio.fail_after(30):  # the app starts listening
                while (await through_b.get("/headers", headers={"Host": app.host, "X-Preview-Token": app.token})).status_code != 200:
                    await trio.sleep(0.1)
        yield app
    finally:
        deleted = await api.delete(cluster.api(f"/sandboxes/{sid}"))
        assert deleted.status_code == 200, deleted.text


async def test_a_sandbox_port_of_node_a_is_previewed_through_node_b(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=120, headers=cluster.bearer) as api, app_sandbox(cluster, api) as app:
        sid, host, token = app.id, app.host, app.token
        async with browser(cluster.b_preview) as through_b, browser(cluster.a_preview) as direct:
            # Refused without a token, or with a wrong one, as node A's own router refuses.
            for headers, reason in (({}, "token_required"), ({"X-Preview-Token": "mp_forged"}, "token_invalid")):
                refused = await through_b.get("/headers", headers={"Host": host, **headers})
                direct_refusal = await direct.get("/headers", headers={"Host": host, **headers})
                assert (refused.status_code, refused.headers.get("x-corral-preview-error")) == (401, reason)
                assert (direct_refusal.status_code, direct_refusal.text) == (refused.status_code, refused.text)

            # The app sees the request as if the browser had asked node A: its Host,
            # the browser's address, no token, no relay header.
            seen = (await through_b.get("/headers?q=1", headers={"Host": host, "X-Preview-Token": token})).json()
            headers = {name.lower(): value for name, value in seen["headers"]}
            assert seen["path"] == "/headers?q=1"
            assert (headers["host"], headers["x-forwarded-host"], headers["x-forwarded-for"]) == (host, host, BROWSER)
            assert "x-preview-token" not in headers and RELAY_HEADER not in headers
            assert headers == {
                name.lower(): value
                for name, value in (await direct.get("/headers?q=1", headers={"Host": host, "X-Preview-Token": token})).json()["headers"]
            }

            # A token in the query is traded for node A's cookie, which opens it through B.
            traded = await through_b.get(f"/headers?preview_token={token}", headers={"Host": host})
            assert traded.status_code == 302 and traded.headers["location"] == "/headers"
            cookie = traded.headers["set-cookie"].split(";")[0]
            assert cookie == f"corral_preview={token}"
            assert (await through_b.get("/headers", headers={"Host": host, "Cookie": cookie})).status_code == 200

            # A body of 5 MB goes through whole, and a slow answer comes chunk by chunk.
            body = os.urandom(5 * 1000 * 1000)
            posted = await through_b.post("/upload", content=body, headers={"Host": host, "X-Preview-Token": token})
            assert posted.status_code == 200 and posted.json() == {"received": len(body)}
            async with through_b.stream("GET", "/slow", headers={"Host": host, "X-Preview-Token": token}) as slow:
                chunks = slow.aiter_raw()
                assert await chunks.__anext__() == b"first\n"  # before the app was told to go on
                released = await api.post(cluster.api(f"/sandboxes/{sid}/exec"), json={"command": "touch /tmp/release"})
                assert released.status_code == 200, released.text
                assert b"".join([chunk async for chunk in chunks]) == b"second\n"

            # A forged relay header sent straight to A is dropped: the app sees the real address.
            forged = f"node-b 198.51.100.7 {int(time.time())} {'0' * 64}"
            seen = (await direct.get("/headers", headers={"Host": host, "X-Preview-Token": token, RELAY_HEADER: forged})).json()
            headers = {name.lower(): value for name, value in seen["headers"]}
            assert headers["x-forwarded-for"] == BROWSER and RELAY_HEADER not in headers

        # The app's own WebSocket, through B.
        async with websocket(cluster.b_preview, host, "/ws", cookie=f"corral_preview={token}") as ws:
            await ws.send_message("over two routers")
            assert await ws.get_message() == "echo: over two routers"
        refused_ws, _ = await raw_upgrade(cluster.b_preview, host, "/ws")
        assert refused_ws == 401


async def test_node_bs_tls_edge_serves_a_sandbox_of_node_a(cluster: Cluster) -> None:
    """HTTPS through node B's Caddy (a certificate for the host, asked of B's
    `/tls/ask`), B's router, then A's router: the app answers, and only with a token."""
    async with httpx.AsyncClient(timeout=120, headers=cluster.bearer) as api, app_sandbox(cluster, api) as app:
        with trio.fail_after(30):
            while not cluster.b_edge_root.exists():  # Caddy makes its internal CA when it starts
                await trio.sleep(0.1)
        trust = ssl.create_default_context(cafile=str(cluster.b_edge_root))
        async with httpx.AsyncClient(verify=trust, timeout=30) as edge:

            async def https(**headers: str) -> httpx.Response:
                return await edge.get(f"https://127.0.0.1:{cluster.b_edge}/headers", headers={"Host": app.host, **headers},
                                      extensions={"sni_hostname": app.host})

            served = await https(**{"X-Preview-Token": app.token})
            assert served.status_code == 200, served.text
            assert served.json()["path"] == "/headers"
            refused = await https()
            assert (refused.status_code, refused.headers.get("x-corral-preview-error")) == (401, "token_required")


async def test_a_computer_of_node_a_has_its_terminal_and_desktop_through_node_b(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=120, headers=cluster.bearer) as api:
        made = await api.post(f"{cluster.a.base}{API}/computers", json={"name": "Across", "template_type": "svc-desktop"})
        assert made.status_code == 201, made.text
        computer = made.json()
        cid = computer["id"]
        try:
            with trio.fail_after(120):
                while (state := (await api.get(cluster.api(f"/computers/{cid}"))).json())["status"] != "running":
                    assert state["status"] == "provisioning", state
                    await trio.sleep(0.1)
            assert state["node"] == "node-a"
            opened = await api.post(cluster.api(f"/computers/{cid}/terminal"), json={})
            assert opened.status_code == 201, opened.text
            session = opened.json()["data"]
            ws_url = httpx.URL(session["ws_url"])
            host, target = ws_url.host, f"{ws_url.path}?{ws_url.query.decode()}"

            # The terminal's WebSocket through node B's router: a shell on node A's computer
            # (B's own router has no way to it: the computer's actor lives only on A).
            async with websocket(cluster.b_preview, host, target) as ws:
                await read_until(ws, b"# ")
                await ws.send_message(b"echo across-$((6*7))\n")  # binary frames are input
                assert b"across-42\r\n" in await read_until(ws, b"across-42\r\n")
                await ws.send_message("stty size\n")  # and text frames
                assert b"24 80\r\n" in await read_until(ws, b"24 80\r\n")
                await ws.send_message("exit\n")  # the shell ends: the session, and the socket, close
                with trio.fail_after(10):
                    with pytest.raises(ConnectionClosed) as closed:
                        while True:
                            await ws.get_message()
                assert closed.value.reason is not None and closed.value.reason.code == 1000

            # The desktop's RFB stream through B: the VNC server's greeting. Without a token: 401.
            credentials = (await api.get(cluster.api(f"/computers/{cid}/vnc-credentials"))).json()
            stream = httpx.URL(credentials["ws_url"])
            status, greeting = await raw_upgrade(cluster.b_preview, stream.host, f"{stream.path}?{stream.query.decode()}")
            assert (status, greeting[:4]) == (101, b"RFB ")
            assert (await raw_upgrade(cluster.b_preview, stream.host, stream.path))[0] == 401
        finally:
            deleted = await api.delete(cluster.api(f"/computers/{cid}"))
            assert deleted.status_code in (200, 204), deleted.text


async def test_the_nodes_advertise_their_preview_routers(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=30) as api:
        listed = await api.get(f"{cluster.b.base}{API}/admin/nodes", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert listed.status_code == 200, listed.text
    routers = {node["name"]: node["advertise_preview_url"] for node in listed.json()["data"]}
    assert routers == {"node-a": f"http://127.0.0.1:{cluster.a_preview}", "node-b": f"http://127.0.0.1:{cluster.b_preview}"}


# -- the relay itself, on real sockets ---------------------------------------------


PLATFORM = SimpleNamespace(settings=SimpleNamespace(node_name="node-b"), db=SimpleNamespace(dialect="postgresql"), jwt_secret="s")
"""What `RemoteRouters` reads of a node, for the relay's own test."""


def test_a_relay_signature_holds_only_when_fresh_and_of_this_cluster() -> None:
    signer, other_cluster = RelaySigner("cluster secret", "node-b"), RelaySigner("another secret", "node-b")
    signed = signer.sign("203.0.113.9")
    assert RelaySigner("cluster secret", "node-a").check(signed) == ("node-b", "203.0.113.9")
    assert other_cluster.check(signed) is None
    assert signer.check(signed.replace("203.0.113.9", "198.51.100.1")) is None
    node, client, stamp, _ = signed.split(" ")
    stale = str(int(stamp) - 120)
    assert signer.check(f"{node} {client} {stale} {signer.signer.mac(node, client, stale)}") is None
    assert signer.check("junk") is None
    assert router_upstream("node-a", "http://10.0.0.5:8081") is not None
    assert router_upstream("node-a", "") is None


async def test_a_home_router_that_does_not_answer_is_a_503_page() -> None:
    remote = RemoteRouters(PLATFORM)
    dead = router_upstream("node-a", f"http://127.0.0.1:{free_port()}")
    assert dead is not None

    async def resolve(request: PreviewRequest, match: object) -> Any:
        return remote.relay(dead, request.peer, "sandbox x")

    table = RouteTable()
    table.add_pattern("all", r".*", resolve)
    router = PreviewRouter(table)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(router.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.get(f"http://127.0.0.1:{port}/", headers={"Host": "3000-x.sandbox.corral.localhost"})
        nursery.cancel_scope.cancel()
    assert answer.status_code == 503 and answer.headers["x-corral-preview-error"] == "node_unreachable"
    assert answer.headers["retry-after"] == "2" and "node node-a" in answer.text



def test_a_nodes_preview_address_defaults_to_its_advertised_host_and_preview_port(tmp_path: Path) -> None:
    settled = Settings(data_dir=tmp_path, advertise_url="https://node-a.internal:8443", preview_port=9081)
    assert settled.advertise_preview_url == "http://node-a.internal:9081"
    given = Settings(data_dir=tmp_path, advertise_preview_url="http://10.0.0.5:8081/", preview_port=9081)
    assert given.advertise_preview_url == "http://10.0.0.5:8081"
    assert Settings(data_dir=tmp_path, preview_port=0).advertise_preview_url == ""  # chosen at start: not advertised
    parsed = build_parser().parse_args(["serve", "--data-dir", str(tmp_path), "--advertise-preview", "http://10.0.0.9:8081"])
    assert Settings.from_args(parsed).advertise_preview_url == "http://10.0.0.9:8081"
    for bad in ("https://10.0.0.5:8081", "http://10.0.0.5:8081/x", "10.0.0.5:8081", "http://:8081"):
        with pytest.raises(SettingsError, match="CORRAL_ADVERTISE_PREVIEW_URL"):
            Settings(data_dir=tmp_path, advertise_preview_url=bad)


async def test_a_relay_passes_the_request_on_as_it_came_and_the_next_router_adds_the_forwarded_headers() -> None:
    """Two real routers and an app on loopback: router B relays every request to router
    A (as `RemoteRouters.relay` decides), A forwards it to the app, which answers the
    head it got. A client on 127.0.0.2 sends an edge's secret header, a forged relay
    header and an `X-Forwarded-For` of its own."""
    seen: list[tuple[str, bool]] = []

    async def app(stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(65536)
        body = head.split(b"\r\n\r\n")[0]
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        app_port = (await nursery.start(trio.serve_tcp, app, 0))[0].socket.getsockname()[1]

        async def at_a(request: PreviewRequest, match: object) -> Any:
            seen.append((request.peer, request.relayed))
            return Forward(Upstream("127.0.0.1", app_port))

        a_table = RouteTable()
        a_table.add_pattern("all", r".*", at_a)
        a = PreviewRouter(a_table, relay_check=RelaySigner("s", "node-a").check)
        a_port = await nursery.start(a.serve, "127.0.0.1", 0)
        remote = RemoteRouters(PLATFORM)
        home = router_upstream("node-a", f"http://127.0.0.1:{a_port}")
        assert home is not None

        async def at_b(request: PreviewRequest, match: object) -> Any:
            return remote.relay(home, request.peer, "sandbox x")

        b_table = RouteTable()
        b_table.add_pattern("all", r".*", at_b)
        b_port = await nursery.start(PreviewRouter(b_table).serve, "127.0.0.1", 0)
        sent = {"Host": "3000-x.sandbox.corral.localhost", "X-Corral-Edge": "b's secret", RELAY_HEADER: "node-z 1.2.3.4 1 00",
                "X-Forwarded-For": "203.0.113.1", "Cookie": "a=b"}
        async with browser(b_port) as through_b, browser(a_port) as straight_to_a:
            relayed = (await through_b.get("/p?q=1", headers=sent)).text.split("\r\n")
            direct = (await straight_to_a.get("/p?q=1", headers=sent)).text.split("\r\n")
        nursery.cancel_scope.cancel()
    assert relayed[0] == "GET /p?q=1 HTTP/1.1"
    got = {line.split(": ", 1)[0].lower(): line.split(": ", 1)[1] for line in relayed[1:]}
    assert got["host"] == got["x-forwarded-host"] == "3000-x.sandbox.corral.localhost"
    assert got["x-forwarded-for"] == f"203.0.113.1, {BROWSER}" and got["cookie"] == "a=b"
    assert "x-corral-edge" not in got and RELAY_HEADER not in got
    assert direct == relayed  # the app cannot tell
    assert seen == [(BROWSER, True), (BROWSER, False)]  # a forged relay header is no relay

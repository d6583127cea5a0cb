"""Any node answers for every resource (issue 30): a request that reaches a node other
than the resource's home is forwarded there, and the caller cannot tell. Two real
`corral serve` nodes on one real PostgreSQL, each with a runtime of its own (bridge,
subnet, nftables table): a sandbox made through node A lives on A and is used only
through node B (its agent is on A's bridge, which B cannot reach)."""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import h11
import httpx
import pytest
import trio

from corral.actors.nodes.homes import Home, Homes
from corral.actors.sandboxes import SandboxActor
from corral.errors import ApiError
from corral.http.forward import HEADER, POOLED_BODY, Forwarder, _named_resources, forwarding_key
from corral.storage import open_database
from tests.actors.nodes.test_shared_events import NODE_B_HOST, runtime_env
from tests.pg_server import create_database
from tests.serve_process import ADMIN_KEY, corral_serve
from tests.sse_client import open_sse
from tests.support import RUNTIME_SETTINGS, cleanup_host, running_server

API = "/api/v1"
_databases = itertools.count()


@pytest.fixture(autouse=True)
def node_b_host() -> Iterator[None]:
    """Node B's bridge, links and tables, removed after each test (a node leaves them)."""
    yield
    cleanup_host(**{name: NODE_B_HOST[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})


async def test_every_kind_of_call_on_a_sandbox_of_node_a_works_through_node_b(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    url = create_database(postgres_url, f"forwarding_{os.getpid()}_{next(_databases)}")
    common = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", "CORRAL_SSE_HEARTBEAT_SECONDS": "1"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with corral_serve(tmp_path / "a", {**common, **runtime_env(RUNTIME_SETTINGS)}, "--node-name", "node-a") as a, corral_serve(
        tmp_path / "b", {**common, **runtime_env(NODE_B_HOST)}, "--node-name", "node-b"
    ) as b:
        key = a.owner_key("Forwarding", "owner@forwarding.example")
        bearer = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(timeout=60, headers=bearer) as client:
            created = await client.post(f"{a.base}{API}/sandboxes", json={})
            assert created.status_code == 201, created.text
            sandbox = created.json()["data"]
            assert (sandbox["status"], sandbox["node"]) == ("running", "node-a")
            through_b = f"{b.base}{API}/sandboxes/{sandbox['id']}"
            try:
                got = await client.get(through_b)
                assert got.status_code == 200 and got.json()["data"]["id"] == sandbox["id"]

                ran = await client.post(f"{through_b}/exec", json={"command": "echo from-a; hostname"})
                assert ran.status_code == 200, ran.text
                assert ran.json()["stdout"] == f"from-a\nsbx-{sandbox['id'][:8]}\n"

                # A 10 MB upload and its download, both streamed through B.
                payload = os.urandom(10 * 1000 * 1000)
                uploaded = await client.post(
                    f"{through_b}/files/upload", files={"file": ("big.bin", payload)}, data={"path": "/workspace/big.bin"}
                )
                assert uploaded.status_code == 201, uploaded.text
                inside = await client.post(f"{through_b}/exec", json={"command": "sha256sum /workspace/big.bin"})
                assert inside.json()["stdout"].split()[0] == hashlib.sha256(payload).hexdigest()
                downloaded = await client.get(f"{through_b}/files/download", params={"path": "/workspace/big.bin"})
                assert downloaded.status_code == 200 and downloaded.content == payload

                # A process's live output, as SSE, with a resume after the first line.
                started = await client.post(f"{through_b}/processes", json={"cmd": "for i in 1 2 3; do echo n$i; sleep 0.3; done"})
                assert started.status_code == 201, started.text
                stream_url = f"{through_b}/processes/{started.json()['data']['pid']}/stream"
                async with open_sse(client, stream_url, bearer) as stream:
                    frames = await stream.frames_until("exit")
                assert [f.data.get("line") for f in frames] == ["n1", "n2", "n3", None]
                async with open_sse(client, stream_url, {**bearer, "Last-Event-ID": str(frames[0].id)}) as stream:
                    resumed = await stream.frames_until("exit")
                assert [f.data.get("line") for f in resumed] == ["n2", "n3", None]

                # Errors come back as the home gave them.
                missing = await client.get(f"{through_b}/processes/proc_01m8t6k7fh392w37ncfqepgw1s")
                assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
                unauthorized = await client.post(f"{through_b}/exec", json={"command": "true"}, headers={"Authorization": "Bearer msk_nope"})
                assert unauthorized.status_code == 401

                # The work was done on A: B forwarded every one of those calls.
                admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
                on_b = await client.get(f"{b.base}{API}/admin/actors/sandbox/{sandbox['id']}", headers=admin)
                on_a = await client.get(f"{a.base}{API}/admin/actors/sandbox/{sandbox['id']}", headers=admin)
                assert (on_a.status_code, on_b.status_code) == (200, 404), (on_a.text, on_b.text)
                still = await client.get(f"{a.base}{API}/sandboxes/{sandbox['id']}")
                assert still.json()["data"]["status"] == "running"
            finally:
                destroyed = await client.delete(through_b)
                assert destroyed.status_code == 200, destroyed.text
                assert destroyed.json()["data"] == {"id": sandbox["id"], "deleted": True}


async def test_the_callers_address_is_taken_only_from_a_signed_forward(postgres_url: str) -> None:
    url = create_database(postgres_url, f"forwarding_sign_{os.getpid()}_{next(_databases)}")
    db = open_database(url)
    try:
        forwarder = Forwarder(Homes(db, "node-b", shared=True), forwarding_key("cluster-secret"))
        other_cluster = Forwarder(Homes(db, "node-b", shared=True), forwarding_key("another-secret"))
        signed = forwarder.sign("203.0.113.9")

        scope = {"headers": [(b"host", b"x"), (HEADER, signed)], "client": ("10.0.0.1", 5000)}
        assert forwarder.arrived_forwarded(scope)
        assert scope["client"] == ("203.0.113.9", 0) and scope["headers"] == [(b"host", b"x")]

        forged = {"headers": [(HEADER, signed.replace(b"203.0.113.9", b"198.51.100.1"))], "client": ("10.0.0.1", 5000)}
        assert not forwarder.arrived_forwarded(forged)
        assert forged["client"] == ("10.0.0.1", 5000) and forged["headers"] == []
        assert not other_cluster.arrived_forwarded({"headers": [(HEADER, signed)], "client": ("10.0.0.1", 1)})

        node, client, _, _ = signed.decode().split(" ")
        stamp = str(int(time.time()) - 120)
        stale = f"{node} {client} {stamp} {forwarder._signature(node, client, stamp)}".encode()
        assert not forwarder.arrived_forwarded({"headers": [(HEADER, stale)], "client": ("10.0.0.1", 1)})
        await forwarder.aclose()
        await other_cluster.aclose()
    finally:
        await db.close()


async def test_a_home_that_cannot_be_reached_is_a_503_with_the_envelope(postgres_url: str) -> None:
    url = create_database(postgres_url, f"forwarding_down_{os.getpid()}_{next(_databases)}")
    db = open_database(url)
    forwarder = Forwarder(Homes(db, "node-b", shared=True), forwarding_key("s"))
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        await trio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/api/v1/sandboxes/x", "raw_path": b"/api/v1/sandboxes/x",
             "query_string": b"", "headers": [(b"host", b"x")], "client": ("127.0.0.1", 1), "extensions": {"corral.whole_body": b""}}
    try:
        await forwarder.forward(scope, receive, send, Home("node-gone", "http://127.0.0.1:9"))
    finally:
        await forwarder.aclose()
        await db.close()
    assert sent[0]["status"] == 503
    body = sent[1]["body"]
    assert isinstance(body, bytes) and b'"SERVICE_UNAVAILABLE"' in body and b"node-gone" in body



async def test_a_resource_homed_on_a_live_node_is_activated_only_there(tmp_path: Path, postgres_url: str, runtime_host: None) -> None:
    """Whatever on node B reaches for a sandbox of live node A without a request to
    forward (a background job, the preview router) is refused, and the sandbox stays as A
    has it; once A is gone, B may take it up, and finds its instance gone."""
    url = create_database(postgres_url, f"forwarding_home_{os.getpid()}_{next(_databases)}")
    (tmp_path / "a").mkdir()
    with corral_serve(tmp_path / "a", {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", **runtime_env(RUNTIME_SETTINGS)},
                      "--node-name", "node-a") as a:
        key = a.owner_key("Homes", "owner@homes.example")
        async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
            made = await client.post(f"{a.base}{API}/sandboxes", json={})
            assert made.status_code == 201, made.text
            sandbox_id = made.json()["data"]["id"]
            names = {name: NODE_B_HOST[name] for name in ("bridge", "subnet", "nft_table", "link_prefix", "netns_prefix", "cgroup_parent")}
            async with running_server(tmp_path / "b", database_url=url, node_name="node-b", **names) as b:
                with pytest.raises(ApiError) as refused:
                    await b.platform.system.get(SandboxActor, sandbox_id)
                assert refused.value.status == 503 and "lives on node node-a" in refused.value.message
                assert (await client.get(f"{a.base}{API}/sandboxes/{sandbox_id}")).json()["data"]["status"] == "running"
                a.process.kill()  # gone without leaving: lost once its heartbeat is stale
                a.process.wait()
                with trio.fail_after(15):
                    while True:
                        try:
                            await b.platform.system.get(SandboxActor, sandbox_id)
                            break
                        except ApiError:
                            await trio.sleep(0.5)
                record = await b.platform.db.fetch_one("SELECT status, error FROM sandboxes WHERE id = ?", (sandbox_id,))
                assert record is not None and record["status"] == "error" and "gone" in str(record["error"])


SID = "0b0e4c4e-7f7d-4c0b-9a55-3c1d2a7e9f10"
CID = "1c1f5d5f-8080-4d1c-8b66-4d2e3b8fa021"


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/api/v1/deployments/d1/publish", {"source_sandbox_id": SID}, [("sandboxes", SID)]),
        ("/api/v1/agent-runs", {"sandbox_id": SID.upper()}, [("sandboxes", SID)]),
        ("/api/v1/agent-runs", {"computer_id": CID}, [("computers", CID)]),
        ("/api/v1/agent-runs", {"target_id": CID, "sandbox_id": SID}, [("sandboxes", CID)]),
        ("/api/v1/agent-runs", {"target_id": CID, "target_kind": "computer"}, [("computers", CID)]),
        ("/api/v1/agent-runs", {"target_id": SID}, [("sandboxes", SID), ("computers", SID)]),
        ("/api/v1/agent-runs", {"target_id": "../x"}, []),
        ("/api/v1/agent-runs", {"sandbox_id": 7}, []),
        ("/api/v1/agent-runs", {}, []),
    ],
)
def test_a_publish_or_a_new_run_goes_where_the_resource_its_body_names_lives(
    path: str, body: dict[str, object], named: list[tuple[str, str]]
) -> None:
    """Read as the routes read the body (`target_id` first, then `sandbox_id`, then
    `computer_id`); what cannot be an id names nothing, and the route answers it."""
    assert _named_resources(path, body) == named


async def test_a_small_body_that_came_after_its_head_is_forwarded_on_a_kept_alive_connection(postgres_url: str) -> None:
    """httpx writes a JSON body after the head: the forwarder reads it whole first, so
    two forwarded POSTs share one connection to the home instead of a connect each; a
    body past `POOLED_BODY` is still streamed on."""
    url = create_database(postgres_url, f"forwarding_pooled_{os.getpid()}_{next(_databases)}")
    db = open_database(url)
    forwarder = Forwarder(Homes(db, "node-b", shared=True), forwarding_key("s"))
    connections: list[int] = []
    bodies: list[bytes] = []

    async def home(stream: trio.SocketStream) -> None:
        connections.append(1)
        conn = h11.Connection(h11.SERVER)
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                bodies.append(body)
                body = b""
                answer = h11.Response(status_code=200, headers=[(b"content-length", b"2")])
                await stream.send_all(conn.send(answer) + conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return

    async def post(body: bytes, chunks: int) -> list[dict[str, object]]:
        pieces = [body[i * len(body) // chunks : (i + 1) * len(body) // chunks] for i in range(chunks)]
        messages = [{"type": "http.request", "body": piece, "more_body": i < chunks - 1} for i, piece in enumerate(pieces)]
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            if messages:
                return messages.pop(0)
            await trio.sleep_forever()
            raise AssertionError

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/api/v1/sandboxes/x/exec", "raw_path": b"/api/v1/sandboxes/x/exec",
                 "query_string": b"", "headers": [(b"host", b"x"), (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 1), "extensions": {}}
        assert await forwarder.forward(scope, receive, send, Home("node-a", f"http://127.0.0.1:{port}"))
        return sent

    try:
        async with trio.open_nursery() as nursery:
            [listener] = await nursery.start(functools.partial(trio.serve_tcp, home, 0, host="127.0.0.1"))
            port = listener.socket.getsockname()[1]
            small = [await post(b'{"command": "true"}', 2) for _ in range(2)]
            assert [sent[0]["status"] for sent in small] == [200, 200]
            assert len(connections) == 1
            big = os.urandom(POOLED_BODY + 1)
            assert (await post(big, 3))[0]["status"] == 200
            assert bodies == [b'{"command": "true"}', b'{"command": "true"}', big]
            nursery.cancel_scope.cancel()
    finally:
        await forwarder.aclose()
        await db.close()

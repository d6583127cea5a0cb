"""Three nodes, each in a network namespace of its own (issue 30, "Tests"): resources
made through node A are used through the two nodes that are not their home, which reach
the home (and PostgreSQL) only at advertised addresses (tests/actors/nodes/cluster.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from corral.vm.postgres import replica_name
from tests.actors.nodes.cluster import LINKS, Cluster, Node, stop_node, three_nodes
from tests.http.pg_wire_client import SOURCE as PG_CLIENT
from tests.sse_client import open_sse
from tests.support import ADMIN_KEY

API = "/api/v1"
APP_PORT = 8000


@pytest.fixture
def cluster(tmp_path: Path, runtime_host: None) -> Iterator[Cluster]:
    with three_nodes(tmp_path) as made:
        yield made


def not_home(cluster: Cluster, home: str) -> tuple[Node, Node]:
    """The two nodes that are not `home`, in name order."""
    first, second = (node for name, node in sorted(cluster.nodes.items()) if name != home)
    return first, second


async def test_a_sandbox_made_through_a_is_used_through_both_other_nodes(cluster: Cluster) -> None:
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Three nodes", "owner@three-nodes.example")
    bearer = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=60, headers=bearer) as client:
        created = await client.post(f"{a.base}{API}/sandboxes", json={})
        assert created.status_code == 201, created.text
        sandbox = created.json()["data"]
        sid, home = sandbox["id"], sandbox["node"]
        assert home in cluster.nodes and sandbox["status"] == "running"
        x, y = not_home(cluster, home)
        on_x, on_y = f"{x.base}{API}/sandboxes/{sid}", f"{y.base}{API}/sandboxes/{sid}"
        try:
            # Exec through each of the two others: it runs in the sandbox, on its home.
            for through in (on_x, on_y):
                ran = await client.post(f"{through}/exec", json={"command": "echo hi; hostname"})
                assert ran.status_code == 200, ran.text
                assert ran.json()["stdout"] == f"hi\nsbx-{sid[:8]}\n"
            admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
            listed = (await client.get(f"{y.base}{API}/admin/nodes", headers=admin)).json()["data"]
            assert {n["name"]: (n["advertise_url"], n["advertise_preview_url"]) for n in listed} == {
                name: (node.base, node.preview) for name, node in cluster.nodes.items()
            }
            actors = {name: (await client.get(f"{node.base}{API}/admin/actors/sandbox/{sid}", headers=admin)).status_code
                      for name, node in cluster.nodes.items()}
            assert actors == {name: 200 if name == home else 404 for name in cluster.nodes}

            # 10 MB up through one, down through the other, byte for byte.
            payload = os.urandom(10 * 1000 * 1000)
            uploaded = await client.post(f"{on_x}/files/upload", files={"file": ("big.bin", payload)},
                                         data={"path": "/workspace/big.bin"})
            assert uploaded.status_code == 201, uploaded.text
            downloaded = await client.get(f"{on_y}/files/download", params={"path": "/workspace/big.bin"})
            assert downloaded.status_code == 200
            assert hashlib.sha256(downloaded.content).hexdigest() == hashlib.sha256(payload).hexdigest()
            inside = await client.post(f"{on_y}/exec", json={"command": "sha256sum /workspace/big.bin"})
            assert inside.json()["stdout"].split()[0] == hashlib.sha256(payload).hexdigest()

            # A process's output stream through Y, then resumed after its first line.
            started = await client.post(f"{on_x}/processes", json={"cmd": "for i in 1 2 3; do echo n$i; sleep 0.3; done"})
            assert started.status_code == 201, started.text
            stream_url = f"{on_y}/processes/{started.json()['data']['pid']}/stream"
            async with open_sse(client, stream_url, bearer) as stream:
                frames = await stream.frames_until("exit")
            assert [f.data.get("line") for f in frames] == ["n1", "n2", "n3", None]
            async with open_sse(client, stream_url, {**bearer, "Last-Event-ID": str(frames[0].id)}) as stream:
                resumed = await stream.frames_until("exit")
            assert [f.data.get("line") for f in resumed] == ["n2", "n3", None]

            # A preview of an exposed port through X's preview router, with a token only.
            wrote = await client.post(f"{on_y}/files/write", json={"path": "/workspace/site/hello.txt", "content": "from home"})
            assert wrote.status_code == 201, wrote.text
            served = await client.post(
                f"{on_x}/processes", json={"cmd": f"python3 -m http.server {APP_PORT} --directory /workspace/site"}
            )
            assert served.status_code == 201, served.text
            exposed = await client.post(f"{on_y}/expose", json={"port": APP_PORT})
            assert exposed.status_code == 200, exposed.text
            minted = await client.post(f"{on_x}/preview-token", json={})
            assert minted.status_code == 200, minted.text
            host = f"{APP_PORT}-{sandbox['slug']}.sandbox.corral.localhost"
            token = minted.json()["data"]["token"]
            async with httpx.AsyncClient(base_url=x.preview, timeout=30) as browser:
                with trio.fail_after(30):  # the server starts listening
                    while (page := await browser.get("/hello.txt", headers={"Host": host, "X-Preview-Token": token})).status_code != 200:
                        await trio.sleep(0.1)
                assert page.text == "from home"
                refused = await browser.get("/hello.txt", headers={"Host": host})
                assert (refused.status_code, refused.headers.get("x-corral-preview-error")) == (401, "token_required")
        finally:
            destroyed = await client.delete(on_y)
            assert destroyed.status_code == 200, destroyed.text
        gone = await client.get(on_x)
        assert gone.status_code == 404, gone.text


def query(url: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True, connect_timeout=20) as conn:
        return conn.execute(statement).fetchall()


def execute(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True, connect_timeout=20) as conn:
        conn.execute(statement)


async def new_database(client: httpx.AsyncClient, node: Node, name: str) -> str:
    """A database made through `node` (its id; it is `creating`)."""
    created = await client.post(f"{node.base}{API}/databases", json={"name": name})
    assert created.status_code == 202, created.text
    return str(created.json()["data"]["id"])


async def test_a_database_made_through_a_is_reached_at_its_homes_address(cluster: Cluster) -> None:
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Three nodes db", "owner@three-nodes-db.example")
    sandboxes: list[str] = []
    reached: set[str] = set()
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        did = await new_database(client, a, "orders")
        try:
            with trio.fail_after(120):
                while (record := (await client.get(f"{a.base}{API}/databases/{did}")).json()["data"])["status"] != "running":
                    assert record["status"] == "creating", record
                    await trio.sleep(0.2)
            home = record["node"]
            x, y = not_home(cluster, home)
            assert (await client.get(f"{y.base}{API}/databases/{did}")).json()["data"]["status"] == "running"
            credentials = await client.get(f"{x.base}{API}/databases/{did}/credentials")
            assert credentials.status_code == 200, credentials.text
            url = credentials.json()["data"]["url"]
            assert httpx.URL(url).host == cluster.nodes[home].address and url.startswith("postgresql://")
            assert httpx.URL(url).host.startswith(f"{LINKS}.")
            rows = await trio.to_thread.run_sync(query, url, "SELECT 6 * 7")
            assert rows == [(42,)]

            # The tenant's sandboxes reach it at `internal_url` from every node: its host is
            # each node's own bridge, whose proxy relays to the home.
            internal = credentials.json()["data"]["internal_url"]
            assert httpx.URL(internal).host == "host.corral.internal"
            for node in (x, y):
                made = await client.post(f"{node.base}{API}/sandboxes", json={"metadata": {"on": node.name}})
                assert made.status_code == 201, made.text
                sandbox = made.json()["data"]
                sandboxes.append(sandbox["id"])
                wrote = await client.post(f"{a.base}{API}/sandboxes/{sandbox['id']}/files/write", json={"path": "/tmp/pgc.py", "content": PG_CLIENT})
                assert wrote.status_code == 201, wrote.text
                ran = await client.post(f"{a.base}{API}/sandboxes/{sandbox['id']}/exec", json={
                    "command": f"python3 /tmp/pgc.py {shlex.quote(internal)} 'SELECT 6 * 7'"})
                assert (ran.json()["exit_code"], ran.json()["stdout"].strip()) == (0, "42"), (sandbox["node"], ran.text)
                reached.add(str(sandbox["node"]))
            assert home not in reached and reached, reached  # from other nodes than its own
        finally:
            deleted = await client.delete(f"{x.base}{API}/databases/{did}")
            assert deleted.status_code in (200, 202, 204), deleted.text
            for sandbox_id in sandboxes:
                await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")


async def until_status(client: httpx.AsyncClient, node: Node, database_id: str, status: str, seconds: float) -> dict[str, object]:
    with trio.fail_after(seconds):
        while True:
            answer = await client.get(f"{node.base}{API}/databases/{database_id}")
            if answer.status_code == 200 and (record := answer.json()["data"])["status"] == status:
                return dict(record)
            await trio.sleep(0.1)


async def credentials_url(client: httpx.AsyncClient, node: Node, database_id: str) -> str:
    answer = await client.get(f"{node.base}{API}/databases/{database_id}/credentials")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["data"]["url"])


async def until_rows(url: str, statement: str, want: list[tuple[object, ...]], seconds: float = 30) -> None:
    """Until `statement` at `url` answers `want`; a timeout says what it answered last."""
    last: object = "nothing yet"
    with trio.move_on_after(seconds):
        while True:
            started = trio.current_time()
            try:
                last = await trio.to_thread.run_sync(query, url, statement)
            except psycopg.Error as error:
                last = f"{type(error).__name__}: {error}"
            if last == want:
                return
            last = f"{last!r} after {trio.current_time() - started:.1f} s"
            await trio.sleep(0.1)
    raise AssertionError(f"{statement!r} at {url} did not answer {want} in {seconds} s; last: {last}")


async def until_waiting_for(url: str, replica_ids: list[str], seconds: float = 10) -> None:
    """Until the primary at `url` acknowledges a commit only once each of these replicas flushed it."""
    names = ", ".join(f'"{name}"' for name in sorted(replica_name(rid) for rid in replica_ids))
    want = [(f"ANY {len(replica_ids)} ({names})",)] if replica_ids else [("",)]
    await until_rows(url, "SHOW synchronous_standby_names", want, seconds)


async def test_replicas_live_on_other_nodes_take_every_acknowledged_write_and_one_is_promoted_when_the_primarys_node_dies(
    cluster: Cluster,
) -> None:
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Failover", "owner@failover.example")
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        did = await new_database(client, a, "orders")
        primary = await until_status(client, a, did, "running", 120)
        home = cluster.nodes[str(primary["node"])]
        x, y = not_home(cluster, str(home.name))
        url = await credentials_url(client, x, did)
        with psycopg.connect(url, autocommit=True, connect_timeout=20) as conn:
            conn.execute("CREATE TABLE t (v int)")
            conn.execute("INSERT INTO t VALUES (1), (2)")

        # Replicas are placed away from the primary's node, whichever node the request reached.
        replicas: dict[str, Node] = {}
        for _ in range(2):
            made = await client.post(f"{home.base}{API}/databases/{did}/replicas", json={})
            assert made.status_code == 202, made.text
            rid = made.json()["data"]["id"]
            replica = await until_status(client, y, rid, "running", 120)
            assert replica["node"] != home.name and replica["role"] == "replica", replica
            replicas[rid] = cluster.nodes[str(replica["node"])]
        assert sorted(node.name for node in replicas.values()) == sorted((x.name, y.name))  # the least loaded first
        (rid, replica_node), (other_rid, other_node) = sorted(replicas.items(), key=lambda item: item[1].name)
        replica_url = await credentials_url(client, x, rid)
        assert httpx.URL(replica_url).host == replica_node.address
        listed = (await client.get(f"{x.base}{API}/databases/{did}/replicas")).json()["data"]
        assert sorted(r["id"] for r in listed) == sorted(replicas)
        await until_waiting_for(url, list(replicas))  # each commit now waits for both

        # One replica's machine dies: commits wait until its node is seen lost, then go on without it.
        cluster.kill_machine(other_node)
        killed = trio.current_time()
        assert await trio.to_thread.run_sync(query, url, "INSERT INTO t VALUES (3) RETURNING v") == [(3,)]
        waited = trio.current_time() - killed
        print(f"\na commit while a replica's machine was dead was acknowledged after {waited:.2f} s (its node seen lost)")
        assert waited < 20
        await until_waiting_for(url, [rid])

        # The primary's machine dies right after a commit was acknowledged: the replica
        # left is promoted into the primary, with that commit.
        assert await trio.to_thread.run_sync(query, url, "INSERT INTO t VALUES (4) RETURNING v") == [(4,)]
        cluster.kill_machine(home)
        killed = trio.current_time()
        seen: list[tuple[object, object]] = []
        with trio.fail_after(30):
            while True:
                answer = await client.get(f"{replica_node.base}{API}/databases/{did}")
                record = answer.json()["data"] if answer.status_code == 200 else {}
                if not seen or seen[-1] != (record.get("status"), record.get("node")):
                    seen.append((record.get("status"), record.get("node")))
                if record.get("status") == "running" and record.get("node") == replica_node.name:
                    break
                assert record.get("status") != "error", record  # never NODE_LOST: it had a replica
                await trio.sleep(0.1)
        # Taken over, it read `restarting` on its new node until the promoted server ran.
        print(f"the database through its new node, after the kill: {seen}")
        assert set(seen[:-1]) <= {(None, None), ("running", home.name), ("restarting", replica_node.name)}, seen
        new_url = await credentials_url(client, replica_node, did)
        assert httpx.URL(new_url).host == replica_node.address and httpx.URL(new_url).port == httpx.URL(url).port
        # `running` on the new node: its url answers at once, with every acknowledged write.
        assert await trio.to_thread.run_sync(query, new_url, "SELECT v FROM t ORDER BY v") == [(1,), (2,), (3,), (4,)]
        answering = trio.current_time() - killed
        print(f"kill -9 of the primary's machine -> the promoted replica answering at the database's url: {answering:.2f} s")
        assert answering < 30
        assert await trio.to_thread.run_sync(query, new_url, "INSERT INTO t VALUES (5) RETURNING v") == [(5,)]
        assert await trio.to_thread.run_sync(query, new_url, "SHOW synchronous_standby_names") == [("",)]
        assert (await client.get(f"{replica_node.base}{API}/databases/{rid}")).status_code == 404  # it became the primary
        left = (await client.get(f"{replica_node.base}{API}/databases/{did}/replicas")).json()["data"]
        assert [r["id"] for r in left if r["status"] != "error"] == [], left

        # The dead node comes back: the primary is no longer its own, and its old server goes.
        cluster.restart(home)
        with trio.fail_after(30):
            while "taken over by another node while this node was lost" not in home.log():
                await trio.sleep(0.2)
        assert (await client.get(f"{home.base}{API}/databases/{did}")).json()["data"]["node"] == replica_node.name
        assert await trio.to_thread.run_sync(query, new_url, "SELECT count(*) FROM t") == [(5,)]
        for gone in (other_rid, did):
            deleted = await client.delete(f"{home.base}{API}/databases/{gone}")
            assert deleted.status_code in (200, 202, 204), deleted.text


async def test_when_one_of_two_replicas_is_promoted_the_other_ends_and_commits_do_not_wait_for_it(cluster: Cluster) -> None:
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Two replicas", "owner@two-replicas.example")
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        did = await new_database(client, a, "ledger")
        home = cluster.nodes[str((await until_status(client, a, did, "running", 120))["node"])]
        url = await credentials_url(client, home, did)
        with psycopg.connect(url, autocommit=True, connect_timeout=20) as conn:
            conn.execute("CREATE TABLE t (v int)")
        replicas = []
        for _ in range(2):
            made = await client.post(f"{home.base}{API}/databases/{did}/replicas", json={})
            assert made.status_code == 202, made.text
            replicas.append(str(made.json()["data"]["id"]))
        for rid in replicas:
            await until_status(client, home, rid, "running", 120)
        await until_waiting_for(url, replicas)
        assert await trio.to_thread.run_sync(query, url, "INSERT INTO t VALUES (1) RETURNING v") == [(1,)]

        cluster.kill_machine(home)
        survivors = not_home(cluster, home.name)
        with trio.fail_after(30):
            while True:
                answer = await client.get(f"{survivors[0].base}{API}/databases/{did}")
                record = answer.json()["data"] if answer.status_code == 200 else {}
                if record.get("status") == "running" and record.get("node") != home.name:
                    break
                await trio.sleep(0.1)
        new_home = cluster.nodes[str(record["node"])]
        new_url = await credentials_url(client, new_home, did)
        await until_rows(new_url, "SELECT v FROM t", [(1,)])
        since = trio.current_time()
        assert await trio.to_thread.run_sync(query, new_url, "INSERT INTO t VALUES (2) RETURNING v") == [(2,)]
        assert trio.current_time() - since < 3  # not waiting for the replica that streamed from the lost server
        [other] = [rid for rid in replicas if (await client.get(f"{new_home.base}{API}/databases/{rid}")).status_code == 200]
        ended = await until_status(client, new_home, other, "error", 15)
        assert "its primary was promoted from another replica" in str(ended["error"]), ended
        assert await trio.to_thread.run_sync(query, new_url, "SHOW synchronous_standby_names") == [("",)]
        for gone in (other, did):
            deleted = await client.delete(f"{new_home.base}{API}/databases/{gone}")
            assert deleted.status_code in (200, 202, 204), deleted.text


@asynccontextmanager
async def websocket(router: Node, host: str, target: str) -> AsyncIterator[WebSocketConnection]:
    """A WebSocket to `target` of `host` through `router`'s preview router."""
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream(router.address, int(httpx.URL(router.preview).port or 80))
        ws = await wrap_client_stream(nursery, stream, host, target)
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


async def test_a_computers_terminal_made_through_a_is_opened_through_one_node_and_used_through_the_other(
    cluster: Cluster,
) -> None:
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Three nodes terminal", "owner@three-nodes-term.example")
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        made = await client.post(f"{a.base}{API}/computers", json={"name": "Across", "template_type": "svc-desktop"})
        assert made.status_code == 201, made.text
        cid = made.json()["id"]
        try:
            with trio.fail_after(120):
                while (state := (await client.get(f"{a.base}{API}/computers/{cid}")).json())["status"] != "running":
                    assert state["status"] == "provisioning", state
                    await trio.sleep(0.2)
            x, y = not_home(cluster, state["node"])
            opened = await client.post(f"{x.base}{API}/computers/{cid}/terminal", json={})
            assert opened.status_code == 201, opened.text
            ws_url = httpx.URL(opened.json()["data"]["ws_url"])
            async with websocket(y, ws_url.host, f"{ws_url.path}?{ws_url.query.decode()}") as ws:
                await read_until(ws, b"# ")
                await ws.send_message(b"echo across-$((6*7)); hostname\n")
                assert b"across-42\r\n" in await read_until(ws, b"across-42\r\n")
                await ws.send_message("exit\n")
                with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
                    while True:
                        await ws.get_message()
                assert closed.value.reason is not None and closed.value.reason.code == 1000
            upgrade = {"Host": ws_url.host, "Upgrade": "websocket", "Connection": "Upgrade",
                       "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
            refused = await client.get(f"{y.preview}{ws_url.path}", headers=upgrade)  # no `auth`: the home's router refuses
            assert (refused.status_code, refused.headers.get("x-corral-preview-error")) == (401, "token_required")
        finally:
            deleted = await client.delete(f"{y.base}{API}/computers/{cid}")
            assert deleted.status_code in (200, 204), deleted.text


async def test_an_agent_run_made_followed_and_canceled_through_the_other_nodes_runs_on_its_sandboxs(cluster: Cluster) -> None:
    """A run is made through one node that is not its sandbox's, streamed through the
    other, canceled through the first: its process runs, stops and is recorded on the
    sandbox's node, and the stream sees it end."""
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Runs", "owner@runs.example")
    bearer = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=120, headers=bearer) as client:
        created = await client.post(f"{a.base}{API}/sandboxes", json={})
        assert created.status_code == 201, created.text
        sid, home = created.json()["data"]["id"], created.json()["data"]["node"]
        x, y = not_home(cluster, home)
        try:
            waited = await client.post(f"{x.base}{API}/agent-runs", json={
                "sandbox_id": sid, "prompt": "p", "command": "echo ran in $(hostname)",
            })
            assert waited.status_code == 200, waited.text
            assert (waited.json()["data"]["status"], waited.json()["data"]["output"]) == ("succeeded", f"ran in sbx-{sid[:8]}\n")

            started = await client.post(f"{y.base}{API}/agent-runs", json={
                "target_id": sid, "prompt": "p", "command": "echo started; sleep 600", "wait": False,
            })
            assert started.status_code == 200, started.text
            run_id = started.json()["data"]["id"]
            async with open_sse(client, f"{x.base}{API}/agent-runs/{run_id}/events?stream=true", bearer) as stream:
                assert (await stream.next_frame()).event == "created"
                with trio.fail_after(20):
                    while "sleep 600" not in (await client.post(f"{y.base}{API}/sandboxes/{sid}/exec", json={"command": "ps -eo args"})).json()["stdout"]:
                        await trio.sleep(0.1)
                canceled = await client.post(f"{x.base}{API}/agent-runs/{run_id}/cancel")
                assert canceled.status_code == 200, canceled.text
                assert (canceled.json()["data"]["status"], canceled.json()["data"]["output"]) == ("canceled", "started\n")
                frames = await stream.frames_until("canceled", timeout=20)
                assert frames[-1].data["run_id"] == run_id
            with trio.fail_after(15):  # the process is gone from the sandbox, and its record says killed
                while "sleep 600" in (await client.post(f"{x.base}{API}/sandboxes/{sid}/exec", json={"command": "ps -eo args"})).json()["stdout"]:
                    await trio.sleep(0.1)
            process_id = canceled.json()["data"]["metadata"]["agent_process"]["process_id"]
            process = (await client.get(f"{y.base}{API}/sandboxes/{sid}/processes/{process_id}")).json()["data"]
            assert process["status"] == "killed", process
            admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
            actors = {name: (await client.get(f"{node.base}{API}/admin/actors/agent_run/{run_id}", headers=admin)).status_code
                      for name, node in cluster.nodes.items()}
            assert actors[x.name] == actors[y.name] == 404, actors
            again = await client.post(f"{y.base}{API}/agent-runs/{run_id}/cancel")
            assert again.status_code == 409 and again.json()["error"]["code"] == "INVALID_STATE", again.text
        finally:
            destroyed = await client.delete(f"{y.base}{API}/sandboxes/{sid}")
            assert destroyed.status_code == 200, destroyed.text


def holders(cluster: Cluster, sha256: str) -> list[str]:
    """The nodes whose blob store holds the blob."""
    return sorted(name for name in cluster.nodes
                  if (cluster.root / name / "data" / "blobs" / "sha256" / sha256[:2] / sha256).is_file())


async def archive_when_ready(client: httpx.AsyncClient, cluster: Cluster, node: Node, cid: str, sid: str) -> str:
    """The digest of the snapshot's archive, once the snapshot is `ready` (kept on two nodes)."""
    with trio.fail_after(60):
        while (snap := (await client.get(f"{node.base}{API}/computers/{cid}/snapshots/{sid}")).json()["data"])["status"] != "ready":
            assert snap["status"] == "creating", snap
            await trio.sleep(0.1)
    [(archive,)] = await trio.to_thread.run_sync(
        query, cluster.database_url, f"SELECT archive_sha256 FROM computer_snapshots WHERE id = '{sid}'"
    )
    assert isinstance(archive, str)
    return archive


async def snapshot_archive(client: httpx.AsyncClient, cluster: Cluster, node: Node, cid: str, name: str) -> str:
    """A new snapshot of the computer, taken through `node`: its archive's digest once ready."""
    taken = await client.post(f"{node.base}{API}/computers/{cid}/snapshots", json={"name": name})
    assert taken.status_code == 201, taken.text
    return await archive_when_ready(client, cluster, node, cid, taken.json()["data"]["id"])


async def computer_until(client: httpx.AsyncClient, node: Node, cid: str, ok: object, seconds: float = 120) -> dict[str, object]:
    """The computer once `ok(record)`; a record in `error` ends the wait at once."""
    with trio.fail_after(seconds):
        while True:
            answer = await client.get(f"{node.base}{API}/computers/{cid}")
            record: dict[str, object] = answer.json() if answer.status_code == 200 else {}
            if record and ok(record):  # type: ignore[operator]
                return record
            assert record.get("status") != "error", record
            await trio.sleep(0.1)


async def computer_run(client: httpx.AsyncClient, node: Node, cid: str, command: str) -> dict[str, object]:
    answer = await client.post(f"{node.base}{API}/computers/{cid}/exec", json={"command": command})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_a_computers_snapshot_is_kept_on_two_nodes_used_on_a_third_and_brings_it_back_when_its_node_dies(
    cluster: Cluster,
) -> None:
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Phoenix", "owner@phoenix.example")
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        made = await client.post(f"{a.base}{API}/computers", json={"name": "Phoenix", "template_type": "svc-desktop"})
        assert made.status_code == 201, made.text
        cid = made.json()["id"]
        state = await computer_until(client, a, cid, lambda r: r["status"] == "running")
        home = cluster.nodes[str(state["node"])]
        x, y = not_home(cluster, home.name)
        older_archive = await snapshot_archive(client, cluster, x, cid, "older")
        await computer_run(client, x, cid, "echo kept > /root/kept.txt")

        asked = trio.current_time()
        taken = await client.post(f"{y.base}{API}/computers/{cid}/snapshots", json={"name": "before"})
        assert taken.status_code == 201, taken.text
        sid = taken.json()["data"]["id"]
        archive = await archive_when_ready(client, cluster, x, cid, sid)
        size = (cluster.root / home.name / "data" / "blobs" / "sha256" / archive[:2] / archive).stat().st_size
        print(f"\nsnapshot ready, kept on two nodes ({size / 1e6:.1f} MB archive): {trio.current_time() - asked:.2f} s")
        kept_on = holders(cluster, archive)
        assert home.name in kept_on and len(kept_on) == 2, kept_on  # its node, and one other
        # Not a node: asking one to hold or to drop a blob is the fetch's 404, and does nothing.
        for method in ("POST", "DELETE"):
            for headers in ({}, {"X-Corral-Blob-Request": f"{home.name} {int(time.time())} {'0' * 64}"}):
                refused = await client.request(method, f"{x.base}{API}/nodes/blobs/{archive}/hold", headers=headers)
                assert refused.status_code == 404 and refused.json()["error"]["code"] == "NOT_FOUND", refused.text
        assert holders(cluster, archive) == kept_on

        # A new computer from it is placed on a less loaded node, which fetches the files.
        copy = await client.post(f"{x.base}{API}/computers", json={"name": "Copy", "template_type": "svc-desktop", "snapshot_id": sid})
        assert copy.status_code == 201, copy.text
        copy_id = copy.json()["id"]
        copied = await computer_until(client, y, copy_id, lambda r: r["status"] == "running")
        assert copied["node"] != home.name, copied
        assert (await computer_run(client, home, copy_id, "cat /root/kept.txt"))["output"] == "kept\n"
        assert (await client.delete(f"{home.base}{API}/computers/{copy_id}")).status_code in (200, 204)

        # Its node dies: the computer comes back on another node from the snapshot.
        await computer_run(client, x, cid, "echo later > /root/later.txt")
        cluster.kill_machine(home)
        killed = trio.current_time()
        back = await computer_until(client, x, cid, lambda r: r["status"] == "running" and r["node"] != home.name, seconds=90)
        elapsed = trio.current_time() - killed
        print(f"\nkill -9 of the computer's machine -> running again on {back['node']} from its snapshot: {elapsed:.1f} s")
        survivor = y if back["node"] == x.name else x
        ran = await computer_run(client, survivor, cid, "cat /root/kept.txt; test -e /root/later.txt; echo $?")
        assert ran["output"] == "kept\n1\n", ran  # as it was at the snapshot: what came after is gone with the node
        events = await trio.to_thread.run_sync(
            query, cluster.database_url, f"SELECT data FROM events WHERE resource_id = '{cid}' AND type = 'computer.restored'"
        )
        assert [json.loads(str(data))["lost_node"] for data, in events] == [home.name], events

        # The older snapshot's archive had one copy left among the survivors: the other
        # one is made to fetch it, so two live nodes hold it again.
        with trio.fail_after(30):
            while [name for name in holders(cluster, older_archive) if name != home.name] != sorted([x.name, y.name]):
                await trio.sleep(0.2)
        # The lost node's copy no longer counts: its row goes once the new copy is noted
        # (the same round of the job, a moment after the file is in place).
        copies: list[tuple[object, ...]] = []
        with trio.move_on_after(30):
            while copies != [(x.name,), (y.name,)]:
                copies = await trio.to_thread.run_sync(
                    query, cluster.database_url, f"SELECT node FROM blob_copies WHERE sha256 = '{older_archive}' ORDER BY node"
                )
                await trio.sleep(0.2)
        assert copies == [(x.name,), (y.name,)], copies

        # The snapshot goes: so does its archive, on every live node.
        deleted = await client.delete(f"{survivor.base}{API}/computers/{cid}/snapshots/{sid}")
        assert deleted.status_code == 200, deleted.text
        assert [name for name in holders(cluster, archive) if name != home.name] == []

        cluster.restart(home)
        with trio.fail_after(30):
            while "taken over by another node while this node was lost" not in home.log():
                await trio.sleep(0.2)
        assert (await computer_run(client, home, cid, "cat /root/kept.txt"))["output"] == "kept\n"
        assert (await client.delete(f"{home.base}{API}/computers/{cid}")).status_code in (200, 204)


async def sandbox_until(client: httpx.AsyncClient, node: Node, sid: str, ok: object, seconds: float = 60) -> dict[str, object]:
    with trio.fail_after(seconds):
        while True:
            answer = await client.get(f"{node.base}{API}/sandboxes/{sid}")
            record: dict[str, object] = answer.json()["data"] if answer.status_code == 200 else {}
            if record and ok(record):  # type: ignore[operator]
                return record
            assert record.get("status") != "error", record
            await trio.sleep(0.1)


async def drained_of_all_but(client: httpx.AsyncClient, cluster: Cluster, drained: Node, left: int) -> None:
    """The drained node holds `left` resources, and no move is under way."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    nodes = {n["name"]: n for n in (await client.get(f"{drained.base}{API}/admin/nodes", headers=admin)).json()["data"]}
    assert nodes[drained.name]["resources"] == left, nodes[drained.name]
    assert await trio.to_thread.run_sync(query, cluster.database_url, "SELECT count(*) FROM moves") == [(0,)]


async def moves_and_stops(cluster: Cluster, kinds: tuple[str, ...], ids: tuple[str, ...]) -> list[tuple[object, ...]]:
    """The `<kind>.moved` and `<kind>.stopped` events of these resources, oldest first, as
    (id, type, the node it moved from or why it stopped)."""
    types = ", ".join(f"'{kind}.moved', '{kind}.stopped'" for kind in kinds)
    listed = ", ".join(f"'{rid}'" for rid in ids)
    events = await trio.to_thread.run_sync(
        query, cluster.database_url,
        f"SELECT resource_id, type, data FROM events WHERE type IN ({types}) AND resource_id IN ({listed}) ORDER BY id",
    )
    return [(rid, kind, json.loads(str(data)).get("from_node") or json.loads(str(data)).get("reason")) for rid, kind, data in events]


async def test_a_drained_node_moves_its_stopped_sandboxes_and_on_request_its_running_and_paused_ones(cluster: Cluster) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Movers", "owner@movers.example")
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        first = await client.post(f"{a.base}{API}/sandboxes", json={})
        assert first.status_code == 201, first.text
        stopped_id, home = first.json()["data"]["id"], cluster.nodes[first.json()["data"]["node"]]
        x, y = not_home(cluster, home.name)
        # Everything else goes to the same node: the other two take no new work for a while.
        for other in (x, y):
            assert (await client.post(f"{a.base}{API}/admin/nodes/{other.name}/drain", headers=admin, json={"move": "none"})).status_code == 200
        second = await client.post(f"{x.base}{API}/sandboxes", json={})
        made = await client.post(f"{y.base}{API}/computers", json={"name": "Mover", "template_type": "svc-desktop"})
        assert second.status_code == 201 and made.status_code == 201, (second.text, made.text)
        running_id, cid = second.json()["data"]["id"], made.json()["id"]
        assert second.json()["data"]["node"] == home.name
        computer = await computer_until(client, a, cid, lambda r: r["status"] == "running")
        assert computer["node"] == home.name
        for other in (x, y):  # back to taking work: a restart ends a drain
            stop_node(other)
            cluster.restart(other)

        for sid, text in ((stopped_id, "stopped one"), (running_id, "running one")):
            wrote = await client.post(f"{a.base}{API}/sandboxes/{sid}/files/write", json={"path": "/workspace/kept.txt", "content": text})
            assert wrote.status_code == 201, wrote.text
        await computer_run(client, a, cid, "echo desk > /root/kept.txt")
        taken = await client.post(f"{a.base}{API}/computers/{cid}/snapshots", json={"name": "before the move"})
        sid_snapshot = taken.json()["data"]["id"]
        with trio.fail_after(60):
            while (await client.get(f"{a.base}{API}/computers/{cid}/snapshots/{sid_snapshot}")).json()["data"]["status"] != "ready":
                await trio.sleep(0.1)
        await computer_run(client, a, cid, "echo after > /root/after.txt")
        assert (await client.post(f"{a.base}{API}/sandboxes/{stopped_id}/stop")).status_code == 200
        assert (await client.post(f"{a.base}{API}/computers/{cid}/pause")).status_code == 200

        bad = await client.post(f"{a.base}{API}/admin/nodes/{home.name}/drain", headers=admin, json={"move": "everything"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_ERROR", bad.text
        drained = await client.post(f"{x.base}{API}/admin/nodes/{home.name}/drain", headers=admin, json={})
        assert drained.status_code == 200, drained.text
        assert (drained.json()["data"]["state"], drained.json()["data"]["moving"]) == ("draining", "stopped")

        # The stopped one moves, stays stopped, and starts elsewhere with its files.
        since = trio.current_time()
        moved = await sandbox_until(client, a, stopped_id, lambda r: r["node"] != home.name)
        print(f"\ndrain: a stopped sandbox moved in {trio.current_time() - since:.1f} s")
        assert moved["status"] == "stopped", moved
        async with open_sse(client, f"{x.base}{API}/sandboxes/{stopped_id}/events", {"Last-Event-ID": "0"}) as stream:
            frames = await stream.frames_until("sandbox.moved")  # its stream says so, through any node
        assert frames[-1].data == {"sandbox_id": stopped_id, "from_node": home.name, "node": moved["node"]}, frames[-1]
        assert (await sandbox_until(client, a, running_id, lambda r: True))["node"] == home.name  # running: not asked for
        paused = await computer_until(client, a, cid, lambda r: True)
        assert (paused["node"], paused["status"]) == (home.name, "paused")  # nor paused
        assert (await client.post(f"{a.base}{API}/sandboxes/{stopped_id}/start")).status_code == 200
        ran = await client.post(f"{y.base}{API}/sandboxes/{stopped_id}/exec", json={"command": "cat /workspace/kept.txt"})
        assert ran.json()["stdout"] == "stopped one", ran.text

        # Asked for, the running sandbox moves too, stopped here and started there; the
        # paused computer is stopped (its frozen memory cannot move) and arrives stopped.
        again = await client.post(f"{y.base}{API}/admin/nodes/{home.name}/drain", headers=admin, json={"move": "all"})
        assert again.json()["data"]["moving"] == "all", again.text
        since = trio.current_time()
        relocated = await sandbox_until(client, a, running_id, lambda r: r["node"] != home.name and r["status"] == "running")
        moved_computer = await computer_until(client, a, cid, lambda r: r["node"] != home.name)
        print(f"drain --move all: a running sandbox and a paused desktop computer moved in {trio.current_time() - since:.1f} s")
        assert moved_computer["status"] == "stopped", moved_computer
        ran = await client.post(f"{x.base}{API}/sandboxes/{running_id}/exec", json={"command": "cat /workspace/kept.txt"})
        assert ran.json()["stdout"] == "running one", ran.text
        assert (await client.post(f"{a.base}{API}/computers/{cid}/start")).status_code == 200
        await computer_until(client, a, cid, lambda r: r["status"] == "running")
        ran_computer = await computer_run(client, x, cid, "cat /root/kept.txt /root/after.txt")
        assert ran_computer["output"] == "desk\nafter\n", ran_computer  # its files as they were when it stopped
        restored = await client.post(f"{y.base}{API}/computers/{cid}/snapshots/{sid_snapshot}/restore")
        assert restored.status_code == 200, restored.text
        assert (await computer_run(client, x, cid, "cat /root/kept.txt; test -e /root/after.txt; echo $?"))["output"] == "desk\n1\n"

        await drained_of_all_but(client, cluster, home, 0)
        seen = await moves_and_stops(cluster, ("sandbox", "computer"), (stopped_id, running_id, cid))
        assert (stopped_id, "sandbox.moved", home.name) in seen, seen
        assert [event for event in seen if event[0] == running_id][-2:] == [
            (running_id, "sandbox.stopped", "move"), (running_id, "sandbox.moved", home.name),
        ], seen
        of_computer = [event for event in seen if event[0] == cid]
        arrived = of_computer.index((cid, "computer.moved", home.name))
        assert of_computer[arrived - 2 : arrived] == [(cid, "computer.stopped", "paused"), (cid, "computer.stopped", "move")], seen
        for path in (f"/sandboxes/{stopped_id}", f"/sandboxes/{running_id}", f"/computers/{cid}"):
            assert (await client.delete(f"{home.base}{API}{path}")).status_code in (200, 204)
        assert relocated["node"] in (x.name, y.name)


async def test_a_drained_node_moves_its_stopped_database_and_on_request_its_running_one_with_their_data(cluster: Cluster) -> None:
    """A database is an instance a drain moves too: the stopped server's data directory
    travels through the blob store and a node with room makes the server from it; with
    `all`, a running one is stopped cleanly first and started there. It keeps its id,
    port, password and every committed row; its `url` names the new node, and the old
    node no longer answers at its port."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    a = cluster.nodes["node-a"]
    key = cluster.owner_key("node-a", "Database movers", "owner@db-movers.example")
    async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        stopped_id = await new_database(client, a, "ledger")
        home = cluster.nodes[str((await until_status(client, a, stopped_id, "running", 120))["node"])]
        x, y = not_home(cluster, home.name)
        for other in (x, y):  # the second goes to the same node
            assert (await client.post(f"{a.base}{API}/admin/nodes/{other.name}/drain", headers=admin, json={"move": "none"})).status_code == 200
        running_id = await new_database(client, x, "orders")
        replicated_id = await new_database(client, y, "replicated")
        for did in (running_id, replicated_id):
            assert (await until_status(client, a, did, "running", 120))["node"] == home.name
        for other in (x, y):  # back to taking work: a restart ends a drain
            stop_node(other)
            cluster.restart(other)
        made = await client.post(f"{a.base}{API}/databases/{replicated_id}/replicas", json={})
        assert made.status_code == 202, made.text
        replica = await until_status(client, a, made.json()["data"]["id"], "running", 120)
        assert replica["node"] != home.name
        before = {did: httpx.URL(await credentials_url(client, a, did)) for did in (stopped_id, running_id)}
        for did, url in before.items():
            assert url.host == home.address
            await trio.to_thread.run_sync(execute, str(url), f"CREATE TABLE kept AS SELECT '{did}'::text AS v")
        assert (await client.post(f"{y.base}{API}/databases/{stopped_id}/stop")).status_code == 200
        await until_status(client, a, stopped_id, "stopped", 60)

        drained = await client.post(f"{x.base}{API}/admin/nodes/{home.name}/drain", headers=admin, json={})
        assert drained.status_code == 200 and drained.json()["data"]["moving"] == "stopped", drained.text
        since = trio.current_time()
        with trio.fail_after(120):
            while (moved := (await client.get(f"{a.base}{API}/databases/{stopped_id}")).json()["data"])["node"] == home.name:
                await trio.sleep(0.2)
        print(f"\ndrain: a stopped database moved in {trio.current_time() - since:.1f} s")
        assert moved["status"] == "stopped", moved
        still = (await client.get(f"{a.base}{API}/databases/{running_id}")).json()["data"]
        assert (still["node"], still["status"]) == (home.name, "running")  # running: not asked for
        assert (await client.post(f"{y.base}{API}/databases/{stopped_id}/start")).status_code == 200
        await until_status(client, a, stopped_id, "running", 60)
        # A sandbox on another node reaches it at its `internal_url`, which did not change.
        made = await client.post(f"{x.base}{API}/sandboxes", json={})
        assert made.status_code == 201 and made.json()["data"]["node"] != home.name, made.text
        sandbox_id = made.json()["data"]["id"]
        await client.post(f"{a.base}{API}/sandboxes/{sandbox_id}/files/write", json={"path": "/tmp/pgc.py", "content": PG_CLIENT})
        internal = (await client.get(f"{y.base}{API}/databases/{stopped_id}/credentials")).json()["data"]["internal_url"]
        with trio.fail_after(10):  # the proxies of the nodes it is not on relay it within a second
            while (ran := (await client.post(f"{a.base}{API}/sandboxes/{sandbox_id}/exec", json={
                "command": f"python3 /tmp/pgc.py {shlex.quote(internal)} 'SELECT v FROM kept'"})).json())["exit_code"] != 0:
                await trio.sleep(0.2)
        assert ran["stdout"].strip() == stopped_id, ran
        assert (await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")).status_code == 200
        after = httpx.URL(await credentials_url(client, y, stopped_id))
        assert after.host == cluster.nodes[moved["node"]].address
        assert (after.port, after.username, after.password, after.path) == (
            before[stopped_id].port, before[stopped_id].username, before[stopped_id].password, before[stopped_id].path)
        assert await trio.to_thread.run_sync(query, str(after), "SELECT v FROM kept") == [(stopped_id,)]

        # Asked for, the running one moves too, with what was committed up to the drain.
        await trio.to_thread.run_sync(query, str(before[running_id]), "INSERT INTO kept VALUES ('just before') RETURNING v")
        again = await client.post(f"{y.base}{API}/admin/nodes/{home.name}/drain", headers=admin, json={"move": "all"})
        assert again.json()["data"]["moving"] == "all", again.text
        since = trio.current_time()
        with trio.fail_after(120):
            while (relocated := (await client.get(f"{a.base}{API}/databases/{running_id}")).json()["data"])["node"] == home.name or (
                relocated["status"] != "running"
            ):
                await trio.sleep(0.2)
        print(f"drain --move all: a running database moved and runs again in {trio.current_time() - since:.1f} s")
        moved_url = httpx.URL(await credentials_url(client, x, running_id))
        assert (moved_url.host, moved_url.port) == (cluster.nodes[relocated["node"]].address, before[running_id].port)
        rows = await trio.to_thread.run_sync(query, str(moved_url), "SELECT v FROM kept")
        assert sorted(rows) == sorted([("just before",), (running_id,)]), rows
        with pytest.raises(psycopg.OperationalError):  # the old node's port is closed
            await trio.to_thread.run_sync(query, str(before[running_id]), "SELECT 1")

        # A primary with a replica stays (its replica streams from this node's address),
        # and so does the replica on its own node.
        kept = (await client.get(f"{a.base}{API}/databases/{replicated_id}")).json()["data"]
        assert (kept["node"], kept["status"]) == (home.name, "running"), kept
        assert (await client.get(f"{a.base}{API}/databases/{replica['id']}")).json()["data"]["node"] == replica["node"]
        await drained_of_all_but(client, cluster, home, 1)
        seen = await moves_and_stops(cluster, ("database",), (stopped_id, running_id))
        assert (stopped_id, "database.moved", home.name) in seen, seen
        assert [event for event in seen if event[0] == running_id][-2:] == [
            (running_id, "database.stopped", "move"), (running_id, "database.moved", home.name),
        ], seen
        for did in (stopped_id, running_id, str(replica["id"]), replicated_id):
            # Its replica gone, the primary may be on its way off the draining node as it is
            # deleted: a request that waited for the move is refused (503), and sent again it
            # goes to the new home, as a client's retry does.
            with trio.fail_after(60):
                while (deleted := await client.delete(f"{home.base}{API}/databases/{did}")).status_code == 503:
                    assert "send the request again" in deleted.json()["error"]["message"], deleted.text
                    await trio.sleep(0.5)
            assert deleted.status_code in (200, 202, 204), deleted.text

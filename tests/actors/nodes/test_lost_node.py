"""A lost node (issue 30, contract §20). Two real `corral serve` nodes on one real
PostgreSQL, each with a runtime of its own: sandboxes made on node A; A killed with
SIGKILL; node B shows them `error` with `{code: "NODE_LOST", message}` within 10 s, in
GET and in the list, and deletes them without A; A restarted destroys the instances
that are no longer its own. The cluster's periodic jobs run on one node and move when
it dies. A node that comes back when no other node took its resources keeps them."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import trio

from corral.actors.nodes import lost
from corral.actors.nodes.archives import LEASE as ARCHIVES_LEASE
from corral.actors.nodes.leases import LEASE_SECONDS, Leases
from corral.actors.nodes.lost import LEASE as LOST_LEASE
from corral.actors.nodes.store import LOST_AFTER_SECONDS
from corral.errors import ApiError
from corral.net.pgproxy.access import FAST_PATH_SECONDS
from corral.node import EGRESS_PRUNE_LEASE
from corral.storage import Database, migrate, open_database, utc_now_iso
from tests.actors.nodes.test_shared_events import NODE_B_HOST, runtime_env
from tests.http.database_support import DATABASE_SETTINGS, running_db
from tests.pg_server import create_database
from tests.serve_process import ADMIN_KEY, corral_serve
from tests.support import RUNTIME_SETTINGS, cleanup_host, running_server

API = "/api/v1"
_databases = itertools.count()


@pytest.fixture(autouse=True)
def node_b_host() -> Iterator[None]:
    yield
    cleanup_host(**{name: NODE_B_HOST[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})


def instance_state(data_dir: Path, instance_id: str) -> dict[str, Any] | None:
    """The runtime's record of an instance on a node (None: the node has no such instance)."""
    path = data_dir / "instances" / instance_id / "state.json"
    return json.loads(path.read_text()) if path.exists() else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def lease_holders(url: str) -> dict[str, str]:
    async def read() -> dict[str, str]:
        db = open_database(url)
        try:
            return {str(row["name"]): str(row["holder"]) for row in await db.fetch_all("SELECT name, holder FROM leases")}
        finally:
            await db.close()

    return trio.run(read)


def insert_old_audit_row(url: str) -> None:
    async def insert() -> None:
        db = open_database(url)
        try:
            await db.execute(
                "INSERT INTO egress_audit (id, tenant_id, host, action, request_transforms, response_transforms, created_at)"
                " VALUES ('old-row', 'ten_x', 'example.com', 'allow', '[]', '[]', '2000-01-01T00:00:00.000000Z')"
            )
        finally:
            await db.close()

    trio.run(insert)


def audit_rows(url: str) -> int:
    async def count() -> int:
        db = open_database(url)
        try:
            return int(await db.fetch_value("SELECT COUNT(*) FROM egress_audit WHERE id = 'old-row'"))
        finally:
            await db.close()

    return trio.run(count)


async def insert_node(db: Database, name: str, state: str, *, boot_id: str, heartbeat_at: str) -> None:
    """A `nodes` row as a node's actor writes it (a stale `heartbeat_at`: a lost node)."""
    await db.execute(
        "INSERT INTO nodes (name, advertise_url, region, state, boot_id, started_at, heartbeat_at, cores, memory_mb,"
        " disk_free_mb, instances, pooled, memory_mb_used, templates, updated_at)"
        " VALUES (?, 'http://127.0.0.1:1', 'local', ?, ?, ?, ?, 1, 1, 1, 0, 0, 0, '[]', ?)",
        (name, state, boot_id, heartbeat_at, heartbeat_at, heartbeat_at),
    )


def wait_for(what: str, check: Any, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.1)


def test_a_killed_nodes_sandboxes_read_node_lost_on_the_survivor_and_the_node_destroys_them_when_back(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    url = create_database(postgres_url, f"lost_node_{os.getpid()}_{next(_databases)}")
    common = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0"}
    env_a = {**common, **runtime_env(RUNTIME_SETTINGS)}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    data_a = tmp_path / "a" / "data"
    with corral_serve(tmp_path / "a", env_a, "--node-name", "node-a", data_dir=data_a) as a:
        key = a.owner_key("Lost", "owner@lost.example")
        client = httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"})
        made = [client.post(f"{a.base}{API}/sandboxes", json={}) for _ in range(2)]  # A alone: placed on A
        assert all(answer.status_code == 201 for answer in made), [answer.text for answer in made]
        deleted_id, kept_id = (answer.json()["data"]["id"] for answer in made)
        computer = client.post(f"{a.base}{API}/computers", json={"name": "Lost", "template_type": "svc-desktop"})
        assert computer.status_code == 201, computer.text
        computer_id = computer.json()["id"]
        running = wait_for("a running computer", lambda: (c := client.get(f"{a.base}{API}/computers/{computer_id}").json())["status"] == "running" and c, 120)
        vm_id = running["vm_id"]
        assert running["node"] == "node-a" and instance_state(data_a, vm_id) is not None
        run = client.post(f"{a.base}{API}/agent-runs", json={"sandbox_id": kept_id, "prompt": "wait", "command": "sleep 300", "wait": False})
        assert run.status_code == 200 and run.json()["data"]["status"] == "running", run.text
        run_id = run.json()["data"]["id"]
        with corral_serve(tmp_path / "b", {**common, **runtime_env(NODE_B_HOST)}, "--node-name", "node-b") as b:
            for sandbox_id in (deleted_id, kept_id):
                got = client.get(f"{b.base}{API}/sandboxes/{sandbox_id}").json()["data"]
                assert (got["status"], got["node"]) == ("running", "node-a") and "error" not in got
            assert client.get(f"{b.base}{API}/agent-runs/{run_id}").json()["data"]["status"] == "running"  # followed by A alone
            pids = {instance: int(instance_state(data_a, instance)["init_pid"]) for instance in (deleted_id, kept_id, vm_id)}  # type: ignore[index]
            assert all(alive(pid) for pid in pids.values())

            # The cluster's jobs: each held by one node (A started first).
            holders = wait_for("leases", lambda: (h := lease_holders(url)) and len(h) == 3 and h, 10)
            assert holders == {LOST_LEASE: "node-a", EGRESS_PRUNE_LEASE: "node-a", ARCHIVES_LEASE: "node-a"}

            a.process.send_signal(signal.SIGKILL)
            a.process.wait()
            killed = time.monotonic()
            insert_old_audit_row(url)  # past its retention: the prune, wherever it runs now, deletes it

            def node_lost() -> dict[str, Any] | None:
                answer = client.get(f"{b.base}{API}/sandboxes/{kept_id}")
                if answer.status_code == 503:  # forwarded to A, which does not answer: until A is seen lost
                    return None
                got: dict[str, Any] = answer.json()["data"]
                return got if got["status"] == "error" else None

            got = wait_for("NODE_LOST", node_lost, 15)
            seen_after = time.monotonic() - killed
            print(f"kill -9 -> NODE_LOST visible through node B: {seen_after:.2f} s")
            assert seen_after < 10, seen_after
            assert got["node"] == "node-b"
            assert got["error"]["code"] == "NODE_LOST"
            assert got["error"]["message"].startswith("node node-a stopped answering at ")
            listed = {item["id"]: item for item in client.get(f"{b.base}{API}/sandboxes").json()["data"]}
            for sandbox_id in (deleted_id, kept_id):
                assert listed[sandbox_id]["status"] == "error" and listed[sandbox_id]["error"]["code"] == "NODE_LOST"
            lost_computer = wait_for(
                "the computer NODE_LOST",
                lambda: (c := client.get(f"{b.base}{API}/computers/{computer_id}").json())["status"] == "error" and c, 10 - seen_after,
            )
            assert (lost_computer["status"], lost_computer["node"], lost_computer["error"]["code"]) == ("error", "node-b", "NODE_LOST")
            assert lost_computer["error"]["message"].startswith("node node-a stopped answering at ")
            assert [c["status"] for c in client.get(f"{b.base}{API}/computers").json()["computers"]] == ["error"]
            nodes = {node["name"]: node for node in client.get(f"{b.base}{API}/admin/nodes", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()["data"]}
            # B holds their rows, not their instances (gone with A): no room taken there, nothing for a drain to move.
            assert nodes["node-a"]["state"] == "lost" and nodes["node-a"]["resources"] == 0 and nodes["node-b"]["resources"] == 0

            # The agent run A followed ends: its target is gone.
            ended = wait_for(
                "the agent run ended",
                lambda: (r := client.get(f"{b.base}{API}/agent-runs/{run_id}").json()["data"])["status"] != "running" and r, 10,
            )
            assert ended["status"] == "failed" and "no longer running" in ended["error"], ended
            # Its process died with the instance: the sandbox's record of it says so.
            process_id = ended["metadata"]["agent_process"]["process_id"]
            process = client.get(f"{b.base}{API}/sandboxes/{kept_id}/processes/{process_id}").json()["data"]
            assert process["status"] == "killed", process
            assert all(p["status"] != "running" for p in client.get(f"{b.base}{API}/sandboxes/{kept_id}/processes").json()["data"])

            # The jobs moved to B, and the prune ran there.
            wait_for("the jobs on node B", lambda: lease_holders(url) == {LOST_LEASE: "node-b", EGRESS_PRUNE_LEASE: "node-b", ARCHIVES_LEASE: "node-b"}, 10)
            wait_for("the old audit row pruned", lambda: audit_rows(url) == 0, 10)
            assert time.monotonic() - killed < 12
            assert "holds the cluster lease 'egress-prune' now" in b.log_path.read_text()

            # Deleting through B works without A (its instance is out of reach).
            deleted = client.delete(f"{b.base}{API}/sandboxes/{deleted_id}")
            assert deleted.status_code == 200, deleted.text
            assert client.get(f"{b.base}{API}/sandboxes/{deleted_id}").status_code == 404
            deleted_computer = client.delete(f"{b.base}{API}/computers/{computer_id}")
            assert deleted_computer.status_code == 200, deleted_computer.text
            assert client.get(f"{b.base}{API}/computers/{computer_id}").status_code == 404
            # A sandbox on a lost node cannot be used: it says so, it does not hang.
            ran = client.post(f"{b.base}{API}/sandboxes/{kept_id}/exec", json={"command": "true"})
            assert ran.status_code == 409, ran.text

            # A comes back: the three instances (two deleted, their records gone or
            # destroyed, one taken over) are no longer its own, and it destroys them; the
            # kept sandbox still reads NODE_LOST, from A too.
            assert all(alive(pid) for pid in pids.values())  # a killed node's instances outlive it
            with corral_serve(tmp_path / "a", env_a, "--node-name", "node-a", data_dir=data_a, log_name="node-again.log") as again:
                for instance, pid in pids.items():
                    assert instance_state(data_a, instance) is None
                    wait_for(f"instance {instance} gone", lambda pid=pid: not alive(pid), 10)
                    assert f"destroyed instance {instance}" in (tmp_path / "a" / "node-again.log").read_text()
                through_a = client.get(f"{again.base}{API}/sandboxes/{kept_id}").json()["data"]
                assert (through_a["status"], through_a["node"], through_a["error"]["code"]) == ("error", "node-b", "NODE_LOST")
                gone = client.delete(f"{again.base}{API}/sandboxes/{kept_id}")
                assert gone.status_code == 200, gone.text
            client.close()


def test_a_node_that_comes_back_before_anyone_took_its_sandbox_keeps_it(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    """Alone in its cluster, a killed node finds its rows still naming it on its return:
    it re-adopts the running instance, which answers as before."""
    url = create_database(postgres_url, f"lost_back_{os.getpid()}_{next(_databases)}")
    env = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", **runtime_env(RUNTIME_SETTINGS)}
    data = tmp_path / "data"
    with corral_serve(tmp_path, env, "--node-name", "node-a", data_dir=data) as first:
        key = first.owner_key("Back", "owner@back.example")
        client = httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"})
        made = client.post(f"{first.base}{API}/sandboxes", json={})
        assert made.status_code == 201, made.text
        sandbox_id = made.json()["data"]["id"]
        assert client.post(f"{first.base}{API}/sandboxes/{sandbox_id}/exec", json={"command": "echo hi > /tmp/mark"}).status_code == 200
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    time.sleep(7)  # lost by its heartbeat: no other node to take anything over
    with corral_serve(tmp_path, env, "--node-name", "node-a", data_dir=data, log_name="again.log") as again:
        got = client.get(f"{again.base}{API}/sandboxes/{sandbox_id}").json()["data"]
        assert (got["status"], got["node"]) == ("running", "node-a") and "error" not in got
        ran = client.post(f"{again.base}{API}/sandboxes/{sandbox_id}/exec", json={"command": "cat /tmp/mark"})
        assert ran.status_code == 200 and ran.json()["stdout"] == "hi\n", ran.text
        assert "destroyed instance" not in (tmp_path / "again.log").read_text()
        assert client.delete(f"{again.base}{API}/sandboxes/{sandbox_id}").status_code == 200
    client.close()


async def test_a_lease_is_held_by_one_node_moves_when_its_holder_stops_renewing_and_at_once_when_given_back(
    postgres_url: str,
) -> None:
    url = create_database(postgres_url, f"leases_{os.getpid()}_{next(_databases)}")
    db = open_database(url)
    try:
        await migrate(db)
        first, second = Leases(db, "node-1", shared=True), Leases(db, "node-2", shared=True)
        for leases in (first, second):
            leases.want("job")
        await first.renew()
        await second.renew()
        assert (first.holds("job"), second.holds("job")) == (True, False)
        await second.renew()
        assert not second.holds("job")  # renewed by no one, but not expired yet
        started = time.monotonic()
        with trio.fail_after(LEASE_SECONDS + 3):
            while not second.holds("job"):  # node-1 stopped renewing (it died)
                await trio.sleep(0.2)
                await second.renew()
        assert time.monotonic() - started >= LEASE_SECONDS - 1.5
        assert not first.holds("job")  # it let go before the others could take it
        await first.renew()
        assert not first.holds("job")
        await second.release()  # a clean stop: given back, and not taken again
        await first.renew()
        await second.renew()
        assert (first.holds("job"), second.holds("job")) == (True, False)

        # A holder seen lost (here: stopped cleanly, its boot id cleared) frees its lease at once.
        now = utc_now_iso()
        await insert_node(db, "node-1", "active", boot_id="", heartbeat_at=now)
        third = Leases(db, "node-3", shared=True)
        third.want("job")
        await third.renew()
        assert third.holds("job")
        assert Leases(db, "node-4", shared=False).holds("other")  # one node alone holds everything

        # A draining holder keeps it from other draining nodes, and gives it to one that takes new work.
        for name, state in (("node-3", "draining"), ("node-5", "draining"), ("node-6", "active")):
            await insert_node(db, name, state, boot_id="boot", heartbeat_at=now)
        fifth, sixth = Leases(db, "node-5", shared=True), Leases(db, "node-6", shared=True)
        fifth.want("job")
        sixth.want("job")
        await fifth.renew()
        await third.renew()
        assert (third.holds("job"), fifth.holds("job")) == (True, False)
        await sixth.renew()
        await third.renew()
        assert (third.holds("job"), sixth.holds("job")) == (False, True)
    finally:
        await db.close()


async def test_a_database_of_a_node_that_left_reads_node_lost_and_its_server_goes_when_the_node_returns(
    tmp_path: Path, postgres_url: str, runtime_host: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node A stops cleanly (lost at once) and its database server runs on, as instances
    outlive their node; node B waits for A to come back (a clean stop is a restart),
    then takes the database over; A, back, stops and removes the server, which is no
    longer its own; B deletes the record."""
    url = create_database(postgres_url, f"lost_database_{os.getpid()}_{next(_databases)}")
    names_b = {name: NODE_B_HOST[name] for name in ("bridge", "subnet", "nft_table", "link_prefix", "netns_prefix", "cgroup_parent")}
    async with running_server(tmp_path / "a", database_url=url, node_name="node-a", **DATABASE_SETTINGS) as a:
        tenant = await a.create_tenant()
        database = await running_db(a, tenant, name="lost", auto_suspend_seconds=0)
        database_id = database["id"]
        servers = a.platform.databases.driver
        root, pid = servers.layout.server_dir(database_id), (await servers.info(database_id)).init_pid
    assert pid is not None and alive(pid) and root.exists()
    path = f"{API}/databases/{database_id}"
    async with running_server(tmp_path / "b", database_url=url, node_name="node-b", **{**DATABASE_SETTINGS, **names_b}) as b:
        await trio.sleep(3)  # three sweeps: A stopped cleanly, and is expected back
        waiting = (await b.request("GET", path, key=tenant.key)).json()["data"]
        assert (waiting["status"], waiting["node"]) == ("running", "node-a")
        restarting = await b.request("POST", f"{path}/restart", key=tenant.key)
        assert restarting.status_code == 503 and "(node-a) is restarting" in restarting.json()["error"]["message"]

        monkeypatch.setattr(lost, "RESTART_GRACE_SECONDS", 0.0)  # A did not come back in time
        with trio.fail_after(10):
            while (got := (await b.request("GET", path, key=tenant.key)).json()["data"])["status"] != "error":
                await trio.sleep(0.1)
        assert got["node"] == "node-b" and got["error"]["code"] == "NODE_LOST"
        assert got["error"]["message"].startswith("node node-a stopped at ")
        listed = (await b.request("GET", f"{API}/databases", key=tenant.key)).json()["data"]
        assert [(item["status"], item["error"]["code"]) for item in listed] == [("error", "NODE_LOST")]
        assert alive(pid)  # B never reached A's server

        async with running_server(tmp_path / "a", database_url=url, node_name="node-a", **DATABASE_SETTINGS):
            with trio.fail_after(10):
                while alive(pid):
                    await trio.sleep(0.1)
            assert not root.exists()

        deleted = await b.request("DELETE", path, key=tenant.key)
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["data"] == {"id": database_id, "status": "deleted"}
        assert (await b.request("GET", path, key=tenant.key)).status_code == 404


def test_a_killed_control_planes_database_runs_on_but_its_url_closes_before_the_node_is_seen_lost(
    tmp_path: Path, runtime_host: None
) -> None:
    """A database server outlives its node's process (so a restart of the control plane
    keeps it), but the kernel's fast path to it expires unless the node renews it: once
    `kill -9` took the process, `url` stops reaching the server within
    `FAST_PATH_SECONDS`, before another node would see this one lost (6 s) and promote a
    replica, so clients never write to a server the cluster gave up. Started again, the
    node adopts the server and `url` answers again."""
    env = {**runtime_env(RUNTIME_SETTINGS), "CORRAL_DATABASE_PORTS": str(DATABASE_SETTINGS["database_ports"]), "CORRAL_EGRESS_PROXY": "0"}
    with corral_serve(tmp_path, env) as node:
        key = node.owner_key("Fenced", "owner@fenced.example")
        client = httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"})
        created = client.post(f"{node.base}{API}/databases", json={"name": "fenced", "auto_suspend_seconds": 0})
        assert created.status_code == 202, created.text
        database_id = created.json()["data"]["id"]
        wait_for("a running database", lambda: client.get(f"{node.base}{API}/databases/{database_id}").json()["data"]["status"] == "running", 120)
        url = client.get(f"{node.base}{API}/databases/{database_id}/credentials").json()["data"]["url"]
        assert pg_answer(url) == [(1,)]
        assert node.process is not None
        node.process.kill()
        node.process.wait()
        killed = time.monotonic()
        wait_for("the url closed", lambda: pg_answer(url) is None, FAST_PATH_SECONDS + 3)
        closed_after = time.monotonic() - killed
        print(f"\nkill -9 of the control plane -> its database's url refused after {closed_after:.1f} s")
        assert closed_after < LOST_AFTER_SECONDS
    with corral_serve(tmp_path, env, log_name="again.log") as again:
        wait_for("the url answering again", lambda: pg_answer(url) == [(1,)], 30)
        assert client.delete(f"{again.base}{API}/databases/{database_id}").status_code in (200, 202)
    client.close()


def pg_answer(url: str) -> list[tuple[object, ...]] | None:
    """`SELECT 1` at `url`, or None when no connection is made."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchall()
    except psycopg.OperationalError:
        return None


async def test_a_draining_node_leaves_a_lost_nodes_resource_to_a_node_that_takes_new_work(postgres_url: str) -> None:
    """Node A is lost; B drains and C is active. B refuses to take A's resource over (it
    would bring a computer back from its snapshot on a node on its way out), unless it
    has a copy to come back from (a database's replica); C takes it; and with no node
    taking new work, B does."""
    url = create_database(postgres_url, f"lost_draining_{os.getpid()}_{next(_databases)}")
    db = open_database(url)
    try:
        await migrate(db)
        await db.execute("CREATE TABLE homed_things (id TEXT PRIMARY KEY, node TEXT, status TEXT)")
        await db.execute(
            "INSERT INTO homed_things VALUES ('one', 'node-a', 'running'), ('two', 'node-a', 'running'), ('three', 'node-a', 'running')"
        )
        now, stale = utc_now_iso(), "2000-01-01T00:00:00.000000Z"
        await insert_node(db, "node-a", "active", boot_id="boot", heartbeat_at=stale)
        await insert_node(db, "node-b", "draining", boot_id="boot", heartbeat_at=now)
        await insert_node(db, "node-c", "active", boot_id="boot", heartbeat_at=now)

        async def take(thing: str, node: str, *, copy_here: bool = False) -> lost.TakenOver | None:
            return await lost.take_over(
                db, table="homed_things", id_column="id", resource_id=thing, lost_node="node-a", node=node,
                kind="computer", instance_id=f"vm-{thing}", held_here=False, copy_here=copy_here,
                recovering={"status": "restarting"} if copy_here else None,
            )

        async def home(thing: str) -> str:
            return str(await db.fetch_value("SELECT node FROM homed_things WHERE id = ?", (thing,)))

        async def status(thing: str) -> str:
            return str(await db.fetch_value("SELECT status FROM homed_things WHERE id = ?", (thing,)))

        with pytest.raises(ApiError) as refused:
            await take("one", "node-b")
        assert refused.value.status == 503 and refused.value.code == "SERVICE_UNAVAILABLE"
        assert "this node (node-b) is draining: node node-c takes the computer over" in refused.value.message
        assert await home("one") == "node-a"
        assert await db.fetch_value("SELECT COUNT(*) FROM lost_instances") == 0

        taken = await take("two", "node-b", copy_here=True)
        assert taken is not None and await home("two") == "node-b"
        assert await status("two") == "restarting"  # written with the move: it comes back from its copy
        taken = await take("one", "node-c")
        assert taken is not None and taken.error is not None and taken.error.startswith("NODE_LOST: node node-a stopped answering")
        assert await home("one") == "node-c" and await status("one") == "running"  # the actor writes its error next

        await db.execute("UPDATE nodes SET heartbeat_at = ? WHERE name = 'node-c'", (stale,))  # C lost too
        assert await take("three", "node-b") is not None and await home("three") == "node-b"
    finally:
        await db.close()

"""Placement (issue 30): a new sandbox goes to a node with room, in the region asked
for, and the caller cannot tell which node served the create. Two real `corral serve`
nodes on one real PostgreSQL, each with a runtime of its own (bridge, subnet, nftables
table), with small room figures (`CORRAL_NODE_MAX_INSTANCES`,
`CORRAL_NODE_MAX_MEMORY_MB`) so that a few real sandboxes fill them."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from corral.actors.nodes.homes import Homes
from corral.actors.nodes.placement import Demand, Usage, choose
from corral.actors.nodes.store import NodeRecord
from corral.http.forward import HEADER, PLACED, Forwarder, forwarding_key
from corral.ids import is_uuid
from corral.storage import open_database
from tests.actors.nodes.test_shared_events import NODE_B_HOST, runtime_env
from tests.pg_server import create_database
from tests.serve_process import ADMIN_KEY, Served, corral_serve, wait_for
from tests.support import (
    RUNTIME_SETTINGS,
    TEMPLATE_CACHE,
    Api,
    Tenant,
    cleanup_host,
    free_port,
    host_names,
)

API = "/api/v1"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
_databases = itertools.count()


NODE_C_HOST = host_names(
    bridge="corrsec0", subnet_prefix="10.226", nft_table="corral_sec_c", link_letter="w", netns_prefix="corrsec",
    cgroup_parent="corral-sec-c",
)
"""A third node's, for a node that joins while the others work."""


@pytest.fixture(autouse=True)
def node_b_host() -> Iterator[None]:
    """Nodes B's and C's bridges, links and tables, removed after each test (a node leaves them)."""
    yield
    for names in (NODE_B_HOST, NODE_C_HOST):
        cleanup_host(**{name: names[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})


def both_active(a: Served) -> dict[str, dict[str, Any]]:
    def seen() -> dict[str, dict[str, Any]] | None:
        answer = httpx.get(f"{a.base}{API}/admin/nodes", headers=ADMIN, timeout=10).json()["data"]
        states = sorted((node["name"], node["state"]) for node in answer)
        return {node["name"]: node for node in answer} if states == [("node-a", "active"), ("node-b", "active")] else None

    return wait_for("both nodes active", seen)


@contextlib.contextmanager
def two_nodes(
    tmp_path: Path, postgres_url: str, name: str, common: dict[str, str] | None = None,
    *, a: dict[str, str] | None = None, b: dict[str, str] | None = None, preview_ports: tuple[int, int] | None = None,
) -> Iterator[tuple[Served, Served, str, dict[str, str]]]:
    """Nodes A and B on a new PostgreSQL database, both active: (a, b, its URL, the
    environment both have, for a third node); their preview routers on `preview_ports`
    when given."""
    url = create_database(postgres_url, f"{name}_{os.getpid()}_{next(_databases)}")
    shared = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", "CORRAL_WARM_POOL": "0", **(common or {})}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env_a = {**shared, **runtime_env(RUNTIME_SETTINGS), **(a or {})}
    env_b = {**shared, **runtime_env(NODE_B_HOST), **(b or {})}
    args_a, args_b = (("--preview-port", str(preview_ports[0])), ("--preview-port", str(preview_ports[1]))) if preview_ports else ((), ())
    with corral_serve(tmp_path / "a", env_a, "--node-name", "node-a", *args_a) as node_a, corral_serve(
        tmp_path / "b", env_b, "--node-name", "node-b", *args_b
    ) as node_b:
        both_active(node_a)
        yield node_a, node_b, url, shared


@contextlib.asynccontextmanager
async def owner_client(node: Served, tenant: str, email: str, *, timeout: float = 120) -> AsyncIterator[httpx.AsyncClient]:
    """A client with the key of a new tenant's owner, made through `node`."""
    key = node.owner_key(tenant, email)
    async with httpx.AsyncClient(timeout=timeout, headers={"Authorization": f"Bearer {key}"}) as client:
        yield client


async def open_claims(url: str, seconds: float = 10.0) -> int:
    """The claims left once the creates answered have ended: a create's node releases
    its claim just after the answer (which the client may read first), so this waits
    up to `seconds` for none to be left, and returns how many are."""
    db = open_database(url)
    try:
        with trio.move_on_after(seconds):
            while (count := await db.fetch_value("SELECT COUNT(*) FROM node_claims")) != 0:
                await trio.sleep(0.05)
        return int(count)
    finally:
        await db.close()


def refused(answer: httpx.Response, message: str) -> None:
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and error["message"] == message, error
    assert answer.headers["retry-after"] == "5"


async def test_a_create_goes_to_a_node_with_room_in_the_region_asked_for_and_503_when_none(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    with two_nodes(
        tmp_path, postgres_url, "placement", {"CORRAL_REGIONS": "eu,us,ap"},
        a={"CORRAL_NODE_REGION": "eu", "CORRAL_NODE_MAX_INSTANCES": "1"}, b={"CORRAL_NODE_REGION": "us", "CORRAL_NODE_MAX_INSTANCES": "2"},
    ) as (a, b, url, _):
        key = a.owner_key("Placement", "owner@placement.example")
        made: list[str] = []
        async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:

            async def create(node: Served, **body: Any) -> httpx.Response:
                answer = await client.post(f"{node.base}{API}/sandboxes", json=body)
                if answer.status_code == 201:
                    made.append(answer.json()["data"]["id"])
                return answer

            try:
                first = await create(a)
                assert first.status_code == 201, first.text
                assert (first.json()["data"]["node"], first.json()["data"]["region"]) == ("node-a", "eu")

                # A is full: the create made through A lands on B, and is used through A.
                second = await create(a)
                assert second.status_code == 201, second.text
                on_b = second.json()["data"]
                assert (on_b["node"], on_b["region"], on_b["status"]) == ("node-b", "us", "running")
                ran = await client.post(f"{a.base}{API}/sandboxes/{on_b['id']}/exec", json={"command": "hostname"})
                assert ran.json()["stdout"] == f"sbx-{on_b['id'][:8]}\n"
                on_b_actor = await client.get(f"{b.base}{API}/admin/actors/sandbox/{on_b['id']}", headers=ADMIN)
                assert on_b_actor.status_code == 200  # B made it and runs it

                # A region asked for: its nodes only.
                refused(await create(b, region="eu"), "no node in region 'eu' has room for a small sandbox: every active node"
                        " is at its limit of instances or memory, or below its disk reserve; try again later")
                refused(await create(b, region="ap"), "no active node serves region 'ap': a small sandbox cannot be placed there now")
                unknown = await create(a, region="mars")
                assert unknown.status_code == 422 and "region" in unknown.json()["error"]["details"], unknown.text
                too_big = await create(a, metadata={"notes": "x" * (1024 * 1024)})
                assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "PAYLOAD_TOO_LARGE", too_big.text
                third = await create(a, region="us")
                assert third.status_code == 201 and third.json()["data"]["node"] == "node-b", third.text

                # No room anywhere, for any kind.
                refused(await create(a), "no node has room for a small sandbox: every active node is at its limit of"
                        " instances or memory, or below its disk reserve; try again later")
                refused(await client.post(f"{b.base}{API}/databases", json={"name": "orders", "size": "medium"}),
                        "no node has room for a medium database server: every active node is at its limit of"
                        " instances or memory, or below its disk reserve; try again later")
                assert (await client.get(f"{a.base}{API}/databases")).json()["data"] == []  # nothing half-made
                # Only a caller with valid credentials is placed: the others get the route's 401.
                stranger = await client.post(f"{a.base}{API}/sandboxes", json={}, headers={"Authorization": "Bearer msk_nope"})
                assert stranger.status_code == 401, stranger.text

                # Room freed on A, then A drained: a draining node is skipped.
                deleted = await client.delete(f"{b.base}{API}/sandboxes/{made.pop(0)}")
                assert deleted.status_code == 200, deleted.text
                drained = await client.post(f"{b.base}{API}/admin/nodes/node-a/drain", headers=ADMIN)
                assert drained.status_code == 200, drained.text
                refused(await create(a, region="eu"), "no active node serves region 'eu': a small sandbox cannot be placed there now")
                deleted = await client.delete(f"{a.base}{API}/sandboxes/{made.pop(0)}")
                assert deleted.status_code == 200, deleted.text
                after_drain = await create(a)
                assert after_drain.status_code == 201 and after_drain.json()["data"]["node"] == "node-b", after_drain.text

                listed = (await client.get(f"{a.base}{API}/sandboxes")).json()["data"]
                assert sorted(row["id"] for row in listed) == sorted(made)
                assert await open_claims(url) == 0  # every claim ended with its create
            finally:
                for sandbox_id in made:
                    await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")


async def event_data(url: str, event_type: str, resource_id: str) -> list[dict[str, Any]]:
    db = open_database(url)
    try:
        rows = await db.fetch_all("SELECT data FROM events WHERE type = ? AND resource_id = ? ORDER BY id", (event_type, resource_id))
        return [json.loads(str(row["data"])) for row in rows]
    finally:
        await db.close()


async def computer_until(client: httpx.AsyncClient, node: Served, cid: str, status: str, seconds: float = 120) -> dict[str, Any]:
    with trio.fail_after(seconds):
        while True:
            record: dict[str, Any] = (await client.get(f"{node.base}{API}/computers/{cid}")).json()
            if record.get("status") == status:
                return record
            assert record.get("status") != "error", record
            await trio.sleep(0.1)


async def test_a_computer_moved_to_another_region_goes_to_a_node_there_with_its_files(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    with two_nodes(
        tmp_path, postgres_url, "placement_move", {"CORRAL_REGIONS": "eu,us,ap"}, a={"CORRAL_NODE_REGION": "eu"}, b={"CORRAL_NODE_REGION": "us"}
    ) as (a, b, url, _):
        async with owner_client(a, "Movers", "owner@movers.example", timeout=120) as client:
            made = await client.post(f"{b.base}{API}/computers", json={"name": "Traveller", "template_type": "svc-desktop", "region": "eu"})
            assert made.status_code == 201, made.text
            cid = made.json()["id"]
            try:
                running = await computer_until(client, a, cid, "running")
                assert (running["node"], running["region"]) == ("node-a", "eu")
                wrote = await client.post(f"{b.base}{API}/computers/{cid}/exec", json={"command": "echo packed > /root/kept.txt"})
                assert wrote.status_code == 200 and wrote.json()["exit_code"] == 0, wrote.text

                busy = await client.post(f"{b.base}{API}/computers/{cid}/move", json={"region": "us"})
                assert busy.status_code == 409 and busy.json()["error"]["code"] == "INVALID_STATE", busy.text
                assert (await client.post(f"{b.base}{API}/computers/{cid}/stop")).status_code == 200
                refused(await client.post(f"{b.base}{API}/computers/{cid}/move", json={"region": "ap"}),
                        "no active node serves region 'ap': a small computer cannot be placed there now")
                unknown = await client.post(f"{a.base}{API}/computers/{cid}/move", json={"region": "mars"})
                assert unknown.status_code == 422 and "region" in unknown.json()["error"]["details"], unknown.text
                stayed = (await client.get(f"{b.base}{API}/computers/{cid}")).json()
                assert (stayed["node"], stayed["region"], stayed["status"]) == ("node-a", "eu", "stopped")

                # To a region node B serves: the computer and its files go there, through either node.
                since = trio.current_time()
                moved = await client.post(f"{b.base}{API}/computers/{cid}/move", json={"region": "us"})
                assert moved.status_code == 200, moved.text
                print(f"\na stopped desktop computer moved to another region's node in {trio.current_time() - since:.2f} s")
                assert (moved.json()["node"], moved.json()["region"], moved.json()["status"]) == ("node-b", "us", "stopped")
                assert (await client.post(f"{a.base}{API}/computers/{cid}/start")).status_code == 200
                await computer_until(client, a, cid, "running")
                ran = await client.post(f"{a.base}{API}/computers/{cid}/exec", json={"command": "cat /root/kept.txt; hostname"})
                assert ran.json()["output"].startswith("packed\n"), ran.text
                assert (await client.get(f"{b.base}{API}/admin/actors/computer/{cid}", headers=ADMIN)).status_code == 200
                assert (await client.get(f"{a.base}{API}/admin/actors/computer/{cid}", headers=ADMIN)).status_code == 404
                moves = await event_data(url, "computer.moved", cid)
                assert moves == [{"computer_id": cid, "from_node": "node-a", "node": "node-b"}], moves

                # Within the region its node serves, a move changes nothing but the label.
                assert (await client.post(f"{a.base}{API}/computers/{cid}/stop")).status_code == 200
                again = await client.post(f"{a.base}{API}/computers/{cid}/move", json={"region": "us"})
                assert (again.json()["node"], again.json()["region"]) == ("node-b", "us"), again.text
            finally:
                await client.delete(f"{a.base}{API}/computers/{cid}")


def blob_holders(root: Path, sha256: str) -> list[str]:
    return sorted(node for node in ("a", "b") if (root / node / "data" / "blobs" / "sha256" / sha256[:2] / sha256).is_file())


def own_template_dir(directory: Path) -> Path:
    """A node's template directory of its own, with the built-in templates of the shared
    test cache linked in (built once for every test): what it builds stays its own."""
    directory.mkdir()
    for builtin in Path(TEMPLATE_CACHE).iterdir():
        if not builtin.name.startswith(".") and (builtin / "manifest.json").is_file() and not is_uuid(builtin.name):
            (directory / builtin.name).symlink_to(builtin)
    return directory


async def test_a_template_built_on_one_node_makes_sandboxes_on_the_other(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    with two_nodes(
        tmp_path, postgres_url, "placement_template",
        a={"CORRAL_TEMPLATE_DIR": str(own_template_dir(tmp_path / "a-templates"))},
        b={"CORRAL_TEMPLATE_DIR": str(own_template_dir(tmp_path / "b-templates"))},
    ) as (a, b, url, _):
        async with owner_client(a, "Builders", "owner@builders.example", timeout=120) as client:
            made = await client.post(f"{a.base}{API}/sandbox-templates", json={"name": "marked", "setup": ["echo built-on-a > /opt/marker"]})
            assert made.status_code == 201, made.text
            template_id, build_id = made.json()["data"]["template"]["id"], made.json()["data"]["build"]["id"]
            with trio.fail_after(300):
                while (build := (await client.get(f"{b.base}{API}/sandbox-template-builds/{build_id}")).json()["data"])["status"] not in (
                    "ready", "failed"
                ):
                    await trio.sleep(0.5)
            assert build["status"] == "ready", build
            db = open_database(url)
            try:
                row = await db.fetch_one("SELECT archive_sha256 FROM sandbox_template_builds WHERE id = ?", (build_id,))
            finally:
                await db.close()
            assert row is not None and row["archive_sha256"], row
            assert blob_holders(tmp_path, str(row["archive_sha256"])) == ["a", "b"]  # kept on both before it read ready
            assert "archive_sha256" not in str(build)

            # A takes no new work: the sandbox of A's template is placed on B, which fetches the layer.
            assert (await client.post(f"{b.base}{API}/admin/nodes/node-a/drain", headers=ADMIN, json={"move": "none"})).status_code == 200
            made_sandboxes = []
            try:
                for ref in ("marked", template_id):
                    sandbox = await client.post(f"{a.base}{API}/sandboxes", json={"template_id": ref})
                    assert sandbox.status_code == 201, sandbox.text
                    record = sandbox.json()["data"]
                    made_sandboxes.append(record["id"])
                    assert (record["node"], record["status"], record["template_id"]) == ("node-b", "running", template_id), record
                    ran = await client.post(f"{a.base}{API}/sandboxes/{record['id']}/exec", json={"command": "cat /opt/marker"})
                    assert ran.json()["stdout"] == "built-on-a\n", ran.text
                manifest = tmp_path / "b-templates" / template_id / "manifest.json"
                assert json.loads(manifest.read_text())["layer"] == build_id
            finally:
                for sandbox_id in made_sandboxes:
                    await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")

            # Deleted (no sandbox uses it now): its layer goes from both nodes, its archive from every blob store.
            deleted = await client.delete(f"{b.base}{API}/sandbox-templates/{template_id}")
            assert deleted.status_code in (200, 204), deleted.text
            since = trio.current_time()
            with trio.fail_after(10):
                while [side for side in ("a", "b") if (tmp_path / f"{side}-templates" / template_id).exists()] or blob_holders(
                    tmp_path, str(row["archive_sha256"])
                ):
                    await trio.sleep(0.05)
            print(f"\na deleted template's files left both nodes in {trio.current_time() - since:.2f} s")


async def build_of(client: httpx.AsyncClient, node: Served, build_id: str, ok: Any, seconds: float = 120) -> dict[str, Any]:
    with trio.fail_after(seconds):
        while True:
            answer = await client.get(f"{node.base}{API}/sandbox-template-builds/{build_id}")
            if answer.status_code == 503:  # its node just died: unreachable until it is seen lost
                await trio.sleep(0.2)
                continue
            build: dict[str, Any] = answer.json()["data"]
            if ok(build):
                return build
            await trio.sleep(0.2)


async def test_a_build_lives_on_its_node_is_cancelled_through_the_other_and_fails_when_its_node_is_lost(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    with two_nodes(tmp_path, postgres_url, "placement_builds") as (a, b, url, common):
        async with owner_client(a, "Slow builders", "owner@slow-builders.example", timeout=120) as client:
            made = await client.post(f"{a.base}{API}/sandbox-templates", json={"name": "slow", "setup": ["sleep 300"]})
            assert made.status_code == 201, made.text
            template_id, build_id = made.json()["data"]["template"]["id"], made.json()["data"]["build"]["id"]
            building = await build_of(client, b, build_id, lambda build: build["status"] == "building")
            assert building["node"] == "node-a", building
            # A node that starts meanwhile leaves A's build, and a publish under way, alone
            # (it recovers only its own).
            sandbox = await client.post(f"{a.base}{API}/sandboxes", json={})
            assert sandbox.status_code == 201, sandbox.text
            sandbox_id = sandbox.json()["data"]["id"]
            wrote = await client.post(f"{a.base}{API}/sandboxes/{sandbox_id}/files/write", json={"path": "/workspace/site/index.html", "content": "hi"})
            assert wrote.status_code == 201, wrote.text
            project = (await client.get(f"{a.base}{API}/projects")).json()["data"][0]["id"]
            deployment = await client.post(f"{a.base}{API}/projects/{project}/deployments", json={"name": "site"})
            assert deployment.status_code == 201, deployment.text
            deployment_id = deployment.json()["data"]["id"]
            published: list[httpx.Response] = []

            async def publish() -> None:
                published.append(await client.post(f"{b.base}{API}/deployments/{deployment_id}/publish", json={
                    "source_sandbox_id": sandbox_id, "output_path": "/workspace/site", "build_command": "sleep 6"}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(publish)
                with trio.fail_after(30):
                    while not [v for v in (await client.get(f"{a.base}{API}/deployments/{deployment_id}/versions")).json()["data"]
                               if v["state"] == "building"]:
                        await trio.sleep(0.1)
                (tmp_path / "c").mkdir()
                with corral_serve(tmp_path / "c", {**common, **runtime_env(NODE_C_HOST)}, "--node-name", "node-c") as c:
                    assert (await build_of(client, c, build_id, lambda build: True))["status"] == "building"
            assert published[0].status_code == 200, published[0].text
            assert published[0].json()["data"]["version"]["state"] == "ready", published[0].text
            assert await event_data(url, "deployment.publish.failed", deployment_id) == []  # not even for a moment
            busy = await client.post(f"{b.base}{API}/sandbox-templates/slow/builds")
            assert busy.status_code == 409 and busy.json()["error"]["code"] == "BUILD_IN_PROGRESS", busy.text
            # Deleting the template through B cancels its build where it runs, on A.
            deleted = await client.delete(f"{b.base}{API}/sandbox-templates/slow")
            assert deleted.status_code == 200, deleted.text
            cancelled = await build_of(client, b, build_id, lambda build: build["status"] != "building")
            assert cancelled["status"] == "cancelled", cancelled
            assert (await client.get(f"{b.base}{API}/admin/actors/template_build/{build_id}", headers=ADMIN)).status_code == 404
            gone = await client.get(f"{b.base}{API}/sandbox-templates/{template_id}")
            assert gone.status_code == 404, gone.text

            # A build whose node dies fails with NODE_LOST, and the template can be built again elsewhere.
            made = await client.post(f"{a.base}{API}/sandbox-templates", json={"name": "orphan", "setup": ["sleep 300"]})
            assert made.status_code == 201, made.text
            build_id = made.json()["data"]["build"]["id"]
            await build_of(client, b, build_id, lambda build: build["status"] == "building")
            a.process.kill()
            a.process.wait()
            failed = await build_of(client, b, build_id, lambda build: build["status"] != "building", seconds=30)
            assert failed["status"] == "failed" and "NODE_LOST" in str(failed["error"]), failed
            assert "Build the template again" in str(failed["error"]), failed
            template = (await client.get(f"{b.base}{API}/sandbox-templates/orphan")).json()["data"]
            assert template["status"] == "failed", template
            again = await client.post(f"{b.base}{API}/sandbox-templates/orphan/builds")
            assert again.status_code == 201, again.text
            await build_of(client, b, again.json()["data"]["id"], lambda build: build["status"] == "building")
            assert (await client.delete(f"{b.base}{API}/sandbox-templates/orphan")).status_code == 200


SERVICE_APP = """
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"placed service"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"""


async def routed_by(preview_port: int, host: str, seconds: float = 10) -> str:
    """The body a node's preview router answers for `host` once it answers 200."""
    async with httpx.AsyncClient(timeout=10) as plain:
        with trio.fail_after(seconds):
            while (routed := await plain.get(f"http://127.0.0.1:{preview_port}/", headers={"Host": host})).status_code != 200:
                await trio.sleep(0.1)
    return routed.text


async def sandbox_on(client: httpx.AsyncClient, node: Served, node_name: str = "node-a") -> str:
    """A new sandbox made through `node` (named `node_name`), placed there (it is the node
    asked, with room): its id."""
    sandbox = await client.post(f"{node.base}{API}/sandboxes", json={})
    assert sandbox.status_code == 201, sandbox.text
    assert sandbox.json()["data"]["node"] == node_name, sandbox.text
    return str(sandbox.json()["data"]["id"])


async def published_service(client: httpx.AsyncClient, node: Served, name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A deployment `name` made through `node`, with a service version published from a
    new sandbox there: (the sandbox's id, the deployment, the publish's answer)."""
    sandbox_id = await sandbox_on(client, node)
    wrote = await client.post(f"{node.base}{API}/sandboxes/{sandbox_id}/files/write", json={"path": "/workspace/server.py", "content": SERVICE_APP})
    assert wrote.status_code == 201, wrote.text
    project = (await client.get(f"{node.base}{API}/projects")).json()["data"][0]["id"]
    deployment: dict[str, Any] = (await client.post(f"{node.base}{API}/projects/{project}/deployments", json={"name": name})).json()["data"]
    published = await client.post(f"{node.base}{API}/deployments/{deployment['id']}/publish", json={
        "source_sandbox_id": sandbox_id, "run_command": "python3 server.py", "port": 8000})
    assert published.status_code == 200, published.text
    answer: dict[str, Any] = published.json()["data"]
    return sandbox_id, deployment, answer


async def test_deployment_services_go_to_nodes_with_room_and_are_reached_and_deleted_wherever_they_run(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    with two_nodes(
        tmp_path, postgres_url, "placement_services", a={"CORRAL_NODE_MAX_INSTANCES": "2"}, b={"CORRAL_NODE_MAX_INSTANCES": "1"}
    ) as (a, b, url, _):
        async with owner_client(a, "Publishers", "owner@publishers.example", timeout=300) as client:
            sandbox_id = await sandbox_on(client, a)  # equals: the node asked
            try:
                wrote = await client.post(f"{a.base}{API}/sandboxes/{sandbox_id}/files/write", json={"path": "/workspace/server.py", "content": SERVICE_APP})
                assert wrote.status_code == 201, wrote.text
                project = (await client.get(f"{a.base}{API}/projects")).json()["data"][0]["id"]
                deployment_id = (await client.post(f"{a.base}{API}/projects/{project}/deployments", json={"name": "api"})).json()["data"]["id"]
                body = {"source_sandbox_id": sandbox_id, "run_command": "python3 server.py", "port": 8000}

                # The first version's service goes to the least loaded node, not its sandbox's.
                first = await client.post(f"{a.base}{API}/deployments/{deployment_id}/publish", json=body)
                assert first.status_code == 200, first.text
                [one] = first.json()["data"]["services"]
                assert (one["state"], one["node"]) == ("healthy", "node-b"), one
                assert (await client.get(f"{b.base}{API}/admin/actors/deployment_service/{one['id']}", headers=ADMIN)).status_code == 200
                # The next goes beside it while there is room; B is full: A, where the sandbox is.
                second = await client.post(f"{b.base}{API}/deployments/{deployment_id}/publish", json=body)
                assert second.status_code == 200, second.text
                [two] = second.json()["data"]["services"]
                assert (two["state"], two["node"]) == ("healthy", "node-a"), two
                nodes = {n["name"]: n for n in (await client.get(f"{a.base}{API}/admin/nodes", headers=ADMIN)).json()["data"]}
                assert (nodes["node-a"]["resources"], nodes["node-b"]["resources"]) == (2, 1)
                assert await open_claims(url) == 0
                # Each service's requests reach its own node, through either node.
                for service in (one, two):
                    for node in (a, b):
                        logs = await client.get(f"{node.base}{API}/deployments/{deployment_id}/services/{service['id']}/logs")
                        assert logs.status_code == 200, logs.text

                # No room anywhere: the next version's service has nowhere to go, and production keeps the last.
                again = await client.post(f"{a.base}{API}/deployments/{deployment_id}/publish", json=body)
                assert again.status_code == 503, again.text
                assert again.json()["error"]["message"] == (
                    "no node has room for a small deployment service: every active node is at its limit of instances or memory,"
                    " or below its disk reserve; try again later"
                ), again.text
                current = (await client.get(f"{b.base}{API}/deployments/{deployment_id}")).json()["data"]
                assert current["active_version_id"] == second.json()["data"]["version"]["id"], current

                # Deleted through either node: every service stops, on its own node.
                deleted = await client.delete(f"{b.base}{API}/deployments/{deployment_id}")
                assert deleted.status_code == 200, deleted.text
                db = open_database(url)
                try:
                    with trio.fail_after(10):
                        while await db.fetch_all("SELECT id FROM deployment_services WHERE status <> 'destroyed'"):
                            await trio.sleep(0.1)
                finally:
                    await db.close()
            finally:
                await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")


async def test_a_drained_nodes_running_service_starts_again_elsewhere_before_it_stops_there(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    """A drain with `all` moves a deployment service by starting its version again on
    another node and stopping it on the drained one once the new one is healthy: the
    deployment answers through a router all along (no request fails), from the new node
    afterwards."""
    previews = (free_port(), free_port())
    with two_nodes(tmp_path, postgres_url, "relocated_services", preview_ports=previews) as (a, b, url, _):
        async with owner_client(a, "Relocated", "owner@relocated.example", timeout=300) as client:
            sandbox_id, deployment, answer = await published_service(client, a, "moving")
            [old] = answer["services"]
            version_id = answer["version"]["id"]
            assert (await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")).status_code == 200  # its artifact is all the service needs
            drained_node, other = (a, b) if old["node"] == "node-a" else (b, a)
            other_name = "node-b" if old["node"] == "node-a" else "node-a"
            host = httpx.URL(deployment["public_url"]).host
            failures: list[str] = []
            served = 0
            done = trio.Event()

            async def keep_asking() -> None:
                nonlocal served
                async with httpx.AsyncClient(timeout=10) as plain:
                    while not done.is_set():
                        for port in previews:
                            answer = await plain.get(f"http://127.0.0.1:{port}/", headers={"Host": host})
                            if answer.status_code == 200 and answer.text == "placed service":
                                served += 1
                            else:
                                failures.append(f"{port}: {answer.status_code} {answer.text[:80]}")
                        await trio.sleep(0.02)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(keep_asking)
                drained = await client.post(f"{other.base}{API}/admin/nodes/{old['node']}/drain", headers=ADMIN, json={"move": "all"})
                assert drained.status_code == 200, drained.text
                since = trio.current_time()
                with trio.fail_after(120):
                    while True:
                        services = (await client.get(f"{a.base}{API}/deployments/{deployment['id']}/versions/{version_id}")).json()["data"]["services"]
                        states = {s["id"]: (s["state"], s["node"]) for s in services}
                        replacements = [state for sid, state in states.items() if sid != old["id"]]
                        if states[old["id"]][0] == "removed" and ("healthy", other_name) in replacements:
                            break
                        await trio.sleep(0.2)
                print(f"\ndrain --move all: a deployment service runs on its new node and stopped on the old in {trio.current_time() - since:.1f} s")
                await trio.sleep(1)  # and is served from there
                done.set()
            assert failures == [], failures[:5]
            assert served > 20
            nodes = {n["name"]: n for n in (await client.get(f"{a.base}{API}/admin/nodes", headers=ADMIN)).json()["data"]}
            assert nodes[old["node"]]["resources"] == 0, nodes
            assert await open_claims(url) == 0
            assert (await client.delete(f"{drained_node.base}{API}/deployments/{deployment['id']}")).status_code == 200


async def test_a_lost_nodes_deployment_service_boots_again_on_the_node_that_took_it_over(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    """A service has nothing of its own on its node: when the node is lost, the node that
    takes it over boots it again from its version's artifact (same service, `starting`
    then `healthy` there), and the deployment answers again through the survivor's
    router; the lost node, back, destroys its old copy."""
    previews = (free_port(), free_port())
    with two_nodes(tmp_path, postgres_url, "lost_services", preview_ports=previews) as (a, b, _, common):
        async with owner_client(a, "Recovered", "owner@recovered.example", timeout=300) as client:
            sandbox_id, deployment, answer = await published_service(client, a, "survivor")
            [service] = answer["services"]
            version_id = answer["version"]["id"]
            assert (await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")).status_code == 200
            letter = "a" if service["node"] == "node-a" else "b"
            lost, survivor = (a, b) if letter == "a" else (b, a)
            survivor_preview = previews[1] if letter == "a" else previews[0]
            host = httpx.URL(deployment["public_url"]).host

            assert lost.process is not None
            lost.process.kill()
            lost.process.wait()
            since = trio.current_time()
            with trio.fail_after(120):
                while True:
                    answer = await client.get(f"{survivor.base}{API}/deployments/{deployment['id']}/versions/{version_id}")
                    if answer.status_code == 200:
                        [again] = answer.json()["data"]["services"]
                        if again["node"] != service["node"] and again["state"] == "healthy":
                            break
                        assert again["state"] in ("healthy", "starting"), again
                    await trio.sleep(0.2)
            print(f"\nkill -9 of a service's node -> healthy again on the survivor: {trio.current_time() - since:.1f} s")
            assert again["id"] == service["id"]
            assert await routed_by(survivor_preview, host) == "placed service"

            env = {**common, **runtime_env(RUNTIME_SETTINGS if letter == "a" else NODE_B_HOST)}
            with corral_serve(tmp_path / letter, env, "--node-name", service["node"], log_name="again.log") as back:
                with trio.fail_after(20):
                    while f"destroyed instance {service['id']}" not in (tmp_path / letter / "again.log").read_text():
                        await trio.sleep(0.2)
                assert (await client.delete(f"{back.base}{API}/deployments/{deployment['id']}")).status_code == 200


async def test_a_service_its_credits_stopped_on_another_node_is_woken_by_a_promote_through_the_deployments_node(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    """Only a service's own node stops it when its tenant's credits run out (every node
    charges, none other tries and fails); a promote of its version through the
    deployment's node, another one, starts it again there, as on one node."""
    previews = (free_port(), free_port())
    with two_nodes(tmp_path, postgres_url, "woken_services", {"CORRAL_METER_INTERVAL": "0.5"}, preview_ports=previews) as (a, b, url, _):
        async with owner_client(a, "Woken", "owner@woken.example", timeout=300) as client:
            sandbox_id, deployment, answer = await published_service(client, a, "woken")
            [service] = answer["services"]
            assert service["node"] == "node-b", service  # the least loaded: A has the sandbox
            version_path = f"{API}/deployments/{deployment['id']}/versions/{answer['version']['id']}"
            assert (await client.get(f"{b.base}{API}/deployments/{deployment['id']}")).json()["data"]["node"] == "node-a"

            db = open_database(url)
            try:
                await db.execute("UPDATE credit_accounts SET balance_credits = 0")
                with trio.fail_after(30):
                    while (await client.get(f"{a.base}{version_path}")).json()["data"]["services"][0]["state"] != "stopped":
                        await trio.sleep(0.2)
                await trio.sleep(1.5)  # a few more metering rounds on both nodes
                assert "stopping deployment_service" not in a.log_path.read_text()  # A left it to B
                await db.execute("UPDATE credit_accounts SET balance_credits = 1000")
            finally:
                await db.close()

            woken = await client.post(f"{b.base}{version_path}/promote")  # served by A, the deployment's node
            assert woken.status_code == 200, woken.text
            [again] = (await client.get(f"{a.base}{version_path}")).json()["data"]["services"]
            assert (again["id"], again["state"], again["node"]) == (service["id"], "healthy", "node-b"), again
            host = httpx.URL(deployment["public_url"]).host
            assert await routed_by(previews[0], host) == "placed service"
            assert (await client.delete(f"{a.base}{API}/deployments/{deployment['id']}")).status_code == 200
            assert (await client.delete(f"{a.base}{API}/sandboxes/{sandbox_id}")).status_code == 200


async def test_a_template_build_goes_to_a_node_with_room_and_none_is_made_without_one(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    with two_nodes(
        tmp_path, postgres_url, "placement_build_room", a={"CORRAL_NODE_MAX_INSTANCES": "1"}, b={"CORRAL_NODE_MAX_INSTANCES": "1"}
    ) as (a, b, url, _):
        async with owner_client(a, "Room builders", "owner@room-builders.example", timeout=120) as client:
            first_id = await sandbox_on(client, a)
            made = await client.post(f"{a.base}{API}/sandbox-templates", json={"name": "roomy", "setup": ["sleep 300"]})
            assert made.status_code == 201, made.text
            build = made.json()["data"]["build"]
            assert build["node"] == "node-b", build  # A is full
            assert await open_claims(url) == 0
            second = await client.post(f"{a.base}{API}/sandboxes", json={})
            assert second.status_code == 503, second.text  # the build takes B's room
            refused(await client.post(f"{b.base}{API}/sandbox-templates", json={"name": "crowded"}),
                    "no node has room for a small template build: every active node is at its limit of instances or memory,"
                    " or below its disk reserve; try again later")
            names = [t["name"] for t in (await client.get(f"{a.base}{API}/sandbox-templates")).json()["data"]]
            assert "crowded" not in names and "roomy" in names  # nothing made
            assert (await client.delete(f"{a.base}{API}/sandbox-templates/roomy")).status_code == 200
            assert (await client.delete(f"{a.base}{API}/sandboxes/{first_id}")).status_code == 200


async def test_forty_creates_at_once_through_two_nodes_fill_each_node_exactly_to_its_room(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    with two_nodes(
        tmp_path, postgres_url, "placement_many",
        a={"CORRAL_NODE_MAX_INSTANCES": "3"}, b={"CORRAL_NODE_MAX_MEMORY_MB": "16384"},  # four small sandboxes
    ) as (a, b, url, _):
        nodes = both_active(a)
        assert nodes["node-a"]["room"] == {"max_instances": 3, "max_memory_mb": 0, "disk_reserve_gb": 5.0}
        assert nodes["node-b"]["room"] == {"max_instances": 0, "max_memory_mb": 16384, "disk_reserve_gb": 5.0}
        key = a.owner_key("Crowd", "owner@crowd.example")
        answers: list[httpx.Response] = []
        limits = httpx.Limits(max_connections=40)
        async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {key}"}, limits=limits) as client:

            async def create(node: Served) -> None:
                answers.append(await client.post(f"{node.base}{API}/sandboxes", json={}))

            try:
                async with trio.open_nursery() as nursery:
                    for n in range(40):
                        nursery.start_soon(create, (a, b)[n % 2])
                statuses = Counter(answer.status_code for answer in answers)
                assert statuses == {201: 7, 503: 33}, statuses
                created = [answer.json()["data"] for answer in answers if answer.status_code == 201]
                assert Counter(row["node"] for row in created) == {"node-a": 3, "node-b": 4}
                assert all(row["status"] == "running" for row in created)
                assert {answer.json()["error"]["message"] for answer in answers if answer.status_code == 503} == {
                    "no node has room for a small sandbox: every active node is at its limit of instances or memory,"
                    " or below its disk reserve; try again later"
                }
                # Each sandbox once, on the node its record names, through either node.
                for node in (a, b):
                    listed = (await client.get(f"{node.base}{API}/sandboxes")).json()["data"]
                    assert sorted((row["id"], row["node"]) for row in listed) == sorted((row["id"], row["node"]) for row in created)
                nodes = {node["name"]: node for node in (await client.get(f"{b.base}{API}/admin/nodes", headers=ADMIN)).json()["data"]}
                assert (nodes["node-a"]["resources"], nodes["node-b"]["resources"]) == (3, 4)
                assert await open_claims(url) == 0
            finally:
                for answer in answers:
                    if answer.status_code == 201:
                        await client.delete(f"{a.base}{API}/sandboxes/{answer.json()['data']['id']}")


def node(name: str, *, cores: int = 2, templates: tuple[str, ...] = ("default", "desktop"), available: int = 8000) -> NodeRecord:
    return NodeRecord(
        name=name, advertise_url=f"http://{name}:8080", region="local", state="active", boot_id="b", started_at="",
        heartbeat_at="", cores=cores, memory_mb=16000, disk_free_mb=100_000, instances=0, pooled=0,
        memory_mb_used=16000 - available, templates=list(templates), updated_at="", max_instances=0, max_memory_mb=0,
        disk_reserve_mb=5120,
    )  # fmt: skip


def pick(nodes: list[NodeRecord], usage: dict[str, Usage], demand: Demand, here: str) -> str | None:
    chosen = choose(nodes, usage, demand, here)
    return chosen.name if chosen is not None else None


def test_the_policy_prefers_a_built_template_then_the_least_loaded_then_the_node_asked_then_free_memory() -> None:
    small = Demand("sandboxes", "small", "default")
    a, b = node("a"), node("b")
    assert pick([a, b], {}, small, "b") == "b"  # equals: no hop
    assert pick([a, b], {"b": Usage(1, 4096)}, small, "b") == "a"  # least loaded
    assert pick([a, node("b", cores=4)], {"a": Usage(1, 4096), "b": Usage(2, 8192)}, small, "a") == "a"  # per core
    assert pick([a, node("b", available=9000)], {}, small, "c") == "b"  # more memory free
    assert pick([a, node("b", available=9000)], {}, small, "a") == "a"  # but no hop first
    bare = node("b", templates=())
    assert pick([a, bare], {"a": Usage(5, 0)}, small, "b") == "a"  # the template is built there
    assert pick([a, bare], {"a": Usage(5, 0)}, Demand("databases", "small"), "b") == "b"  # none to build
    full = NodeRecord(**{**a.__dict__, "max_instances": 2})
    tight = NodeRecord(**{**a.__dict__, "max_memory_mb": 10_000})
    low_disk = NodeRecord(**{**a.__dict__, "disk_free_mb": 5000})
    assert choose([full], {"a": Usage(2, 0)}, small, here="a") is None
    assert choose([full], {"a": Usage(1, 0)}, small, here="a") is full
    assert choose([tight], {"a": Usage(1, 4096)}, small, here="a") is tight  # 8192 of 10000
    assert choose([tight], {"a": Usage(1, 4096)}, Demand("sandboxes", "medium"), here="a") is None
    assert choose([low_disk], {}, small, here="a") is None


async def test_a_placed_create_is_taken_only_with_a_valid_fresh_mark_for_this_node(postgres_url: str) -> None:
    url = create_database(postgres_url, f"placement_sign_{os.getpid()}_{next(_databases)}")
    db = open_database(url)
    try:
        b = Forwarder(Homes(db, "node-b", shared=True), forwarding_key("cluster-secret"))
        a = Forwarder(Homes(db, "node-a", shared=True), forwarding_key("cluster-secret"))
        stranger = Forwarder(Homes(db, "node-a", shared=True), forwarding_key("another-secret"))

        def scope(mark: bytes) -> dict[str, Any]:
            return {"headers": [(b"host", b"x"), (PLACED, mark)]}

        signed = scope(a.sign_placed("claim-1", "node-b"))
        assert b.placed_claim(signed) == "claim-1" and signed["headers"] == [(b"host", b"x")]
        assert a.placed_claim(scope(a.sign_placed("claim-1", "node-b"))) is None  # placed on another node
        assert b.placed_claim(scope(stranger.sign_placed("claim-1", "node-b"))) is None  # another cluster's key
        claim, node, stamp, signature = a.sign_placed("claim-1", "node-b").decode().split(" ")
        assert b.placed_claim(scope(f"claim-2 {node} {stamp} {signature}".encode())) is None  # another claim
        assert b.placed_claim(scope(f"{claim} {node} {int(stamp) - 120} {signature}".encode())) is None  # stale
        assert b.placed_claim(scope(b"nonsense")) is None
        assert HEADER != PLACED
    finally:
        await db.close()


async def test_a_region_outside_corral_regions_is_422_and_a_one_node_store_places_nothing(api: Api, tenant: Tenant) -> None:
    for path, body in (("/sandboxes", {"region": "mars"}), ("/databases", {"name": "orders", "region": "mars"})):
        answer = await api.request("POST", f"{API}{path}", key=tenant.key, json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["details"] == {"region": "unknown region; one of local"}
    rows = await api.platform.db.fetch_one("SELECT COUNT(*) AS n FROM node_claims")
    assert rows is not None and rows["n"] == 0
    assert api.platform.db.dialect == "sqlite"


def test_placement_reads_size_template_and_region_from_a_create_and_leaves_the_rest_to_the_route() -> None:
    forwarder = Forwarder(Homes(None, "node-a", shared=True), b"key", regions=("eu", "us"))  # type: ignore[arg-type]

    def demand(path: str, body: bytes, *, bearer: bool = True) -> Demand | None:
        headers = [(b"authorization", b"Bearer msk_x")] if bearer else []
        return forwarder.demand({"path": path, "headers": headers}, body)

    assert demand("/api/v1/sandboxes", b"") == Demand("sandboxes", "small", "default")
    assert demand("/api/v1/sandboxes", b'{"size": "large", "template_id": "mine", "region": "us"}') == Demand(
        "sandboxes", "large", "mine", "us"
    )
    assert demand("/api/v1/computers", b'{"name": "c", "template_type": "svc-desktop"}') == Demand("computers", "small", "desktop")
    assert demand("/api/v1/computers", b'{"name": "c", "template_type": "no-such-template"}') == Demand("computers", "small")
    assert demand("/api/v1/databases", b'{"name": "d", "size": "medium"}') == Demand("databases", "medium")
    for refused in (b"{", b"[]", b"[" * 100_000, b"\xff", b'{"size": "huge"}', b'{"size": 4}', b'{"region": "mars"}', b'{"region": 1}'):
        assert demand("/api/v1/sandboxes", refused) is None, refused  # the route's 400 or 422, unplaced
    assert demand("/api/v1/sandboxes", b"{}", bearer=False) is None  # the route's 401

"""Router tables, domain maps and revocations reach every node within 1 s (issue 30):
two real `corral serve` nodes on one real PostgreSQL; each change is made through node
A and watched through node B's real routes (its preview router port, the `GET
/tls/ask` the TLS edge asks), and the delay from A's answer to B's first changed
answer is measured and must stay under a second.

The nodes (and a DNS server their checks ask) are shared by the module's tests; each
test makes its own tenant. Only the sandbox test runs an instance, on node A, stopped
before node B looks at it (reaching an instance on another node is not this part)."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import trio

from tests.actors.nodes.test_shared_events import NODE_B_HOST, runtime_env
from tests.dns_server import DnsServer
from tests.pg_server import create_database
from tests.serve_process import Served, corral_serve
from tests.support import ADMIN_KEY, PASSWORD, RUNTIME_SETTINGS, cleanup_host, free_port

API = "/api/v1"
GOAL_SECONDS = 1.0
SERVICE_DOMAIN = "corral.localhost"
_tenants = itertools.count()
DELAYS: dict[str, float] = {}
"""What each test measured (printed at the end of the module: `pytest -s`)."""


class ThreadedDns:
    """`tests.dns_server.DnsServer`'s answers from a thread of its own, so that the
    module's nodes (made by a synchronous fixture) can ask it throughout."""

    def __init__(self) -> None:
        self.zone = DnsServer()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            answer = self.zone.answer(data)
            if answer is not None:
                self.sock.sendto(answer, peer)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.sock.close()


@dataclass
class Cluster:
    a: Served
    b: Served
    b_preview: int
    dns: DnsServer


@dataclass
class Owner:
    key: str
    project_id: str

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres_url: str, runtime_host: None) -> Iterator[Cluster]:
    url = create_database(postgres_url, f"shared_routing_{os.getpid()}")
    dns = ThreadedDns()
    root = tmp_path_factory.mktemp("shared-routing")
    common = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", "CORRAL_DNS_SERVERS": dns.address}
    b_preview = free_port()
    (root / "a").mkdir()
    (root / "b").mkdir()
    try:
        with corral_serve(root / "a", {**common, **runtime_env(RUNTIME_SETTINGS)}, "--node-name", "node-a") as a, corral_serve(
            root / "b", {**common, **runtime_env(NODE_B_HOST)}, "--node-name", "node-b", "--preview-port", str(b_preview)
        ) as b:
            yield Cluster(a, b, b_preview, dns.zone)
        print("\nshared routing, node A's answer -> node B's first changed answer:")
        for what, seconds in DELAYS.items():
            print(f"  {what}: {seconds * 1000:.1f} ms")
    finally:
        dns.close()
        cleanup_host(**{name: NODE_B_HOST[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})


async def new_owner(client: httpx.AsyncClient, node: Served) -> Owner:
    n = next(_tenants)
    created = await client.post(
        f"{node.base}{API}/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        json={"name": f"Routing {n}", "owner_email": f"owner{n}-{os.getpid()}@routing.example", "owner_password": PASSWORD},
    )
    assert created.status_code == 201, created.text
    body = created.json()["data"]
    return Owner(body["api_key"]["key"], body["project"]["id"])


async def call(client: httpx.AsyncClient, node: Served, owner: Owner, method: str, path: str, expect: int = 200, **kwargs: Any) -> Any:
    answer = await client.request(method, f"{node.base}{API}{path}", headers=owner.bearer, **kwargs)
    assert answer.status_code == expect, answer.text
    return answer.json() if answer.content else None


def router_get(client: httpx.AsyncClient, cluster: Cluster, host: str, **headers: str) -> Awaitable[httpx.Response]:
    """A request to node B's preview router for `host`."""
    return client.get(f"http://127.0.0.1:{cluster.b_preview}/", headers={"Host": host, **headers})


async def routed_as(client: httpx.AsyncClient, cluster: Cluster, host: str, **headers: str) -> str:
    """What node B's router answers for `host`: the reason of its page (`X-Corral-Preview-Error`), or the status."""
    answer = await router_get(client, cluster, host, **headers)
    return answer.headers.get("x-corral-preview-error") or str(answer.status_code)


async def edge_allows(client: httpx.AsyncClient, cluster: Cluster, name: str) -> bool:
    """Node B's answer to the TLS edge's question about `name`."""
    answer = await client.get(f"{cluster.b.base}{API}/tls/ask", params={"domain": name})
    assert answer.status_code in (200, 404), answer.text
    return answer.status_code == 200


async def shows_within(what: str, check: Callable[[], Awaitable[bool]], since: float) -> float:
    """Seconds from `since` (node A's answer) until `check()` holds on node B; fails past the goal."""
    deadline = since + GOAL_SECONDS
    while True:
        if await check():
            delay = time.monotonic() - since
            DELAYS[what] = delay
            return delay
        assert time.monotonic() < deadline, f"{what}: not seen on node B within {GOAL_SECONDS} s"
        await trio.sleep(0.002)


@contextlib.asynccontextmanager
async def http() -> Any:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def routed_deployment(client: httpx.AsyncClient, cluster: Cluster, owner: Owner, name: str) -> dict[str, Any]:
    """A deployment made through node A, with no version yet, changed through A (a
    PATCH: no event says so), and seen by B's router under its new name."""
    created = await call(client, cluster.a, owner, "POST", f"/projects/{owner.project_id}/deployments", 201, json={"name": name})
    deployment: dict[str, Any] = created["data"]
    host = f"{deployment['slug']}.{SERVICE_DOMAIN}"
    await call(client, cluster.a, owner, "PATCH", f"/deployments/{deployment['id']}", json={"name": f"{name} renamed"})
    since = time.monotonic()

    async def renamed() -> bool:
        answer = await router_get(client, cluster, host)
        return answer.headers.get("x-corral-preview-error") == "no_version" and f"{name} renamed" in answer.text

    await shows_within("deployment changed (PATCH)", renamed, since)
    return deployment


async def test_a_deployment_and_its_custom_domain_made_through_node_a_route_on_node_b(cluster: Cluster) -> None:
    async with http() as client:
        owner = await new_owner(client, cluster.a)
        await routed_as(client, cluster, f"nothing-here.{SERVICE_DOMAIN}")  # node B is up and routing
        deployment = await routed_deployment(client, cluster, owner, "shop")
        own_host = f"{deployment['slug']}.{SERVICE_DOMAIN}"

        fqdn = f"shop-{next(_tenants)}.example.test"
        registered = await call(client, cluster.a, owner, "POST", f"/deployments/{deployment['id']}/domains", 201, json={"domain": fqdn})
        domain = registered["data"]
        cluster.dns.records[fqdn] = domain["verification_target"]
        assert not await edge_allows(client, cluster, fqdn)  # pending: no certificate, no route
        assert await routed_as(client, cluster, fqdn) != "no_version"
        verified = await call(client, cluster.a, owner, "POST", f"/custom-domains/{domain['id']}/verify")
        since = time.monotonic()
        assert verified["data"]["status"] == "verified"
        await shows_within("custom domain verified: the edge's answer", lambda: edge_allows(client, cluster, fqdn), since)
        await shows_within("custom domain verified: the router", lambda: _is(routed_as(client, cluster, fqdn), "no_version"), since)

        await call(client, cluster.a, owner, "DELETE", f"/custom-domains/{domain['id']}")
        since = time.monotonic()
        await shows_within("custom domain removed: the edge's answer", lambda: _not(edge_allows(client, cluster, fqdn)), since)
        await shows_within("custom domain removed: the router", lambda: _is_not(routed_as(client, cluster, fqdn), "no_version"), since)

        await call(client, cluster.a, owner, "DELETE", f"/deployments/{deployment['id']}")
        since = time.monotonic()
        await shows_within("deployment deleted", lambda: _is_not(routed_as(client, cluster, own_host), "no_version"), since)


async def test_a_preview_domain_put_and_removed_through_node_a_routes_on_node_b(cluster: Cluster) -> None:
    async with http() as client:
        owner = await new_owner(client, cluster.a)
        deployment = await routed_deployment(client, cluster, owner, "docs")
        domain = f"acme{next(_tenants)}.test"
        host = f"{deployment['slug']}.{domain}"
        assert await routed_as(client, cluster, host) == "no_computer"  # not a domain of this tenant: nothing there

        await call(client, cluster.a, owner, "PUT", "/tenant/preview-domain", json={"preview_domain": domain})
        since = time.monotonic()  # pending: URLs do not use it yet, but the router accepts it
        await shows_within("preview domain put", lambda: _is(routed_as(client, cluster, host), "no_version"), since)

        await call(client, cluster.a, owner, "DELETE", "/tenant/preview-domain")
        since = time.monotonic()
        await shows_within("preview domain removed", lambda: _is(routed_as(client, cluster, host), "no_computer"), since)
        await call(client, cluster.a, owner, "DELETE", f"/deployments/{deployment['id']}")


async def test_a_sandbox_exposed_shared_revoked_and_destroyed_through_node_a_routes_on_node_b(cluster: Cluster) -> None:
    async with http() as client:
        owner = await new_owner(client, cluster.a)
        sandbox = (await call(client, cluster.a, owner, "POST", "/sandboxes", 201, json={}, timeout=120))["data"]
        try:
            await call(client, cluster.a, owner, "POST", f"/sandboxes/{sandbox['id']}/stop", timeout=120)
            host = f"3000-{sandbox['slug']}.sandbox.{SERVICE_DOMAIN}"
            share = (await call(client, cluster.a, owner, "POST", f"/sandboxes/{sandbox['id']}/shares", 201, json={}))["data"]
            token = {"X-Preview-Token": share["token"]}
            preview = (await call(client, cluster.a, owner, "POST", f"/sandboxes/{sandbox['id']}/preview-token", json={}))["data"]
            # B admits A's tokens and has the sandbox in its cache: port 3000 is not exposed yet.
            assert await routed_as(client, cluster, host, **token) == "port_not_exposed"
            assert await routed_as(client, cluster, host, **{"X-Preview-Token": preview["token"]}) == "port_not_exposed"

            await call(client, cluster.a, owner, "POST", f"/sandboxes/{sandbox['id']}/expose", json={"port": 3000})
            since = time.monotonic()
            await shows_within("port exposed", lambda: _is(routed_as(client, cluster, host, **token), "sandbox_not_running"), since)

            domain = f"preview{next(_tenants)}.test"
            custom_host = f"3000-{sandbox['slug']}.sandbox.{domain}"
            assert not await edge_allows(client, cluster, custom_host)
            await call(client, cluster.a, owner, "PUT", "/tenant/preview-domain", json={"preview_domain": domain})
            since = time.monotonic()
            await shows_within("preview domain put: the edge's answer", lambda: edge_allows(client, cluster, custom_host), since)
            await shows_within("preview domain put: a sandbox's host", lambda: _is(routed_as(client, cluster, custom_host, **token), "sandbox_not_running"), since)

            await call(client, cluster.a, owner, "DELETE", f"/sandboxes/{sandbox['id']}/shares/{share['id']}")
            since = time.monotonic()
            await shows_within("share link revoked", lambda: _is(routed_as(client, cluster, host, **token), "token_revoked"), since)
        finally:
            await call(client, cluster.a, owner, "DELETE", f"/sandboxes/{sandbox['id']}", timeout=120)
        since = time.monotonic()
        await shows_within("sandbox destroyed: the router", lambda: _is(routed_as(client, cluster, host, **token), "no_sandbox"), since)
        await shows_within("sandbox destroyed: the edge's answer", lambda: _not(edge_allows(client, cluster, host)), since)


async def _is(answer: Awaitable[str], expected: str) -> bool:
    return await answer == expected


async def _is_not(answer: Awaitable[str], unexpected: str) -> bool:
    return await answer != unexpected


async def _not(answer: Awaitable[bool]) -> bool:
    return not await answer



async def test_a_static_version_of_a_sandbox_on_node_a_published_through_node_b_is_served_by_node_b(cluster: Cluster) -> None:
    """The publish reaches node B and is served on node A, where its source sandbox is
    (only A reads its files): the version's artifact is written to A's blob store, and A
    has B hold a copy (it must outlive A) before the version reads ready; node B's
    router serves it, a 3 MB file byte for byte. The node route gives nothing to a caller that
    is not a node."""
    async with http() as client:
        owner = await new_owner(client, cluster.a)
        sandbox = (await call(client, cluster.a, owner, "POST", "/sandboxes", 201, json={}, timeout=120))["data"]
        try:
            assert sandbox["node"] == "node-a", "placement chose node B (the artifact would be on B's own store)"
            made = await call(client, cluster.a, owner, "POST", f"/sandboxes/{sandbox['id']}/exec", json={"timeout": 60, "command": (
                "mkdir -p /workspace/site && echo '<h1>built on node a</h1>' > /workspace/site/index.html"
                " && head -c 3000000 /dev/urandom > /workspace/site/big.bin && sha256sum /workspace/site/big.bin"
            )})
            assert made["exit_code"] == 0, made
            big_sha = made["stdout"].split()[0]
            deployment = (await call(client, cluster.a, owner, "POST", f"/projects/{owner.project_id}/deployments", 201, json={"name": "static"}))["data"]
            published = await call(client, cluster.b, owner, "POST", f"/deployments/{deployment['id']}/publish", json={
                "source_sandbox_id": sandbox["id"], "output_path": "/workspace/site"}, timeout=300)
            assert published["data"]["version"]["state"] == "ready", published
            artifact = published["data"]["version"]["artifact_sha256"]
            for node in (cluster.a, cluster.b):  # written on A, held by B too before the version read ready
                assert (node.log_path.parent / "data" / "blobs" / "sha256" / artifact[:2] / artifact).is_file(), node.base
            since = time.monotonic()
            host = f"{deployment['slug']}.{SERVICE_DOMAIN}"

            async def served() -> bool:
                answer = await router_get(client, cluster, host)
                return answer.status_code == 200 and "built on node a" in answer.text

            while not await served():  # the first reload fetches the artifact: not a routing delay
                assert time.monotonic() < since + 30, "node B does not serve the version published on node A"
                await trio.sleep(0.02)
            print(f"\nstatic version published (on node A), first served by node B after {(time.monotonic() - since) * 1000:.0f} ms")
            big = await client.get(f"http://127.0.0.1:{cluster.b_preview}/big.bin", headers={"Host": host})
            assert big.status_code == 200 and hashlib.sha256(big.content).hexdigest() == big_sha

            # Not a node: the same 404 for an unsigned, a forged and a stale request.
            for headers in ({}, {"X-Corral-Blob-Request": f"node-b {int(time.time())} {'0' * 64}"},
                            {"X-Corral-Blob-Request": "node-b 1 x"}):
                refused = await client.get(f"{cluster.a.base}{API}/nodes/blobs/{artifact}", headers=headers)
                assert refused.status_code == 404 and refused.json()["error"]["code"] == "NOT_FOUND", refused.text
                assert b"built on node a" not in refused.content
        finally:
            await call(client, cluster.a, owner, "DELETE", f"/sandboxes/{sandbox['id']}", timeout=120)


SERVICE_APP = """
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("served on node a " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"""


async def test_a_service_version_running_on_node_a_is_reached_and_managed_through_node_b(cluster: Cluster) -> None:
    """A service version's instance runs on its source sandbox's node (A): node B's
    router relays the deployment's host to A's router, and the deployment's requests
    through B (its service's logs, its deletion) are served on A, where the service's
    actor is, so deleting it through B stops the service on A."""
    async with http() as client:
        owner = await new_owner(client, cluster.a)
        sandbox = (await call(client, cluster.a, owner, "POST", "/sandboxes", 201, json={}, timeout=120))["data"]
        try:
            assert sandbox["node"] == "node-a", "placement chose node B"
            await call(client, cluster.a, owner, "POST", f"/sandboxes/{sandbox['id']}/files/write", 201,
                       json={"path": "/workspace/server.py", "content": SERVICE_APP})
            deployment = (await call(client, cluster.b, owner, "POST", f"/projects/{owner.project_id}/deployments", 201, json={"name": "api"}))["data"]
            published = (await call(client, cluster.b, owner, "POST", f"/deployments/{deployment['id']}/publish", json={
                "source_sandbox_id": sandbox["id"], "run_command": "python3 server.py", "port": 8000}, timeout=300))["data"]
            [service] = published["services"]
            assert published["version"]["state"] == "ready" and service["state"] == "healthy", published
            host = f"{deployment['slug']}.{SERVICE_DOMAIN}"
            since = time.monotonic()
            while (answer := await client.get(f"http://127.0.0.1:{cluster.b_preview}/x", headers={"Host": host})).status_code != 200:
                assert time.monotonic() < since + 30, answer.text
                await trio.sleep(0.05)
            assert answer.text == "served on node a /x"

            logs = await call(client, cluster.b, owner, "GET", f"/deployments/{deployment['id']}/services/{service['id']}/logs")
            assert "data" in logs
            await call(client, cluster.b, owner, "DELETE", f"/deployments/{deployment['id']}")
            since = time.monotonic()
            while (await client.get(f"http://127.0.0.1:{cluster.b_preview}/x", headers={"Host": host})).status_code == 200:
                assert time.monotonic() < since + 30, "the deleted deployment is still served"
                await trio.sleep(0.05)
            listed = await call(client, cluster.a, owner, "GET", f"/deployments/{deployment['id']}", expect=404)
            assert listed["error"]["code"] == "DEPLOYMENT_NOT_FOUND"
        finally:
            await call(client, cluster.a, owner, "DELETE", f"/sandboxes/{sandbox['id']}", timeout=120)


async def test_a_deployment_and_its_domain_changed_through_either_node_live_on_one_and_stay_deleted(cluster: Cluster) -> None:
    """One home per resource (issue 30) for resources without an instance: a deployment's
    and a custom domain's actor runs only on its home node (the one its create reached),
    and a request through the other node is forwarded there. Through a load balancer
    that alternates, what one node changed is what the other answers, and a deletion
    through one node is never undone by an actor the other node kept from before it."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with http() as client:
        owner = await new_owner(client, cluster.a)
        deployment = (await call(client, cluster.a, owner, "POST", f"/projects/{owner.project_id}/deployments", 201, json={"name": "lb"}))["data"]
        path = f"/deployments/{deployment['id']}"
        assert deployment["node"] == "node-a"
        expected = {"name": "lb", "metadata": {}}
        for turn, node in enumerate((cluster.a, cluster.b, cluster.a, cluster.b, cluster.a)):
            patch = {"name": f"lb {turn}"} if turn % 2 == 0 else {"metadata": {"turn": str(turn)}}
            expected.update(patch)
            changed = (await call(client, node, owner, "PATCH", path, json=patch))["data"]
            assert {name: changed[name] for name in expected} == expected, f"turn {turn}: {changed}"
            for other in (cluster.a, cluster.b):
                seen = (await call(client, other, owner, "GET", path))["data"]
                assert {name: seen[name] for name in expected} == expected
        on_a = await client.get(f"{cluster.a.base}{API}/admin/actors/deployment/{deployment['id']}", headers=admin)
        on_b = await client.get(f"{cluster.b.base}{API}/admin/actors/deployment/{deployment['id']}", headers=admin)
        assert (on_a.status_code, on_b.status_code) == (200, 404), (on_a.text, on_b.text)

        fqdn = f"lb-{next(_tenants)}.example.test"
        domain = (await call(client, cluster.b, owner, "POST", f"{path}/domains", 201, json={"domain": fqdn}))["data"]
        assert domain["node"] == "node-a"  # made by the deployment's node, as the deployment's domains are
        missing = await call(client, cluster.a, owner, "POST", f"/custom-domains/{domain['id']}/verify", 422)
        assert missing["error"]["code"] == "CNAME_NOT_FOUND", missing
        cluster.dns.records[fqdn] = domain["verification_target"]
        verified = await call(client, cluster.b, owner, "POST", f"/custom-domains/{domain['id']}/verify")
        assert verified["data"]["status"] == "verified"
        again = await call(client, cluster.a, owner, "POST", f"/custom-domains/{domain['id']}/verify", 409)
        assert again["error"]["code"] == "DOMAIN_ALREADY_VERIFIED"
        await call(client, cluster.b, owner, "DELETE", f"/custom-domains/{domain['id']}")
        gone = await call(client, cluster.a, owner, "POST", f"/custom-domains/{domain['id']}/verify", 404)
        assert gone["error"]["code"] == "DOMAIN_NOT_FOUND"
        await call(client, cluster.b, owner, "GET", f"/custom-domains/{domain['id']}", 404)

        await call(client, cluster.b, owner, "DELETE", path)
        for node in (cluster.a, cluster.b):
            refused = await call(client, node, owner, "PATCH", path, 404, json={"name": "back from the dead"})
            assert refused["error"]["code"] == "DEPLOYMENT_NOT_FOUND"
            await call(client, node, owner, "GET", path, 404)


async def test_a_publish_beside_its_sandbox_on_another_node_moves_the_deployments_home_there(cluster: Cluster) -> None:
    """The publish runs where its source sandbox is (node B), and reports to the
    deployment's actor there: the home moves from A to B (one compare-and-set), A's actor
    stops when A hears so, and from then on every request for the deployment, through
    either node, is B's."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with http() as client:
        owner = await new_owner(client, cluster.a)
        sandbox = (await call(client, cluster.b, owner, "POST", "/sandboxes", 201, json={}, timeout=120))["data"]
        try:
            assert sandbox["node"] == "node-b", "placement chose node A"
            made = await call(client, cluster.b, owner, "POST", f"/sandboxes/{sandbox['id']}/exec", json={
                "command": "mkdir -p /workspace/site && echo '<h1>moved</h1>' > /workspace/site/index.html"})
            assert made["exit_code"] == 0, made
            deployment = (await call(client, cluster.a, owner, "POST", f"/projects/{owner.project_id}/deployments", 201, json={"name": "mover"}))["data"]
            path = f"/deployments/{deployment['id']}"
            await call(client, cluster.a, owner, "PATCH", path, json={"metadata": {"step": "before"}})
            assert (await client.get(f"{cluster.a.base}{API}/admin/actors/deployment/{deployment['id']}", headers=admin)).status_code == 200

            published = await call(client, cluster.a, owner, "POST", f"{path}/publish", json={
                "source_sandbox_id": sandbox["id"], "output_path": "/workspace/site"}, timeout=300)
            assert published["data"]["version"]["state"] == "ready", published
            assert (await call(client, cluster.a, owner, "GET", path))["data"]["node"] == "node-b"
            since = time.monotonic()
            while (await client.get(f"{cluster.a.base}{API}/admin/actors/deployment/{deployment['id']}", headers=admin)).status_code != 404:
                assert time.monotonic() < since + GOAL_SECONDS, "node A still runs the deployment's actor"
                await trio.sleep(0.01)
            assert (await client.get(f"{cluster.b.base}{API}/admin/actors/deployment/{deployment['id']}", headers=admin)).status_code == 200

            changed = (await call(client, cluster.a, owner, "PATCH", path, json={"name": "moved"}))["data"]
            assert (changed["name"], changed["metadata"], changed["node"]) == ("moved", {"step": "before"}, "node-b"), changed
            assert changed["active_version_id"] == published["data"]["version"]["id"]
            assert (await client.get(f"{cluster.a.base}{API}/admin/actors/deployment/{deployment['id']}", headers=admin)).status_code == 404
            await call(client, cluster.a, owner, "DELETE", path)
            await call(client, cluster.b, owner, "GET", path, 404)
        finally:
            await call(client, cluster.a, owner, "DELETE", f"/sandboxes/{sandbox['id']}", timeout=120)

"""Test helpers: a real Corral server on a free port, and a client that speaks to it."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

from corral.config import Settings
from corral.http import run_api
from corral.node import Platform, open_node
from corral.vm import InstanceNotFound

ADMIN_KEY = "msk_a_test-operator-key-0123456789abcdef"
PASSWORD = "correct horse battery"


_HANDED_OUT: set[int] = set()


PORTS_PER_SLOT = 2000
FIRST_PORT = 12000
DB_PORT_OFFSET = 1800
"""Ports from here to the end of a slot's range are its database proxies' and servers'."""
"""Each test slot takes its ports from its own range below the kernel's ephemeral range
(32768 and up), so parallel workers never pick the same port, and no port is one the
kernel hands out for an outgoing connection meanwhile."""


def free_port() -> int:
    """A free loopback port of this slot's range, never one this process was given before
    (a server's API and preview ports are picked one after the other)."""
    start = FIRST_PORT + _test_slot() * PORTS_PER_SLOT
    candidates = list(range(start, start + DB_PORT_OFFSET))  # the slot's last 200 are its databases' (DB_PORTS)
    random.shuffle(candidates)
    for port in candidates:
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port left in {start}-{start + DB_PORT_OFFSET - 1}")


@dataclass
class Tenant:
    id: str
    name: str
    owner_id: str
    owner_email: str
    workspace_id: str
    project_id: str
    key: str
    key_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


API = "/api/v1"


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The contract §3 envelope with `status` and `code`; its request id is the header's."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"], error
    assert error["request_id"] == response.headers["X-Request-Id"]
    assert error["request_id"], error
    return error


async def create_key(api: Api, credential: str, **body: Any) -> dict[str, Any]:
    """A key made through POST /api-keys with `credential`; its record, plaintext included."""
    body.setdefault("name", "test key")
    response = await api.request("POST", f"{API}/api-keys", key=credential, json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def member_key(api: Api, tenant: Tenant, role: str = "member") -> tuple[str, str]:
    """(user_id, user key) of a new tenant member with `role`."""
    user_id, _ = await api.create_user(tenant, role)
    response = await api.admin(
        "POST",
        f"{API}/admin/api-keys",
        json={"tenant_id": tenant.id, "user_id": user_id, "name": role, "key_type": "user"},
    )
    assert response.status_code == 201, response.text
    return user_id, response.json()["data"]["key"]


class Api:
    """An httpx client bound to a running server, with shortcuts for common set-up."""

    def __init__(self, client: httpx.AsyncClient, platform: Platform) -> None:
        self.client = client
        self.platform = platform
        self._n = 0

    async def request(self, method: str, path: str, *, key: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        return await self.client.request(method, path, headers=headers, **kwargs)

    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, key=ADMIN_KEY, **kwargs)

    async def create_tenant(self, name: str | None = None) -> Tenant:
        self._n += 1
        name = name or f"Tenant {self._n}"
        email = f"owner{self._n}-{trio.current_time():.6f}@example.test"
        response = await self.admin(
            "POST", "/api/v1/admin/tenants", json={"name": name, "owner_email": email, "owner_password": PASSWORD}
        )
        assert response.status_code == 201, response.text
        body = response.json()["data"]
        return Tenant(
            id=body["tenant"]["id"],
            name=name,
            owner_id=body["owner"]["id"],
            owner_email=email,
            workspace_id=body["workspace"]["id"],
            project_id=body["project"]["id"],
            key=body["api_key"]["key"],
            key_id=body["api_key"]["id"],
        )

    async def create_user(self, tenant: Tenant, role: str = "member") -> tuple[str, str]:
        """A new member of `tenant`; returns (user_id, email)."""
        self._n += 1
        email = f"user{self._n}-{trio.current_time():.6f}@example.test"
        response = await self.admin(
            "POST", "/api/v1/admin/users", json={"email": email, "password": PASSWORD, "tenant_id": tenant.id, "role": role}
        )
        assert response.status_code == 201, response.text
        return response.json()["data"]["user"]["id"], email

    async def login(self, email: str, password: str = PASSWORD) -> dict[str, Any]:
        response = await self.client.post("/api/v1/auth/login", json={"email": email, "password": password})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


@contextlib.asynccontextmanager
async def running_server(data_dir: Path, database_url: str = "", **overrides: Any) -> AsyncIterator[Api]:
    overrides.setdefault("database_ports", DB_PORTS)  # never the default range: it lies in another slot's ports
    settings = Settings(
        data_dir=data_dir,
        database_url=database_url,
        port=free_port(),
        preview_port=free_port(),
        admin_key=ADMIN_KEY,
        **overrides,
    )
    stop = trio.Event()
    async with open_node(settings) as platform, trio.open_nursery() as nursery:
        await nursery.start(run_api, platform, stop)
        base = f"http://127.0.0.1:{settings.port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            yield Api(client, platform)
        stop.set()


TEMPLATE_CACHE = Path(os.environ.get("CORRAL_TEMPLATE_CACHE", "/var/cache/corral/templates"))

def _test_slot() -> int:
    """`CORRAL_TEST_SLOT` (0 by default), plus the pytest-xdist worker's number: each
    worker of a parallel run gets a slot of its own."""
    base = int(os.environ.get("CORRAL_TEST_SLOT", "0"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    slot = base + (int(worker[2:]) if worker.startswith("gw") else 0)
    if not 0 <= slot <= 9:
        raise ValueError(f"test slot {slot} (CORRAL_TEST_SLOT {base} + xdist worker {worker}) must be between 0 and 9")
    return slot


TEST_SLOT = _test_slot()
"""1-9 moves every host name, address range and port range the tests use, so that
several test sessions (or xdist workers) run on one machine at once; 0 keeps the
plain names."""


def host_names(
    *, bridge: str, subnet_prefix: str, nft_table: str, link_letter: str, netns_prefix: str, cgroup_parent: str
) -> dict[str, str]:
    """A test runtime's host names in this session's slot; `subnet_prefix` is like "10.216"."""
    slot = str(TEST_SLOT) if TEST_SLOT else ""
    return {
        "bridge": f"{bridge}{slot}",
        "subnet": f"{subnet_prefix}.{TEST_SLOT}.0/24",
        "nft_table": f"{nft_table}{slot}",
        "link_prefix": f"c{link_letter}" if not slot else f"{link_letter}{slot}",
        "netns_prefix": f"{netns_prefix}{slot}-",
        "cgroup_parent": f"{cgroup_parent}{slot}",
    }


DB_PORTS = f"{FIRST_PORT + TEST_SLOT * PORTS_PER_SLOT + DB_PORT_OFFSET}-{FIRST_PORT + TEST_SLOT * PORTS_PER_SLOT + DB_PORT_OFFSET + 99}"
"""Database proxy ports of this slot (the servers' own are the next 100): parallel test
workers never hand out the same ones."""

RUNTIME_SETTINGS: dict[str, Any] = {
    "template_dir": TEMPLATE_CACHE,
    "idle_check_seconds": 0.25,
    "sse_heartbeat_seconds": 1.0,
    **host_names(
        bridge="corrala0",
        subnet_prefix="10.216",
        nft_table="corral_api_test",
        link_letter="a",
        netns_prefix="corrala",
        cgroup_parent="corral-api-test",
    ),
}
"""Host names for API-level tests that run instances, apart from a real server's and the
runtime tests' (`tests/vm`)."""


async def destroy_instances_and_databases(platform: Platform) -> None:
    """What a test server leaves running by design (instances and database servers outlive
    their control plane, to be re-adopted): destroyed, so no test leaks a process."""
    servers = platform.databases.driver
    for info in await servers.instances():
        with contextlib.suppress(Exception):
            await servers.destroy(info.id)
    await platform.databases.access.drop_fast_table()
    shutil.rmtree(servers.layout.root, ignore_errors=True)
    driver = await platform.runtime.driver()
    for info in await driver.instances():
        with contextlib.suppress(InstanceNotFound):  # an actor (a build) may remove its own meanwhile
            await driver.destroy(info.id)


def cleanup_host(*, bridge: str, link_prefix: str, netns_prefix: str, nft_table: str, cgroup_parent: str) -> None:
    """Remove every instance cgroup, namespace, link, table and disk mount a test runtime made."""
    import subprocess

    from corral.vm import CgroupV1, release_mounts

    for parent in (cgroup_parent, f"{cgroup_parent}-db"):  # instances, and database servers (corral.node)
        cgroups = CgroupV1(parent=parent)
        for instance_id in cgroups.instance_ids():
            cgroups.kill_all(instance_id)
            cgroups.remove(instance_id)
        for controller in ("cpu", "cpuacct", "memory", "pids"):
            with contextlib.suppress(OSError):
                (Path("/sys/fs/cgroup") / controller / parent).rmdir()
        release_mounts(parent)  # disks left mounted by a run that died (corral.vm.disk)
    for name in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:
        if name.startswith(netns_prefix):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(link_prefix) or name == bridge:
            subprocess.run(["ip", "link", "delete", name], capture_output=True)
    subprocess.run(["nft", "delete", "table", "inet", nft_table], capture_output=True)
    subprocess.run(["nft", "delete", "table", "ip", f"{nft_table}_egress"], capture_output=True)


def cleanup_runtime_host() -> None:
    """Remove what the API-level tests' runtime made."""
    names = ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")
    cleanup_host(**{name: RUNTIME_SETTINGS[name] for name in names})

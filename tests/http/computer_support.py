"""Helpers for the computer API tests: create and wait, exec, a quick-ticking server."""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from tests.support import RUNTIME_SETTINGS, Api, Tenant, running_server

API = "/api/v1"
TEMPLATE = "svc-desktop"


async def create(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "My Computer")
    body.setdefault("template_type", TEMPLATE)
    response = await api.request("POST", f"{API}/computers", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    computer: dict[str, Any] = response.json()
    return computer


async def get(api: Api, tenant: Tenant, computer_id: str) -> dict[str, Any]:
    response = await api.request("GET", f"{API}/computers/{computer_id}", key=tenant.key)
    assert response.status_code == 200, response.text
    computer: dict[str, Any] = response.json()
    return computer


async def wait_for(
    api: Api, tenant: Tenant, computer_id: str, status: str, timeout: float = 120, passing: tuple[str, ...] = ("provisioning",)
) -> dict[str, Any]:
    """The computer once it has `status` (fails when it shows a state not in `passing`, or times out)."""
    with trio.fail_after(timeout):
        while True:
            computer = await get(api, tenant, computer_id)
            if computer["status"] == status:
                return computer
            assert computer["status"] in passing, computer
            await trio.sleep(0.05)


async def events_until(api: Api, computer_id: str, last_type: str, timeout: float = 10) -> list[Any]:
    """The computer's logged events once the newest is `last_type` (events follow state changes)."""
    with trio.fail_after(timeout):
        while True:
            events = await api.platform.events.list("computer", computer_id)
            if events and events[-1].type == last_type:
                return events
            await trio.sleep(0.02)


async def create_running(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    computer = await create(api, tenant, **body)
    return await wait_for(api, tenant, computer["id"], "running")


async def call(api: Api, tenant: Tenant, method: str, computer_id: str, suffix: str = "", **kwargs: Any) -> httpx.Response:
    return await api.request(method, f"{API}/computers/{computer_id}{suffix}", key=tenant.key, **kwargs)


async def run(api: Api, tenant: Tenant, computer_id: str, command: str, **extra: Any) -> dict[str, Any]:
    response = await call(api, tenant, "POST", computer_id, "/exec", json={"command": command, **extra})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def cgroup_value(api: Api, controller: str, instance_id: str, name: str) -> int:
    """A cgroup file of a computer's instance on the host (what really limits it)."""
    path = Path("/sys/fs/cgroup") / controller / api.platform.settings.cgroup_parent / instance_id / name
    return int(path.read_text().split()[0])


@contextlib.asynccontextmanager
async def quick_server(data_dir: Path, **overrides: Any) -> AsyncIterator[Api]:
    """A runtime server whose background loops tick fast (idle checks, metrics samples)."""
    settings: dict[str, Any] = {**RUNTIME_SETTINGS, "idle_check_seconds": 0.2, "computer_metrics_seconds": 0.2, **overrides}
    async with running_server(data_dir, **settings) as api:
        try:
            yield api
        finally:
            driver = await api.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


async def windows(api: Api, tenant: Tenant, computer_id: str) -> list[dict[str, Any]]:
    """The desktop's top-level windows (`GET /desktop/windows`)."""
    response = await call(api, tenant, "GET", computer_id, "/desktop/windows")
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["windows"]
    return found


async def websocket_upgrade(api: Api, url: str, cookie: str | None = None) -> tuple[int, bytes]:
    """Upgrade `url` (ws://host:port/path?query) through the preview router; the status and,
    after a 101, the payload of the server's first WebSocket frame (else the body's start)."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n"
        + (f"Cookie: {cookie}\r\n" if cookie else "")
        + "\r\n"
    )
    stream = await trio.open_tcp_stream("127.0.0.1", api.platform.settings.preview_port)
    async with stream:
        await stream.send_all(head.encode())
        data = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                assert chunk, data
                data += chunk
            response_head, _, rest = data.partition(b"\r\n\r\n")
            status = int(response_head.split(b"\r\n", 1)[0].split(b" ", 2)[1])
            if status != 101:
                return status, rest
            while len(rest) < 2:
                rest += await stream.receive_some(65536)
            length = rest[1] & 0x7F
            assert length < 126 and rest[0] & 0x0F == 0x2, rest[:2]  # a short binary frame
            while len(rest) < 2 + length:
                rest += await stream.receive_some(65536)
            return status, rest[2 : 2 + length]

"""Helpers for the computer API tests: create and wait, exec, a quick-ticking server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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

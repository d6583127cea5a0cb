"""How sandboxes fail: a boot that never reaches running, no address yet, a silent agent."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from corral.storage import utc_now_iso
from corral.vm.templates import BUILD_REVISION
from tests.support import TEMPLATE_CACHE, Api

BROKEN = "broken-for-tests"


@pytest.fixture
def broken_template(runtime_host: None) -> Iterator[str]:
    """A template that claims to be built but has no root filesystem."""
    directory = TEMPLATE_CACHE / BROKEN
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps({"uid_base": 100000, "revision": BUILD_REVISION}))
    yield BROKEN
    shutil.rmtree(directory, ignore_errors=True)


async def test_a_sandbox_that_never_runs_ends_in_error(runtime_api: Api, broken_template: str) -> None:
    tenant = await runtime_api.create_tenant()
    response = await runtime_api.request("POST", "/api/v1/sandboxes", key=tenant.key, json={"template_id": broken_template})
    assert response.status_code == 201, response.text
    sandbox = response.json()["data"]
    assert sandbox["status"] == "error"
    assert sandbox["error"]
    events = await runtime_api.platform.events.list("sandbox", sandbox["id"])
    assert [e.type for e in events] == ["sandbox.created", "sandbox.error"]
    refused = await runtime_api.request("POST", f"/api/v1/sandboxes/{sandbox['id']}/exec", key=tenant.key, json={"command": "true"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "SANDBOX_NOT_RUNNING"
    # An errored sandbox does not hold a concurrency slot, and can be deleted.
    deleted = await runtime_api.request("DELETE", f"/api/v1/sandboxes/{sandbox['id']}", key=tenant.key)
    assert deleted.status_code == 200


async def test_no_address_yet_is_runtime_unavailable(runtime_api: Api) -> None:
    tenant = await runtime_api.create_tenant()
    runtime_api.platform.settings.sandbox_ready_wait = 0.05
    sandbox_id = "5b0c4d02-3f5e-4cf8-9d55-6f2f1f0a0001"
    now = utc_now_iso()
    # A sandbox whose creation has not produced an instance yet (no Boot was sent).
    await runtime_api.platform.db.execute(
        "INSERT INTO sandboxes (id, tenant_id, name, slug, template_id, size, status, region, workspace_id, project_id,"
        " metadata, created_at, updated_at) VALUES (?, ?, 'slow', 'slow-0001', 'default', 'small', 'creating', 'local',"
        " ?, ?, '{}', ?, ?)",
        (sandbox_id, tenant.id, tenant.workspace_id, tenant.project_id, now, now),
    )
    response = await runtime_api.request("POST", f"/api/v1/sandboxes/{sandbox_id}/exec", key=tenant.key, json={"command": "true"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "SANDBOX_RUNTIME_UNAVAILABLE"
    files = await runtime_api.request("GET", f"/api/v1/sandboxes/{sandbox_id}/files", key=tenant.key)
    assert files.status_code == 409 and files.json()["error"]["code"] == "SANDBOX_RUNTIME_UNAVAILABLE"


async def test_an_agent_that_does_not_answer_is_502(runtime_api: Api) -> None:
    tenant = await runtime_api.create_tenant()
    runtime_api.platform.agents.timeout = 1.0
    created = await runtime_api.request("POST", "/api/v1/sandboxes", key=tenant.key, json={})
    sandbox = created.json()["data"]
    driver = await runtime_api.platform.runtime.driver()
    info = await driver.info(sandbox["id"])
    # Freeze every process of the instance (agent included): connections hang, then time out.
    freezer = f"/sys/fs/cgroup/freezer/{runtime_api.platform.settings.cgroup_parent}-freeze-{sandbox['id'][:8]}"
    import os

    os.makedirs(freezer, exist_ok=True)
    try:
        for pid in _instance_pids(info.init_pid):
            with open(f"{freezer}/cgroup.procs", "w") as handle:
                handle.write(str(pid))
        with open(f"{freezer}/freezer.state", "w") as handle:
            handle.write("FROZEN")
        await runtime_api.platform.agents.forget(sandbox["id"])  # a fresh client, whose connection cannot be served
        response = await runtime_api.request("GET", f"/api/v1/sandboxes/{sandbox['id']}/files", key=tenant.key)
        assert response.status_code == 502, response.text
        assert response.json()["error"]["code"] == "AGENT_UNAVAILABLE"
    finally:
        with open(f"{freezer}/freezer.state", "w") as handle:
            handle.write("THAWED")
        with open(f"{freezer}/cgroup.procs") as handle:
            pids = handle.read().split()
        for pid in pids:
            with open("/sys/fs/cgroup/freezer/cgroup.procs", "w") as handle:
                handle.write(pid)
        os.rmdir(freezer)
    healthy = await runtime_api.request("GET", f"/api/v1/sandboxes/{sandbox['id']}/files", key=tenant.key)
    assert healthy.status_code == 200


def _instance_pids(init_pid: int | None) -> list[int]:
    """The instance's init and all its descendants."""
    import subprocess

    assert init_pid is not None
    found, frontier = [init_pid], [init_pid]
    while frontier:
        parent = frontier.pop()
        children = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split()
        for child in map(int, children):
            found.append(child)
            frontier.append(child)
    return found

"""The walk a new user takes: create medium, run Python, upload a file, stop, resize to
large, start, find the file and four vCPUs' worth of limits, clone, delete both."""

from __future__ import annotations

from pathlib import Path

from tests.http.computer_support import API, call, cgroup_value, create, run, wait_for
from tests.support import Api


async def test_the_new_user_walk(runtime_api: Api) -> None:
    api = runtime_api
    tenant = await api.create_tenant()

    created = await create(api, tenant, name="Analysis box", size="medium")
    assert created["status"] == "provisioning" and created["vm_id"] is None
    assert (created["size"], created["vcpus"], created["memory_mb"]) == ("medium", 2, 8192)
    computer = await wait_for(api, tenant, created["id"], "running")
    cid, vm_id = computer["id"], computer["vm_id"]
    assert vm_id
    assert cgroup_value(api, "cpu", vm_id, "cpu.cfs_quota_us") == 200_000
    assert cgroup_value(api, "memory", vm_id, "memory.limit_in_bytes") == 8192 * 1024 * 1024

    python = await call(api, tenant, "POST", cid, "/exec/python", json={"code": "import sys\nprint(sum(range(10)))\nprint('warn', file=sys.stderr)"})
    assert python.status_code == 200, python.text
    assert python.json() == {"output": "45\nwarn\n", "exit_code": 0}

    uploaded = await call(api, tenant, "POST", cid, "/files/upload", files={"file": ("data.csv", b"a,b\n1,2\n")})
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["file"] == {"path": "/workspace/data.csv", "filename": "data.csv", "size_bytes": 8}

    stopped = await call(api, tenant, "POST", cid, "/stop")
    assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"
    resized = await call(api, tenant, "POST", cid, "/resize", json={"size": "large"})
    assert resized.status_code == 200, resized.text
    assert (resized.json()["size"], resized.json()["vcpus"], resized.json()["memory_mb"]) == ("large", 4, 16384)
    started = await call(api, tenant, "POST", cid, "/start")
    assert started.status_code == 200 and started.json()["status"] == "running"

    found = await call(api, tenant, "GET", cid, "/files/download", params={"path": "/workspace/data.csv"})
    assert found.status_code == 200 and found.content == b"a,b\n1,2\n"
    assert cgroup_value(api, "cpu", vm_id, "cpu.cfs_quota_us") == 400_000  # 4 vCPUs of 100 ms periods
    assert cgroup_value(api, "cpu", vm_id, "cpu.cfs_period_us") == 100_000
    assert cgroup_value(api, "memory", vm_id, "memory.limit_in_bytes") == 16384 * 1024 * 1024
    assert (await run(api, tenant, cid, "cat /workspace/data.csv"))["output"] == "a,b\n1,2\n"

    cloned = await call(api, tenant, "POST", cid, "/clone")
    assert cloned.status_code == 201, cloned.text
    clone = cloned.json()
    assert clone["id"] != cid and clone["status"] == "provisioning" and clone["size"] == "large"
    clone = await wait_for(api, tenant, clone["id"], "running")
    assert clone["vm_id"] and clone["vm_id"] != vm_id
    copy = await call(api, tenant, "GET", clone["id"], "/files/download", params={"path": "/workspace/data.csv"})
    assert copy.content == b"a,b\n1,2\n"

    instances = Path(api.platform.settings.data_dir) / "instances"
    for target in (cid, clone["id"]):
        deleted = await call(api, tenant, "DELETE", target)
        assert deleted.status_code == 200 and deleted.json() == {"id": target, "deleted": True}
        gone = await call(api, tenant, "GET", target)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "COMPUTER_NOT_FOUND"
    assert not (instances / vm_id).exists() and not (instances / clone["vm_id"]).exists()
    listing = await api.request("GET", f"{API}/computers", key=tenant.key)
    assert listing.json() == {"computers": [], "total": 0}

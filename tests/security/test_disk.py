"""A tenant filling its disk (contract §18): each instance's writable layer is a file
system of its own size, so writing past it is ENOSPC inside, `df /` shows that size,
the node's free space drops by no more than it, and nothing else stops working.
`max_storage_gb` counts the disks of an end user's live instances; a node below its
disk reserve refuses new instances.

Sizes here are small (`CORRAL_SANDBOX_DISK_GB` takes fractions) so nothing writes
gigabytes; the default and a computer's size are checked through `df` and
`fallocate`, which allocate nothing on the node.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from corral.vm import DiskStore, release_mounts
from tests.http.computer_support import call, create_running, wait_for
from tests.http.computer_support import run as computer_run
from tests.http.database_support import DATABASE_SETTINGS, credentials, running_db, sql
from tests.http.preview_support import new_sandbox
from tests.http.test_computers_snapshots import restore, take_ready
from tests.security.support import run as run_in
from tests.support import (
    API,
    RUNTIME_SETTINGS,
    TEMPLATE_CACHE,
    Api,
    Tenant,
    assert_error,
    destroy_instances_and_databases,
    running_server,
)

MIB = 1024 * 1024
GIB = 1024 * MIB
SMALL = {"sandbox_disk_gb": 0.25, "computer_disk_gb": 0.3}
"""A small node: sandboxes of 256 MiB, computers of 0.3 GiB."""


async def run(api: Api, tenant: Tenant, sandbox_id: str, command: str, timeout: int = 120) -> dict[str, Any]:
    return await run_in(api, tenant, sandbox_id, command, timeout)


async def disk_size(api: Api, tenant: Tenant, sandbox_id: str) -> int:
    """What `df /` shows inside as the root's size, in bytes."""
    result = await run(api, tenant, sandbox_id, "df -B1 --output=size / | tail -1")
    assert result["exit_code"] == 0, result
    return int(result["stdout"].split()[-1])


def host_free(api: Api) -> int:
    stat = os.statvfs(api.platform.settings.data_dir)
    return stat.f_bavail * stat.f_frsize


def on_node(api: Api, sandbox_id: str) -> int:
    """Bytes the sandbox's disk image really holds on the node's file system."""
    image = Path(api.platform.settings.data_dir) / "instances" / sandbox_id / "disk.img"
    return image.stat().st_blocks * 512


@contextlib.asynccontextmanager
async def small_node(data_dir: Path, **overrides: Any) -> AsyncIterator[Api]:
    """A real server with small disks; its instances stay for the next one on `data_dir`
    unless the block fails (then they go)."""
    async with running_server(data_dir, **RUNTIME_SETTINGS, **SMALL, **overrides) as api:
        try:
            yield api
        except BaseException:
            with trio.CancelScope(shield=True):
                await destroy_instances_and_databases(api.platform)
            raise


async def test_the_default_sandbox_disk_is_10_gib(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await new_sandbox(runtime_api, owner)
    assert await disk_size(runtime_api, owner, sandbox["id"]) == 10 * GIB
    before = host_free(runtime_api)
    result = await run(runtime_api, owner, sandbox["id"], "fallocate -l 11G /workspace/big")
    assert result["exit_code"] != 0 and "No space left on device" in result["stderr"], result
    result = await run(runtime_api, owner, sandbox["id"], "rm -f /workspace/big && fallocate -l 1G /workspace/fits")
    assert result["exit_code"] == 0, result
    assert before - host_free(runtime_api) < 256 * MIB  # room inside is not room taken on the node


async def test_writing_past_the_disk_is_enospc_and_nothing_else(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    data_dir = tmp_path_factory.mktemp("corral-disks")
    async with small_node(data_dir) as api:
        tenant = await api.create_tenant()
        sandbox = await new_sandbox(api, tenant)
        sid = sandbox["id"]
        assert await disk_size(api, tenant, sid) == 256 * MIB
        # The node's loop devices name their images' host paths: the instance sees none.
        seen = await run(
            api, tenant, sid,
            "cat /sys/block/*/loop/backing_file /sys/dev/block/*/loop/backing_file /sys/class/block/*/loop/backing_file"
            " /proc/self/mountinfo /proc/1/mountinfo 2>/dev/null; true",
        )  # fmt: skip
        assert "disk.img" not in seen["stdout"] and str(data_dir) not in seen["stdout"], seen

        result = await run(api, tenant, sid, "fallocate -l 1G /workspace/big")
        assert result["exit_code"] != 0 and "No space left on device" in result["stderr"], result
        result = await run(api, tenant, sid, "rm -f /workspace/big; dd if=/dev/zero of=/workspace/fill bs=1M count=400")
        assert result["exit_code"] != 0 and "No space left on device" in result["stderr"], result
        result = await run(api, tenant, sid, "chmod 0700 /usr/bin/python3.11")  # a copy-up (6 MB) on a full disk
        assert result["exit_code"] != 0 and "No space left on device" in result["stderr"], result
        # The node gave the instance at most its size (its image's own blocks: the host's
        # free space also moves with whatever the other test workers write), and
        # everything else goes on.
        assert on_node(api, sid) <= 256 * MIB
        assert (await run(api, tenant, sid, "echo alive"))["stdout"] == "alive\n"
        other = await new_sandbox(api, tenant)
        assert (await run(api, tenant, other["id"], "echo fine > /workspace/f && cat /workspace/f"))["stdout"] == "fine\n"

        # Freed space is free again, inside and on the node.
        result = await run(api, tenant, sid, "rm /workspace/fill && sync && df -B1 --output=avail / | tail -1")
        assert int(result["stdout"].split()[-1]) > 200 * MIB, result
        with trio.fail_after(10):
            while on_node(api, sid) > 100 * MIB:
                await trio.sleep(0.1)

        # A fork has a disk of its own: filling it leaves the source's room alone.
        assert (await run(api, tenant, sid, "head -c 100M /dev/zero > /workspace/half && sync"))["exit_code"] == 0
        response = await api.request("POST", f"{API}/sandboxes/{sid}/fork", key=tenant.key, timeout=120)
        assert response.status_code == 201, response.text
        fork = response.json()["data"]["id"]
        assert await disk_size(api, tenant, fork) == 256 * MIB
        assert (await run(api, tenant, fork, "stat -c %s /workspace/half"))["stdout"] == f"{100 * MIB}\n"
        source_avail = (await run(api, tenant, sid, "df -B1 --output=avail / | tail -1"))["stdout"]
        result = await run(api, tenant, fork, "dd if=/dev/zero of=/workspace/fill bs=1M count=400")
        assert result["exit_code"] != 0 and "No space left on device" in result["stderr"], result
        assert (await run(api, tenant, sid, "df -B1 --output=avail / | tail -1"))["stdout"] == source_avail
        assert on_node(api, fork) <= 256 * MIB

    # A restarted control plane adopts the instances with their disks and limits.
    async with small_node(data_dir) as api:
        try:
            assert await disk_size(api, tenant, sid) == 256 * MIB
            result = await run(api, tenant, sid, "fallocate -l 1G /workspace/big")
            assert result["exit_code"] != 0 and "No space left on device" in result["stderr"], result
            assert (await run(api, tenant, sid, "stat -c %s /workspace/half"))["stdout"] == f"{100 * MIB}\n"
        finally:
            await destroy_instances_and_databases(api.platform)
    assert not any(line.split()[4].startswith(str(data_dir)) for line in Path("/proc/self/mountinfo").read_text().splitlines())


async def test_max_storage_gb_counts_the_disks_of_live_instances(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    async with small_node(tmp_path_factory.mktemp("corral-disks")) as api:
        try:
            tenant = await api.create_tenant()
            quota = await api.request("PUT", f"{API}/quotas/external/erin", key=tenant.key, json={"max_storage_gb": 1})
            assert quota.status_code == 200, quota.text
            made = [await new_sandbox(api, tenant, external_user_id="erin") for _ in range(3)]  # 0.75 GiB
            # A computer of 0.3 GiB would be just past 1 GiB.
            response = await api.request(
                "POST", f"{API}/computers", key=tenant.key,
                json={"name": "pc", "template_type": "svc-desktop", "external_user_id": "erin"},
            )  # fmt: skip
            error = assert_error(response, 409, "QUOTA_MAX_STORAGE_GB_EXCEEDED")
            assert "erin" in error["message"]
            made.append(await new_sandbox(api, tenant, external_user_id="erin"))  # exactly at the limit: allowed
            usage = (await api.request("GET", f"{API}/quotas/external/erin", key=tenant.key)).json()["data"]["usage"]
            assert usage["storage_gb"] == 1 and usage["total_sandboxes"] == 4
            response = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={"external_user_id": "erin"})
            assert_error(response, 409, "QUOTA_MAX_STORAGE_GB_EXCEEDED")  # at the limit: no more
            response = await api.request("POST", f"{API}/sandboxes/{made[0]['id']}/fork", key=tenant.key)
            assert_error(response, 409, "QUOTA_MAX_STORAGE_GB_EXCEEDED")
            deleted = await api.request("DELETE", f"{API}/sandboxes/{made[0]['id']}", key=tenant.key)
            assert deleted.status_code in (200, 204), deleted.text
            await new_sandbox(api, tenant, external_user_id="erin")  # room again
        finally:
            await destroy_instances_and_databases(api.platform)


async def test_a_node_below_its_disk_reserve_refuses_new_instances(tmp_path_factory: pytest.TempPathFactory) -> None:
    data_dir = tmp_path_factory.mktemp("corral-reserve")
    free_gb = os.statvfs(data_dir).f_bavail * os.statvfs(data_dir).f_frsize / GIB
    async with running_server(data_dir, template_dir=TEMPLATE_CACHE, disk_reserve_gb=free_gb + 100) as api:
        tenant = await api.create_tenant()
        response = await api.request("POST", f"{API}/sandboxes", key=tenant.key, json={})
        error = assert_error(response, 503, "SERVICE_UNAVAILABLE")
        assert error["message"] == "node disk reserve reached"
        response = await api.request(
            "POST", f"{API}/computers", key=tenant.key, json={"name": "pc", "template_type": "svc-desktop"}
        )
        assert_error(response, 503, "SERVICE_UNAVAILABLE")
        response = await api.request("POST", f"{API}/databases", key=tenant.key, json={"name": "db"})
        assert_error(response, 503, "SERVICE_UNAVAILABLE")
        assert (await api.request("GET", f"{API}/sandboxes", key=tenant.key)).json()["data"] == []


async def test_a_computer_has_its_sizes_disk_and_a_resize_changes_it(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api

    async def size(computer_id: str) -> int:
        result = await computer_run(api, owner, computer_id, "df -B1 --output=size / | tail -1")
        assert result["exit_code"] == 0, result
        return int(result["output"].split()[-1])

    computer = await create_running(api, owner, size="small")
    cid = computer["id"]
    assert await size(cid) == 20 * GIB
    result = await computer_run(api, owner, cid, "fallocate -l 21G /workspace/big")
    assert result["exit_code"] != 0 and "No space left on device" in result["output"], result
    assert (await computer_run(api, owner, cid, "rm /workspace/big && echo kept > /workspace/note"))["exit_code"] == 0
    snap = await take_ready(api, owner, cid, name="before")

    assert (await call(api, owner, "POST", cid, "/stop")).status_code == 200
    await wait_for(api, owner, cid, "stopped", passing=("running", "stopping"))
    resized = await call(api, owner, "POST", cid, "/resize", json={"size": "medium"})
    assert resized.status_code == 200, resized.text
    assert (await call(api, owner, "POST", cid, "/start")).status_code == 200
    await wait_for(api, owner, cid, "running", passing=("stopped", "starting", "provisioning"))
    assert await size(cid) == 50 * GIB
    assert (await computer_run(api, owner, cid, "cat /workspace/note"))["output"] == "kept\n"

    # A restore puts the snapshot's files on a disk of the computer's size now.
    assert (await call(api, owner, "POST", cid, "/stop")).status_code == 200
    await wait_for(api, owner, cid, "stopped", passing=("running", "stopping"))
    restored = await restore(api, owner, cid, snap["id"])
    assert restored.status_code in (200, 202), restored.text
    assert (await call(api, owner, "POST", cid, "/start")).status_code == 200
    await wait_for(api, owner, cid, "running", passing=("stopped", "starting", "provisioning", "restoring"))
    assert await size(cid) == 50 * GIB
    assert (await computer_run(api, owner, cid, "cat /workspace/note"))["output"] == "kept\n"


async def test_test_clean_ups_unmount_only_their_own_nodes_disks(tmp_path: Path) -> None:
    """What a crashed run left mounted goes with `release_mounts(owner)`; others' stay."""
    mine, theirs = DiskStore(tmp_path / "a" / "disks", owner="disk-test-a"), DiskStore(tmp_path / "b" / "disks", owner="disk-test-b")
    try:
        for store in (mine, theirs):
            directory = store.root.parent / "instances" / "x"
            directory.mkdir(parents=True)
            await store.create(directory, 16)
        assert release_mounts("disk-test-a") == 1
        assert not os.path.ismount(tmp_path / "a" / "instances" / "x" / "disk")
        assert os.path.ismount(tmp_path / "b" / "instances" / "x" / "disk")
    finally:
        for store in (mine, theirs):
            await store.remove(store.root.parent / "instances" / "x")
            await store.aclose()


async def test_a_database_filling_its_disk_gets_enospc(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A tenant's SQL writes into a server's own disk (`CORRAL_DATABASE_DISK_GB`), not the node's."""
    async with running_server(tmp_path_factory.mktemp("corral-db-disk"), **DATABASE_SETTINGS, database_disk_gb=0.1) as api:
        try:
            tenant = await api.create_tenant()
            database = await running_db(api, tenant)
            url = (await credentials(api, tenant, database["id"]))["url"]
            driver = api.platform.databases.driver
            server_dir = driver.layout.server_dir(database["id"])
            stat = os.statvfs(server_dir / "disk")
            assert stat.f_blocks * stat.f_frsize == 102 * MIB  # 0.1 GiB, in whole MiB
            image = server_dir / "disk.img"
            assert image.stat().st_uid == 0 and image.stat().st_mode & 0o077 == 0  # not its server's to grow
            free_before = host_free(api)
            with pytest.raises(psycopg.Error, match="No space left on device"):
                await sql(url, "CREATE TABLE fill AS SELECT repeat(md5(g::text), 32) AS x FROM generate_series(1, 300000) g")
            assert free_before - host_free(api) < 100 * MIB + 64 * MIB
            assert image.stat().st_blocks * 512 <= 102 * MIB
            with trio.fail_after(60):  # the server answers again (at once, or after the node restarts it)
                while True:
                    try:
                        if await sql(url, "SELECT 1") == [[(1,)]]:
                            break
                    except psycopg.Error:
                        await trio.sleep(0.2)
        finally:
            await destroy_instances_and_databases(api.platform)

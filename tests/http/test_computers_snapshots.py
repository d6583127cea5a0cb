"""Snapshots of a computer's files (contract §10), with real instances: take (running,
paused, stopped), list, get, restore, delete, create a computer from one, tenants apart."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from corral.vm import NamespaceDriver
from tests.http.computer_support import (
    API,
    call,
    create,
    create_running,
    events_until,
    run,
    wait_for,
)
from tests.support import Api, Tenant, assert_error

SNAPSHOT_FIELDS = {"id", "computer_id", "name", "status", "size_bytes", "created_at", "ready_at"}
UNKNOWN = "0b7c3f51-2f7e-4f44-9d3c-2f1d8e3b2a10"
COUNTER = (
    "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done' "
    ">/dev/null 2>&1 & echo $!"
)


async def snapshot(api: Api, tenant: Tenant, computer_id: str, **body: Any) -> dict[str, Any]:
    response = await call(api, tenant, "POST", computer_id, "/snapshots", json=body)
    assert response.status_code == 201, response.text
    assert set(response.json()) == {"data"}
    record: dict[str, Any] = response.json()["data"]
    assert set(record) == SNAPSHOT_FIELDS and record["status"] in ("creating", "ready"), record
    return record


async def get_snapshot(api: Api, tenant: Tenant, computer_id: str, snapshot_id: str) -> dict[str, Any]:
    response = await call(api, tenant, "GET", computer_id, f"/snapshots/{snapshot_id}")
    assert response.status_code == 200, response.text
    record: dict[str, Any] = response.json()["data"]
    return record


async def wait_ready(api: Api, tenant: Tenant, computer_id: str, snapshot_id: str, timeout: float = 60) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            record = await get_snapshot(api, tenant, computer_id, snapshot_id)
            if record["status"] == "ready":
                return record
            assert record["status"] == "creating", record
            await trio.sleep(0.05)


async def take_ready(api: Api, tenant: Tenant, computer_id: str, **body: Any) -> dict[str, Any]:
    return await wait_ready(api, tenant, computer_id, (await snapshot(api, tenant, computer_id, **body))["id"])


async def restore(api: Api, tenant: Tenant, computer_id: str, snapshot_id: str) -> httpx.Response:
    return await call(api, tenant, "POST", computer_id, f"/snapshots/{snapshot_id}/restore")


async def output(api: Api, tenant: Tenant, computer_id: str, command: str) -> str:
    return str((await run(api, tenant, computer_id, command))["output"])


async def status(api: Api, tenant: Tenant, computer_id: str) -> str:
    return str((await call(api, tenant, "GET", computer_id)).json()["status"])


def snapshot_dir(api: Api, snapshot_id: str) -> Path:
    return Path(api.platform.settings.data_dir) / "snapshots" / snapshot_id


@contextmanager
def gated_copies(driver: NamespaceDriver, gate: trio.Event, fail: bool = False) -> Iterator[trio.Event]:
    """Snapshot copies wait for `gate` (then fail, with `fail`), so that a test sees
    `creating`; the event given is set once a copy has ended."""
    take = driver.snapshots.take
    ended = trio.Event()

    async def held(snapshot_id: str, upper: Path, about: dict[str, Any]) -> int:
        await gate.wait()
        try:
            if fail:
                raise OSError("no space left on device")
            return await take(snapshot_id, upper, about)
        finally:
            ended.set()

    driver.snapshots.take = held  # type: ignore[method-assign]
    try:
        yield ended
    finally:
        driver.snapshots.take = take  # type: ignore[method-assign]


async def test_files_come_back_with_a_restore(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    await run(runtime_api, owner, cid, "echo first > /workspace/notes.txt && mkdir -p /root/keep && echo k > /root/keep/k")
    await run(runtime_api, owner, cid, COUNTER)
    created = await snapshot(runtime_api, owner, cid, name="before the change")
    assert created["computer_id"] == cid and created["name"] == "before the change"
    ready = await wait_ready(runtime_api, owner, cid, created["id"])
    assert ready["size_bytes"] > 0 and ready["ready_at"] >= ready["created_at"] == created["created_at"]
    assert snapshot_dir(runtime_api, created["id"]).is_dir()
    events = await events_until(runtime_api, cid, "computer.snapshot_ready")
    assert events[-1].data == {"computer_id": cid, "snapshot_id": created["id"], "size_bytes": ready["size_bytes"]}

    # Thawed after the copy: the counter goes on.
    before = int(await output(runtime_api, owner, cid, "cat /tmp/count"))
    await trio.sleep(0.3)
    assert int(await output(runtime_api, owner, cid, "cat /tmp/count")) > before
    assert await status(runtime_api, owner, cid) == "running"

    await run(runtime_api, owner, cid, "echo second > /workspace/notes.txt && rm -r /root/keep && touch /workspace/later")
    restored = await restore(runtime_api, owner, cid, created["id"])
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert "data" not in body and body["id"] == cid and body["status"] == "running"  # unwrapped computer
    assert body["vm_id"] == computer["vm_id"]
    assert await output(runtime_api, owner, cid, "cat /workspace/notes.txt /root/keep/k") == "first\nk\n"
    assert (await run(runtime_api, owner, cid, "test -e /workspace/later"))["exit_code"] == 1
    types = [event.type for event in await events_until(runtime_api, cid, "computer.restored")]
    assert types[-4:] == ["computer.stopped", "computer.running", "computer.started", "computer.restored"]
    stopped = [event for event in await runtime_api.platform.events.list("computer", cid) if event.type == "computer.stopped"]
    assert stopped[-1].data == {"computer_id": cid, "reason": "restore"}


async def test_snapshots_of_paused_and_stopped_computers(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    await run(runtime_api, owner, cid, "echo A > /workspace/state")
    assert (await call(runtime_api, owner, "POST", cid, "/pause")).status_code == 200
    paused = await take_ready(runtime_api, owner, cid, name="paused")
    assert await status(runtime_api, owner, cid) == "paused"  # the copy did not thaw it
    assert (await call(runtime_api, owner, "POST", cid, "/start")).status_code == 200
    paused_restore = await restore(runtime_api, owner, cid, paused["id"])
    assert paused_restore.status_code == 200  # running: restarted around the restore
    await run(runtime_api, owner, cid, "echo B > /workspace/state")

    assert (await call(runtime_api, owner, "POST", cid, "/pause")).status_code == 200
    refused = await restore(runtime_api, owner, cid, paused["id"])
    assert assert_error(refused, 409, "INVALID_STATE")["message"] == "computer must be running or stopped to restore a snapshot"
    assert (await call(runtime_api, owner, "POST", cid, "/start")).status_code == 200
    assert (await call(runtime_api, owner, "POST", cid, "/stop")).status_code == 200
    stopped = await take_ready(runtime_api, owner, cid, name="stopped")
    assert await status(runtime_api, owner, cid) == "stopped"

    back = await restore(runtime_api, owner, cid, paused["id"])
    assert back.status_code == 200 and back.json()["status"] == "stopped"  # stopped stays stopped
    assert (await call(runtime_api, owner, "POST", cid, "/start")).status_code == 200
    assert await output(runtime_api, owner, cid, "cat /workspace/state") == "A\n"
    assert (await restore(runtime_api, owner, cid, stopped["id"])).json()["status"] == "running"
    assert await output(runtime_api, owner, cid, "cat /workspace/state") == "B\n"


async def test_list_get_and_delete(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    first = await take_ready(runtime_api, owner, cid, name="one")
    second = await take_ready(runtime_api, owner, cid)
    third = await take_ready(runtime_api, owner, cid, name="  three  ")
    assert second["name"].startswith("snapshot-") and third["name"] == "three"

    listed = await call(runtime_api, owner, "GET", cid, "/snapshots")
    assert listed.status_code == 200 and set(listed.json()) == {"data"}
    assert [record["id"] for record in listed.json()["data"]] == [third["id"], second["id"], first["id"]]
    assert listed.json()["data"][0] == await get_snapshot(runtime_api, owner, cid, third["id"])

    deleted = await call(runtime_api, owner, "DELETE", cid, f"/snapshots/{second['id']}")
    assert deleted.status_code == 200 and deleted.json() == {"data": {"id": second["id"], "status": "deleted"}}
    assert not snapshot_dir(runtime_api, second["id"]).exists()
    listed = await call(runtime_api, owner, "GET", cid, "/snapshots")
    assert [record["id"] for record in listed.json()["data"]] == [third["id"], first["id"]]
    assert (await get_snapshot(runtime_api, owner, cid, second["id"]))["status"] == "deleted"
    again = await call(runtime_api, owner, "DELETE", cid, f"/snapshots/{second['id']}")
    assert assert_error(again, 409, "already_deleted")["message"] == "snapshot already deleted"
    not_ready = await restore(runtime_api, owner, cid, second["id"])
    assert assert_error(not_ready, 409, "SNAPSHOT_NOT_READY")["message"] == "snapshot is not in ready state"

    for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/restore")):
        missing = await call(runtime_api, owner, method, cid, f"/snapshots/{UNKNOWN}{suffix}")
        assert assert_error(missing, 404, "SNAPSHOT_NOT_FOUND")["message"] == "snapshot not found"
        assert_error(await call(runtime_api, owner, method, cid, f"/snapshots/not-an-id{suffix}"), 400, "INVALID_ID")
    for bad in ("", 7, "x" * 101):
        response = await call(runtime_api, owner, "POST", cid, "/snapshots", json={"name": bad})
        assert "name" in assert_error(response, 422, "VALIDATION_ERROR")["details"]

    # Another computer of the same tenant does not reach these snapshots.
    other = await create_running(runtime_api, owner)
    for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/restore")):
        response = await call(runtime_api, owner, method, other["id"], f"/snapshots/{first['id']}{suffix}")
        assert_error(response, 404, "SNAPSHOT_NOT_FOUND")
    assert (await call(runtime_api, owner, "GET", other["id"], "/snapshots")).json() == {"data": []}


async def test_restore_of_a_snapshot_that_is_not_ready(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    driver = await runtime_api.platform.runtime.driver()
    assert isinstance(driver, NamespaceDriver)
    gate = trio.Event()
    with gated_copies(driver, gate) as ended:
        creating = await snapshot(runtime_api, owner, cid, name="slow")
        assert creating["status"] == "creating" and creating["size_bytes"] is None and creating["ready_at"] is None
        refused = await restore(runtime_api, owner, cid, creating["id"])
        assert assert_error(refused, 409, "SNAPSHOT_NOT_READY")["message"] == "snapshot is not in ready state"
        from_it = await runtime_api.request(
            "POST", f"{API}/computers", key=owner.key,
            json={"name": "From creating", "template_type": "svc-desktop", "snapshot_id": creating["id"]},
        )
        assert_error(from_it, 409, "SNAPSHOT_NOT_READY")
        # Deleted while it is copied: the copy's files go once it ends.
        assert (await call(runtime_api, owner, "DELETE", cid, f"/snapshots/{creating['id']}")).status_code == 200
        gate.set()
        with trio.fail_after(30):
            await ended.wait()
            while snapshot_dir(runtime_api, creating["id"]).exists():
                await trio.sleep(0.02)
    assert (await get_snapshot(runtime_api, owner, cid, creating["id"]))["status"] == "deleted"

    with gated_copies(driver, gate, fail=True):
        failing = await snapshot(runtime_api, owner, cid)
        with trio.fail_after(30):
            while (record := await get_snapshot(runtime_api, owner, cid, failing["id"]))["status"] == "creating":
                await trio.sleep(0.05)
    assert record["status"] == "failed" and "no space left on device" in record["error"]
    assert record["size_bytes"] is None and record["ready_at"] is None
    assert_error(await restore(runtime_api, owner, cid, failing["id"]), 409, "SNAPSHOT_NOT_READY")
    events = await events_until(runtime_api, cid, "computer.snapshot_failed")
    assert events[-1].data["snapshot_id"] == failing["id"]
    assert not snapshot_dir(runtime_api, failing["id"]).exists()
    assert await status(runtime_api, owner, cid) == "running"


async def test_create_a_computer_from_a_snapshot(runtime_api: Api, owner: Tenant) -> None:
    source = await create_running(runtime_api, owner)
    await run(runtime_api, owner, source["id"], "echo carried > /workspace/carried.txt")
    ready = await take_ready(runtime_api, owner, source["id"])
    await run(runtime_api, owner, source["id"], "echo later > /workspace/carried.txt")

    made = await create(runtime_api, owner, name="From a snapshot", snapshot_id=ready["id"].upper())
    assert made["status"] == "provisioning" and made["id"] != source["id"]
    running = await wait_for(runtime_api, owner, made["id"], "running")
    assert running["template_type"] == source["template_type"]
    assert await output(runtime_api, owner, made["id"], "cat /workspace/carried.txt") == "carried\n"
    await run(runtime_api, owner, made["id"], "echo mine > /workspace/carried.txt")
    assert await output(runtime_api, owner, source["id"], "cat /workspace/carried.txt") == "later\n"
    assert (await get_snapshot(runtime_api, owner, source["id"], ready["id"]))["status"] == "ready"

    body = {"name": "Nope", "template_type": "svc-desktop"}
    other = await runtime_api.create_tenant("Other")
    for tenant, snapshot_id, expected in ((other, ready["id"], 404), (owner, UNKNOWN, 404)):
        response = await runtime_api.request("POST", f"{API}/computers", key=tenant.key, json={**body, "snapshot_id": snapshot_id})
        assert assert_error(response, expected, "SNAPSHOT_NOT_FOUND")["message"] == "snapshot not found"
    malformed = await runtime_api.request("POST", f"{API}/computers", key=owner.key, json={**body, "snapshot_id": "x"})
    assert assert_error(malformed, 422, "VALIDATION_ERROR")["details"] == {"snapshot_id": "must be a UUID"}
    assert (await call(runtime_api, owner, "DELETE", source["id"], f"/snapshots/{ready['id']}")).status_code == 200
    gone = await runtime_api.request("POST", f"{API}/computers", key=owner.key, json={**body, "snapshot_id": ready["id"]})
    assert_error(gone, 404, "SNAPSHOT_NOT_FOUND")
    names = {computer["name"] for computer in (await runtime_api.request("GET", f"{API}/computers", key=owner.key)).json()["computers"]}
    assert "Nope" not in names  # a refused create leaves nothing behind


async def test_another_tenant_gets_404_on_every_route(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    ready = await take_ready(runtime_api, owner, cid)
    other = await runtime_api.create_tenant("Other")
    routes = [
        ("POST", "/snapshots"),
        ("GET", "/snapshots"),
        ("GET", f"/snapshots/{ready['id']}"),
        ("POST", f"/snapshots/{ready['id']}/restore"),
        ("DELETE", f"/snapshots/{ready['id']}"),
    ]
    for method, suffix in routes:
        response = await call(runtime_api, other, method, cid, suffix, json={} if method == "POST" else None)
        assert assert_error(response, 404, "COMPUTER_NOT_FOUND")["message"] == "computer not found"
        assert_error(await call(runtime_api, owner, method, UNKNOWN, suffix), 404, "COMPUTER_NOT_FOUND")
    assert (await get_snapshot(runtime_api, owner, cid, ready["id"]))["status"] == "ready"
    assert snapshot_dir(runtime_api, ready["id"]).is_dir()


async def test_snapshots_go_with_their_computer(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    kept = await take_ready(runtime_api, owner, cid)
    dropped = await take_ready(runtime_api, owner, cid)
    assert (await call(runtime_api, owner, "DELETE", cid, f"/snapshots/{dropped['id']}")).status_code == 200
    assert (await call(runtime_api, owner, "DELETE", cid)).status_code == 200
    rows = await runtime_api.platform.db.fetch_all("SELECT id FROM computer_snapshots WHERE computer_id = ?", (cid,))
    assert rows == []
    assert not snapshot_dir(runtime_api, kept["id"]).exists()
    assert_error(await call(runtime_api, owner, "GET", cid, f"/snapshots/{kept['id']}"), 404, "COMPUTER_NOT_FOUND")
    response = await runtime_api.request(
        "POST", f"{API}/computers", key=owner.key, json={"name": "Orphan", "template_type": "svc-desktop", "snapshot_id": kept["id"]}
    )
    assert_error(response, 404, "SNAPSHOT_NOT_FOUND")


async def test_no_snapshot_while_provisioning(runtime_api: Api, owner: Tenant) -> None:
    computer = await create(runtime_api, owner)
    refused = await call(runtime_api, owner, "POST", computer["id"], "/snapshots", json={})
    if await status(runtime_api, owner, computer["id"]) == "provisioning":  # still booting: the answer was a refusal
        message = assert_error(refused, 409, "INVALID_STATE")["message"]
        assert message == "computer must be running, paused or stopped to snapshot"
    await wait_for(runtime_api, owner, computer["id"], "running")

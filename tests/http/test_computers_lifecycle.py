"""Every row of the specification's computer state table, and every quoted 409, through HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from corral.actors import computers
from corral.actors.computers import ComputerTemplate, register_template
from corral.actors.computers import actor as computer_actor
from corral.actors.computers.credits import halt_for_credits
from corral.actors.computers.templates import SVC_DESKTOP
from tests.http.computer_support import (
    call,
    create,
    create_running,
    events_until,
    quick_server,
    run,
    wait_for,
)
from tests.support import RUNTIME_SETTINGS, Api, Tenant, assert_error, running_server

CANNOT_START = "computer cannot be started from its current status"
CANNOT_STOP = "computer cannot be stopped from its current status"
MUST_RUN_TO_RESTART = "computer must be running to restart"


async def refused(api: Api, tenant: Tenant, computer_id: str, suffix: str, message: str, **kwargs: object) -> None:
    response = await call(api, tenant, "POST", computer_id, suffix, **kwargs)
    assert assert_error(response, 409, "INVALID_STATE")["message"] == message


async def types_since(api: Api, computer_id: str, count: int) -> list[tuple[str, dict[str, object]]]:
    events = await api.platform.events.list("computer", computer_id)
    return [(e.type, e.data) for e in events[count:]]


async def test_running_refuses_start_and_resize_and_move(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    await refused(runtime_api, owner, computer["id"], "/start", CANNOT_START)
    await refused(runtime_api, owner, computer["id"], "/resize", "computer must be stopped to resize", json={"size": "large"})
    await refused(runtime_api, owner, computer["id"], "/move", "computer must be stopped to move", json={"region": "local"})
    assert (await call(runtime_api, owner, "GET", computer["id"])).json()["size"] == "small"


async def test_stop_keeps_the_filesystem_and_start_brings_it_back(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    await run(runtime_api, owner, cid, "echo kept > /workspace/note.txt; mkdir -p /root/.config/app && echo p > /root/.config/app/profile")
    seen = len(await runtime_api.platform.events.list("computer", cid))
    stopped = await call(runtime_api, owner, "POST", cid, "/stop")
    assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"
    assert stopped.json()["vm_id"] == computer["vm_id"]
    assert await types_since(runtime_api, cid, seen) == [("computer.stopped", {"computer_id": cid, "reason": "requested"})]
    await refused(runtime_api, owner, cid, "/stop", CANNOT_STOP)
    await refused(runtime_api, owner, cid, "/restart", MUST_RUN_TO_RESTART)
    await refused(runtime_api, owner, cid, "/clone", "computer must be running to clone")
    for suffix, body in (("/exec", {"command": "true"}), ("/exec/python", {"code": "1"})):
        not_running = await call(runtime_api, owner, "POST", cid, suffix, json=body)
        assert_error(not_running, 409, "COMPUTER_NOT_RUNNING")
    assert_error(await call(runtime_api, owner, "GET", cid, "/files"), 409, "COMPUTER_NOT_RUNNING")
    assert_error(await call(runtime_api, owner, "GET", cid, "/apps"), 409, "COMPUTER_NOT_RUNNING")

    seen = len(await runtime_api.platform.events.list("computer", cid))
    started = await call(runtime_api, owner, "POST", cid, "/start")
    assert started.status_code == 200 and started.json()["status"] == "running"
    assert await types_since(runtime_api, cid, seen) == [
        ("computer.running", {"computer_id": cid, "vm_id": computer["vm_id"]}),
        ("computer.started", {"computer_id": cid, "region": "local"}),
    ]
    assert (await run(runtime_api, owner, cid, "cat /workspace/note.txt /root/.config/app/profile"))["output"] == "kept\np\n"


async def test_restart_is_a_stop_then_a_start(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    await run(runtime_api, owner, cid, "echo survives > /workspace/f; sleep 600 >/dev/null 2>&1 &")
    driver = await runtime_api.platform.runtime.driver()
    before = (await driver.info(computer["vm_id"])).init_pid
    seen = len(await runtime_api.platform.events.list("computer", cid))
    restarted = await call(runtime_api, owner, "POST", cid, "/restart")
    assert restarted.status_code == 200 and restarted.json()["status"] == "running"
    assert (await driver.info(computer["vm_id"])).init_pid != before
    result = await run(runtime_api, owner, cid, "cat /workspace/f; pgrep -x sleep || echo no-sleep")
    assert result["output"] == "survives\nno-sleep\n"
    assert [t for t, _ in await types_since(runtime_api, cid, seen)] == ["computer.stopped", "computer.running", "computer.started"]
    assert (await types_since(runtime_api, cid, seen))[0][1] == {"computer_id": cid, "reason": "restart"}


async def test_resize_and_move_when_stopped(tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> None:
    async with quick_server(tmp_path_factory.mktemp("corral"), regions="local,eu-west") as api:
        tenant = await api.create_tenant()
        computer = await create_running(api, tenant, size="small")
        cid = computer["id"]
        assert (await call(api, tenant, "POST", cid, "/stop")).status_code == 200
        assert_error(await call(api, tenant, "POST", cid, "/resize", json={}), 400, "MISSING_PARAM")
        assert_error(await call(api, tenant, "POST", cid, "/resize", json={"size": "huge"}), 422, "VALIDATION_ERROR")
        assert_error(await call(api, tenant, "POST", cid, "/move", json={}), 400, "MISSING_PARAM")
        assert_error(await call(api, tenant, "POST", cid, "/move", json={"region": "mars-1"}), 422, "VALIDATION_ERROR")
        resized = await call(api, tenant, "POST", cid, "/resize", json={"size": "medium"})
        assert resized.status_code == 200 and (resized.json()["vcpus"], resized.json()["memory_mb"]) == (2, 8192)
        moved = await call(api, tenant, "POST", cid, "/move", json={"region": "eu-west"})
        assert moved.status_code == 200 and moved.json()["region"] == "eu-west" and moved.json()["status"] == "stopped"
        started = await call(api, tenant, "POST", cid, "/start")
        assert started.json()["region"] == "eu-west" and started.json()["size"] == "medium"
        events = await api.platform.events.list("computer", cid)
        assert events[-1].data == {"computer_id": cid, "region": "eu-west"}
        limit = Path("/sys/fs/cgroup/memory") / api.platform.settings.cgroup_parent / computer["vm_id"] / "memory.limit_in_bytes"
        assert int(limit.read_text()) == 8192 * 1024 * 1024


async def test_paused_is_where_billing_halts_a_computer_and_start_resumes_it(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    cid = computer["id"]
    await run(runtime_api, owner, cid, "echo still-here > /workspace/p")
    await halt_for_credits(runtime_api.platform, cid)  # what billing calls when credits run out
    paused = (await call(runtime_api, owner, "GET", cid)).json()
    assert paused["status"] == "paused"
    freezer = Path("/sys/fs/cgroup/freezer") / runtime_api.platform.settings.cgroup_parent / computer["vm_id"] / "freezer.state"
    assert freezer.read_text().strip() == "FROZEN"  # frozen as a user's pause is
    events = await runtime_api.platform.events.list("computer", cid)
    assert (events[-1].type, events[-1].data) == ("computer.stopped", {"computer_id": cid, "reason": "credits_exhausted"})
    await refused(runtime_api, owner, cid, "/stop", CANNOT_STOP)
    await refused(runtime_api, owner, cid, "/restart", MUST_RUN_TO_RESTART)
    await refused(runtime_api, owner, cid, "/resize", "computer must be stopped to resize", json={"size": "large"})
    assert_error(await call(runtime_api, owner, "POST", cid, "/exec", json={"command": "true"}), 409, "COMPUTER_NOT_RUNNING")
    await halt_for_credits(runtime_api.platform, cid)  # a second halt is a no-op
    started = await call(runtime_api, owner, "POST", cid, "/start")
    assert started.status_code == 200 and started.json()["status"] == "running"
    assert (await run(runtime_api, owner, cid, "cat /workspace/p"))["output"] == "still-here\n"


async def test_provisioning_refuses_everything_but_get_and_delete(
    runtime_api: Api, owner: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app installation (after boot, before running) is held until the computer is deleted.
    installing = trio.Event()

    async def held_install(*args: object) -> None:
        installing.set()
        await trio.sleep_forever()

    monkeypatch.setattr(computer_actor, "install_apps", held_install)
    computer = await create(runtime_api, owner, selected_apps=["nano"])
    with trio.fail_after(30):
        await installing.wait()
    cid = computer["id"]
    assert (await call(runtime_api, owner, "GET", cid)).json()["status"] == "provisioning"
    await refused(runtime_api, owner, cid, "/start", CANNOT_START)
    await refused(runtime_api, owner, cid, "/stop", CANNOT_STOP)
    await refused(runtime_api, owner, cid, "/restart", MUST_RUN_TO_RESTART)
    await refused(runtime_api, owner, cid, "/clone", "computer must be running to clone")
    await refused(runtime_api, owner, cid, "/resize", "computer must be stopped to resize", json={"size": "large"})
    assert_error(await call(runtime_api, owner, "POST", cid, "/exec", json={"command": "true"}), 409, "COMPUTER_NOT_RUNNING")
    assert_error(await call(runtime_api, owner, "POST", cid, "/files/write", json={"path": "/tmp/x", "content": "x"}), 409, "COMPUTER_NOT_RUNNING")
    assert (await call(runtime_api, owner, "GET", cid)).json()["status"] == "provisioning"
    deleted = await call(runtime_api, owner, "DELETE", cid)
    assert deleted.status_code == 200 and deleted.json() == {"id": cid, "deleted": True}
    instances = Path(runtime_api.platform.settings.data_dir) / "instances"
    with trio.fail_after(10):  # provisioning is cancelled and the half-made instance removed
        while any(instances.glob("vm-*")):
            await trio.sleep(0.05)
    assert_error(await call(runtime_api, owner, "GET", cid), 404, "COMPUTER_NOT_FOUND")
    events = [e.type for e in await runtime_api.platform.events.list("computer", cid)]
    assert events == ["computer.created", "computer.deleted"]


async def test_delete_from_stopped(runtime_api: Api, owner: Tenant) -> None:
    computer = await create_running(runtime_api, owner)
    await call(runtime_api, owner, "POST", computer["id"], "/stop")
    deleted = await call(runtime_api, owner, "DELETE", computer["id"])
    assert deleted.json() == {"id": computer["id"], "deleted": True}
    assert not (Path(runtime_api.platform.settings.data_dir) / "instances" / computer["vm_id"]).exists()


async def test_clone_copies_files_apps_and_env_into_its_own_computer(runtime_api: Api, owner: Tenant) -> None:
    source = await create_running(runtime_api, owner, name="origin", size="medium", external_user_id="u9")
    sid = source["id"]
    assert (await call(runtime_api, owner, "POST", sid, "/env", json={"name": "TOKEN", "value": "t-1"})).status_code == 201
    await run(runtime_api, owner, sid, "echo original > /workspace/a.txt")
    response = await call(runtime_api, owner, "POST", sid, "/clone")
    assert response.status_code == 201, response.text
    clone = response.json()
    assert clone["id"] != sid and clone["status"] == "provisioning" and clone["vm_id"] is None
    assert (clone["name"], clone["size"], clone["external_user_id"], clone["workspace_id"]) == ("origin (clone)", "medium", "u9", source["workspace_id"])
    clone = await wait_for(runtime_api, owner, clone["id"], "running")
    assert (await run(runtime_api, owner, clone["id"], 'cat /workspace/a.txt; printf %s "$TOKEN"'))["output"] == "original\nt-1"
    await run(runtime_api, owner, clone["id"], "echo changed > /workspace/a.txt")
    assert (await run(runtime_api, owner, sid, "cat /workspace/a.txt"))["output"] == "original\n"
    assert [e.type for e in await runtime_api.platform.events.list("computer", clone["id"])][:1] == ["computer.created"]


async def test_a_failed_boot_is_an_error_that_only_delete_leaves(runtime_api: Api, owner: Tenant) -> None:
    register_template(ComputerTemplate("broken-image", runtime_template="no-such-rootfs", description="for this test"))
    try:
        computer = await create(runtime_api, owner, template_type="broken-image")
        failed = await wait_for(runtime_api, owner, computer["id"], "error")
        assert failed["vm_id"] is None and "no-such-rootfs" in failed["error"]
        await refused(runtime_api, owner, computer["id"], "/start", CANNOT_START)
        await refused(runtime_api, owner, computer["id"], "/stop", CANNOT_STOP)
        events = [e.type for e in await events_until(runtime_api, computer["id"], "computer.error")]
        assert events == ["computer.created", "computer.error"]
        assert (await call(runtime_api, owner, "DELETE", computer["id"])).status_code == 200
    finally:
        computers.templates._TEMPLATES.pop("broken-image", None)
        register_template(SVC_DESKTOP)


async def test_a_launch_that_fails_says_why_and_leaves_nothing_behind(
    tmp_path_factory: pytest.TempPathFactory, runtime_host: None
) -> None:
    """The instance is made but its agent never comes up in time: the computer is
    `error` with the reason, nothing of the instance is left on the host (cgroups,
    network namespace, files), and DELETE still answers 200."""
    settings = {**RUNTIME_SETTINGS, "instance_launch_timeout": 0.001}
    async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
        tenant = await api.create_tenant()
        computer = await create(api, tenant)
        failed = await wait_for(api, tenant, computer["id"], "error")
        assert failed["vm_id"] is None
        assert failed["error"].startswith("LaunchFailed: instance ") and "did not start" in failed["error"], failed["error"]
        driver = await api.platform.runtime.driver()
        assert await driver.instances() == []
        parent = Path("/sys/fs/cgroup/pids") / api.platform.settings.cgroup_parent
        assert not parent.is_dir() or [p.name for p in parent.iterdir() if p.is_dir()] == []
        netns = Path("/run/netns")
        assert not [n for n in netns.iterdir() if n.name.startswith(api.platform.settings.netns_prefix)]
        assert (await call(api, tenant, "DELETE", computer["id"])).status_code == 200
        gone = await call(api, tenant, "GET", computer["id"])
        assert gone.status_code == 404


@pytest.fixture
async def data_dir(tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> AsyncIterator[Path]:
    yield tmp_path_factory.mktemp("corral")


async def test_provisioning_resumes_after_a_control_plane_restart(data_dir: Path) -> None:
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:
        tenant = await api.create_tenant()
        booted = await create_running(api, tenant)  # the node dies after the boot, before Booted
        lost = await create_running(api, tenant)  # the node dies before the instance was made
        driver = await api.platform.runtime.driver()
        await driver.destroy(lost["vm_id"])
        for cid in (booted["id"], lost["id"]):
            await api.platform.db.execute("UPDATE computers SET status = 'provisioning', vm_id = NULL WHERE id = ?", (cid,))
    async with quick_server(data_dir) as api:
        for cid in (booted["id"], lost["id"]):
            computer = await wait_for(api, tenant, cid, "running")
            assert computer["vm_id"]
            assert (await run(api, tenant, cid, "echo ok"))["output"] == "ok\n"


async def test_running_out_of_credits_pauses_the_computer(data_dir: Path) -> None:
    # 2400x metered time: a small computer (3 credits an hour) spends 2 credits a second.
    async with quick_server(data_dir, meter_interval=0.2, meter_rate_scale=2400) as api:
        tenant = await api.create_tenant()
        balance = (await api.request("GET", "/api/v1/credits/balance", key=tenant.key)).json()["balance_credits"]
        adjust = {"amount_credits": 4 - int(balance), "description": "test"}
        assert (await api.admin("POST", f"/api/v1/admin/tenants/{tenant.id}/credits", json=adjust)).status_code == 201
        computer = await create_running(api, tenant, size="small")
        paused = await wait_for(api, tenant, computer["id"], "paused", timeout=20, passing=("running",))
        assert paused["vm_id"] == computer["vm_id"]
        events = await events_until(api, computer["id"], "computer.stopped")
        assert events[-1].data == {"computer_id": computer["id"], "reason": "credits_exhausted"}
        spent = await api.platform.db.fetch_all(
            "SELECT amount_credits FROM credit_transactions WHERE resource_type = 'computer' AND resource_id = ?", (computer["id"],)
        )
        assert spent and sum(-int(row["amount_credits"]) for row in spent) >= 4
        assert_error(await call(api, tenant, "POST", computer["id"], "/start"), 402, "INSUFFICIENT_CREDITS")

"""A tenant who is root in its sandbox or computer, attacking through the API as it
would: the host's files stay untouched, dangerous calls fail, roots are apart.

Each test makes a directory on the host that a tenant aims its links at, and checks
it is still empty after the platform has worked on the tenant's files."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.http.computer_support import create_running
from tests.http.computer_support import run as computer_run
from tests.http.preview_support import new_sandbox
from tests.http.test_computers_snapshots import snapshot, wait_ready
from tests.security.support import run
from tests.support import API, Api, Tenant


async def sandbox_action(api: Api, tenant: Tenant, sandbox_id: str, action: str) -> dict[str, Any]:
    response = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/{action}", key=tenant.key, timeout=120)
    assert response.status_code in (200, 201), response.text
    data: dict[str, Any] = response.json()["data"]
    return data


@pytest.fixture
def host_target(tmp_path: Path) -> Path:
    """An empty host directory the tenant will aim links at."""
    target = tmp_path / f"host-{uuid.uuid4().hex[:8]}"
    target.mkdir()
    return target


LINK_ETC = "cp -a /etc /etc.real && rm -rf /etc && ln -s {target} /etc"


async def test_etc_linked_to_the_host_survives_stop_and_start(runtime_api: Api, owner: Tenant, host_target: Path) -> None:
    sandbox = await new_sandbox(runtime_api, owner)
    result = await run(runtime_api, owner, sandbox["id"], LINK_ETC.format(target=host_target))
    assert result["exit_code"] == 0, result
    await sandbox_action(runtime_api, owner, sandbox["id"], "stop")
    started = await sandbox_action(runtime_api, owner, sandbox["id"], "start")
    assert started["status"] == "running"
    assert list(host_target.iterdir()) == []
    result = await run(runtime_api, owner, sandbox["id"], "cat /etc/hostname && test ! -L /etc && echo real")
    assert result["exit_code"] == 0 and result["stdout"].split()[-1] == "real", result


async def test_a_fork_during_a_directory_swap_takes_no_host_file(runtime_api: Api, owner: Tenant, host_target: Path) -> None:
    (host_target / "host-only").write_text("host data\n")
    sandbox = await new_sandbox(runtime_api, owner)
    swap = (
        f"mkdir -p /workspace/d && echo mine > /workspace/d/file && cd /workspace && "
        f"(while :; do mv d d.real; ln -s {host_target} d; rm d; mv d.real d; done >/dev/null 2>&1 &)"
    )
    assert (await run(runtime_api, owner, sandbox["id"], swap))["exit_code"] == 0
    for _ in range(3):
        fork = await sandbox_action(runtime_api, owner, sandbox["id"], "fork")
        found = await run(runtime_api, owner, fork["id"], "find / -xdev -name host-only 2>/dev/null | wc -l")
        assert found["stdout"].strip() == "0"
        await runtime_api.request("DELETE", f"{API}/sandboxes/{fork['id']}", key=owner.key)
    assert [p.name for p in host_target.iterdir()] == ["host-only"]


async def test_snapshot_and_restore_of_a_linked_etc_touch_no_host_file(runtime_api: Api, owner: Tenant, host_target: Path) -> None:
    computer = await create_running(runtime_api, owner)
    # The tenant keeps its own files (under /workspace) and breaks its /etc.
    await computer_run(runtime_api, owner, computer["id"], "echo kept > /workspace/notes")
    result = await computer_run(runtime_api, owner, computer["id"], LINK_ETC.format(target=host_target))
    assert result["exit_code"] == 0, result
    taken = await snapshot(runtime_api, owner, computer["id"], name="links")
    await wait_ready(runtime_api, owner, computer["id"], taken["id"])
    # The restore starts the computer again from the snapshot, /etc link and all: its
    # desktop may not come up without an /etc, but the host is untouched either way.
    restored = await runtime_api.request(
        "POST", f"{API}/computers/{computer['id']}/snapshots/{taken['id']}/restore", key=owner.key, timeout=180
    )
    assert restored.status_code == 200 or "desktop session did not come up" in restored.text, restored.text
    assert list(host_target.iterdir()) == []


async def test_dangerous_calls_fail_through_the_api(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await new_sandbox(runtime_api, owner)
    result = await run(
        runtime_api,
        owner,
        sandbox["id"],
        "unshare -Ur id 2>&1; unshare -m true 2>&1; python3 -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True);"
        " r = l.syscall(425, 8, 0); print(\"io_uring\", r, os.strerror(ctypes.get_errno()))'",
    )
    out = result["stdout"]
    assert out.count("Operation not permitted") >= 3, out
    assert "uid=0" not in out.split("\n")[0] or "unshare" in out


async def test_two_sandboxes_roots_are_different_host_users(runtime_api: Api, owner: Tenant) -> None:
    first, second = await new_sandbox(runtime_api, owner), await new_sandbox(runtime_api, owner)
    driver = await runtime_api.platform.runtime.driver()
    uids = set()
    for sandbox in (first, second):
        info = await driver.info(sandbox["id"])
        assert info.init_pid
        status = Path(f"/proc/{info.init_pid}/status").read_text()
        uids.add(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))
    assert len(uids) == 2

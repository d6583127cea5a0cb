"""A control-plane restart in the middle of agent runs: the runs are followed again
and end with the right status."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.support import API, RUNTIME_SETTINGS, running_server

from .test_agent_runs import event_types, get_run, start_run, wait_terminal
from .test_sandboxes import create


@pytest.fixture
async def data_dir(tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> AsyncIterator[Path]:
    yield tmp_path_factory.mktemp("corral")


async def test_runs_are_re_adopted_after_a_restart(data_dir: Path) -> None:
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:
        tenant = await api.create_tenant()
        sandbox = await create(api, tenant)
        sid = sandbox["id"]
        slow = await start_run(api, tenant, sandbox_id=sid, prompt="p", command="sleep 4; echo slow-done; exit 5", wait=False)
        during = await start_run(api, tenant, sandbox_id=sid, prompt="p", command="sleep 1; echo quick", wait=False)
        long = await start_run(api, tenant, sandbox_id=sid, prompt="p", command="sleep 600", wait=False)
        assert {r["status"] for r in (slow, during, long)} == {"running"}
    await trio.sleep(1.5)  # `during` ends while no control plane runs
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:
        try:
            ended = await wait_terminal(api, tenant, during["id"], timeout=20)
            assert (ended["status"], ended["exit_code"], ended["output"]) == ("succeeded", 0, "quick\n")
            finished = await wait_terminal(api, tenant, slow["id"], timeout=30)
            assert (finished["status"], finished["exit_code"], finished["output"]) == ("failed", 5, "slow-done\n")
            for run_id in (during["id"], slow["id"]):
                assert await event_types(api, tenant, run_id) == ["created", "command_started", "process_started", "command_finished"]
            assert (await get_run(api, tenant, long["id"]))["status"] == "running"
            canceled = await api.request("POST", f"{API}/agent-runs/{long['id']}/cancel", key=tenant.key)
            assert canceled.status_code == 200 and canceled.json()["data"]["status"] == "canceled"
            pid = long["metadata"].get("agent_process", {}).get("process_id") or canceled.json()["data"]["metadata"]["agent_process"]["process_id"]
            with trio.fail_after(15):
                while (await api.request("GET", f"{API}/sandboxes/{sid}/processes/{pid}", key=tenant.key)).json()["data"]["status"] == "running":
                    await trio.sleep(0.1)
        finally:
            driver = await api.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)

"""API errors name no internal address and no host path (contract §18): a tenant whose
sandbox broke reads what happened, not the node's layout.

The sandbox is broken from the host, as a crash or an operator's mistake would: its
processes are killed (the agent no longer answers), then its recorded template layer
points nowhere (the launch fails inside the host's mount code). Every answer the
tenant gets, and every record it can read afterwards, is checked for the sandbox's
address, the node's bridge address, any IPv4 address at all, and the node's
directories (data, templates, instance)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from corral.vm import CgroupV1
from tests.security.support import create, run
from tests.support import API, RUNTIME_SETTINGS, Api, Tenant

from .lan import GATEWAY, OWN_ADDRESS

IPV4 = re.compile(r"(?<![\w.])\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\w.])")






async def action(api: Api, tenant: Tenant, sandbox_id: str, name: str) -> httpx.Response:
    return await api.request("POST", f"{API}/sandboxes/{sandbox_id}/{name}", key=tenant.key, timeout=120)


class Secrets:
    """What no answer may hold: the sandbox's and the node's addresses, the node's paths."""

    def __init__(self, api: Api, sandbox_id: str, address: str, gateway: str, instance_dir: str) -> None:
        settings = api.platform.settings
        self.words = {
            address, gateway, str(settings.data_dir), str(settings.template_dir), instance_dir,
            str(settings.data_dir.resolve()), "/run/netns", settings.bridge, f"{settings.netns_prefix}{sandbox_id}",
        }

    def check(self, response: httpx.Response) -> None:
        text = response.text
        assert not IPV4.search(text), text
        assert not [word for word in self.words if word in text], text
        assert "Traceback" not in text, text


def error_of(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return str(error["message"])


async def test_a_sandbox_whose_agent_is_gone_answers_without_addresses_or_paths(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox_id = await create(api, owner)
    address = (await run(api, owner, sandbox_id, OWN_ADDRESS))["stdout"].strip()
    gateway = (await run(api, owner, sandbox_id, GATEWAY))["stdout"].strip()
    driver = await api.platform.runtime.driver()
    secrets = Secrets(api, sandbox_id, address, gateway, str(driver.instance_dir(sandbox_id)))
    assert IPV4.fullmatch(address) and IPV4.fullmatch(gateway)

    # Every process of the instance killed from the host: the agent is gone for good.
    cgroups = CgroupV1(parent=RUNTIME_SETTINGS["cgroup_parent"])
    assert cgroups.pids(sandbox_id), "the sandbox's processes are in its cgroup"
    cgroups.kill_all(sandbox_id)

    answers = [
        await api.request("POST", f"{API}/sandboxes/{sandbox_id}/exec", key=owner.key, json={"command": "echo hi"}),
        await api.request("GET", f"{API}/sandboxes/{sandbox_id}/files", key=owner.key, params={"path": "/workspace"}),
        await api.request("POST", f"{API}/sandboxes/{sandbox_id}/processes", key=owner.key, json={"cmd": "sleep 1"}),
    ]
    for answer in answers:
        assert "agent does not answer" in error_of(answer, 502, "AGENT_UNAVAILABLE"), answer.text
        secrets.check(answer)
    # The process that could not start is listed as such.
    listed = await api.request("GET", f"{API}/sandboxes/{sandbox_id}/processes", key=owner.key)
    assert listed.status_code == 200, listed.text
    assert [p["status"] for p in listed.json()["data"]] == ["error"], listed.text
    secrets.check(listed)

    # Stop and start bring it back.
    assert (await action(api, owner, sandbox_id, "stop")).status_code == 200
    started = await action(api, owner, sandbox_id, "start")
    assert started.status_code == 200 and started.json()["data"]["status"] == "running", started.text
    assert (await run(api, owner, sandbox_id, "echo back"))["stdout"] == "back\n"


async def test_a_launch_that_fails_in_the_host_says_so_without_its_paths(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox_id = await create(api, owner)
    address = (await run(api, owner, sandbox_id, OWN_ADDRESS))["stdout"].strip()
    gateway = (await run(api, owner, sandbox_id, GATEWAY))["stdout"].strip()
    driver = await api.platform.runtime.driver()
    instance_dir = driver.instance_dir(sandbox_id)
    secrets = Secrets(api, sandbox_id, address, gateway, str(instance_dir))
    assert (await action(api, owner, sandbox_id, "stop")).status_code == 200

    # The instance's recorded template layer now points to a host directory that is not there.
    state_file = instance_dir / "state.json"
    state = json.loads(state_file.read_text())
    assert isinstance(state.get("lower"), str), "the namespace driver records the template layer as `lower`"
    missing = api.platform.settings.template_dir / "no-such-layer"
    state_file.write_text(json.dumps({**state, "lower": str(missing)}))
    secrets.words.add(str(missing))

    failed = await action(api, owner, sandbox_id, "start")
    message = error_of(failed, 500, "INTERNAL_ERROR")
    assert "did not start" in message and "\n" not in message, message
    secrets.check(failed)
    got = await api.request("GET", f"{API}/sandboxes/{sandbox_id}", key=owner.key)
    assert got.status_code == 200 and got.json()["data"]["status"] == "stopped", got.text
    secrets.check(got)

    state_file.write_text(json.dumps(state))  # repaired, it starts again
    started = await action(api, owner, sandbox_id, "start")
    assert started.status_code == 200 and started.json()["data"]["status"] == "running", started.text

"""Sandbox templates and builds (contract §15): real builds with a Debian package, sandboxes
started from them, logs and their stream, cancel, retry, rebuild, and every error."""

from __future__ import annotations

from typing import Any

import trio

from tests.sse_client import open_sse
from tests.support import API, Api, Tenant, assert_error

from .test_sandboxes import create as create_sandbox
from .test_sandboxes import run

PATH = f"{API}/sandbox-templates"
BUILDS = f"{API}/sandbox-template-builds"
BUILD_TIMEOUT = 600


async def create_template(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = await api.request("POST", PATH, key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()["data"]
    return created


async def wait_build(api: Api, tenant: Tenant, build_id: str, timeout: float = BUILD_TIMEOUT) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            response = await api.request("GET", f"{BUILDS}/{build_id}", key=tenant.key)
            assert response.status_code == 200, response.text
            build: dict[str, Any] = response.json()["data"]
            if build["status"] in ("ready", "failed", "cancelled"):
                return build
            await trio.sleep(0.5)


async def test_build_with_a_package_and_start_sandboxes_from_it(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    created = await create_template(
        api, owner, name="greeter", packages=["hello"], setup=["echo built-by-setup > /opt/marker", 'echo "token=$BUILD_TOKEN" > /opt/env-seen'],
        env={"BUILD_TOKEN": "tmpl-secret-1"}, default_preview_port=8000,
    )
    template, build = created["template"], created["build"]
    assert template["status"] == "building" and template["builtin"] is False and template["base"] == "default"
    assert template["env_keys"] == ["BUILD_TOKEN"] and "tmpl-secret-1" not in str(created)
    assert build["template_id"] == template["id"] and build["status"] in ("queued", "building")
    done = await wait_build(api, owner, build["id"])
    logs = (await api.request("GET", f"{BUILDS}/{build['id']}/logs", key=owner.key)).json()["data"]["lines"]
    text = "\n".join(line["line"] for line in logs)
    assert done["status"] == "ready", (done, text[-3000:])
    assert done["finished_at"] and done["started_at"] and done["error"] is None
    assert "$ apt-get install hello" in text and "Setting up hello" in text and "build ready" in text

    got = (await api.request("GET", f"{PATH}/{template['id']}", key=owner.key)).json()["data"]
    assert got["status"] == "ready" and got["size_bytes"] > 0
    assert (await api.request("GET", f"{PATH}/greeter", key=owner.key)).json()["data"]["id"] == template["id"]

    for ref in (template["id"], "greeter"):
        sandbox = await create_sandbox(api, owner, template_id=ref)
        assert sandbox["status"] == "running" and sandbox["template_id"] == template["id"]
        result = await run(api, owner, sandbox["id"], "hello && cat /opt/marker /opt/env-seen && echo $BUILD_TOKEN && which jq")
        assert result["exit_code"] == 0, result
        assert result["stdout"] == "Hello, world!\nbuilt-by-setup\ntoken=tmpl-secret-1\ntmpl-secret-1\n/usr/bin/jq\n"
    exposed = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/expose", key=owner.key, json={})
    assert exposed.status_code == 200, exposed.text
    assert exposed.json()["port"] == 8000
    # A sandbox of the default template does not have the package.
    plain = await create_sandbox(api, owner)
    assert (await run(api, owner, plain["id"], "command -v hello || echo none"))["stdout"] == "none\n"
    assert_error(await api.request("POST", f"{API}/sandboxes/{plain['id']}/expose", key=owner.key, json={}), 400, "MISSING_PARAM")

    # Deleting the template: sandboxes made from it keep running; new ones are refused.
    deleted = await api.request("DELETE", f"{PATH}/{template['id']}", key=owner.key)
    assert deleted.status_code == 200 and deleted.json() == {"data": {"id": template["id"], "deleted": True}}
    assert (await run(api, owner, sandbox["id"], "hello"))["stdout"] == "Hello, world!\n"
    stopped = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/stop", key=owner.key)
    assert stopped.status_code == 200, stopped.text
    started = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/start", key=owner.key)
    assert started.status_code == 200, started.text
    assert (await run(api, owner, sandbox["id"], "hello"))["stdout"] == "Hello, world!\n"
    refused = await api.request("POST", f"{API}/sandboxes", key=owner.key, json={"template_id": template["id"]})
    assert_error(refused, 400, "INVALID_TEMPLATE")
    assert_error(await api.request("GET", f"{PATH}/{template['id']}", key=owner.key), 404, "TEMPLATE_NOT_FOUND")

"""Sandbox templates and builds (contract §15): real builds with a Debian package, sandboxes
started from them, logs and their stream, cancel, retry, rebuild, and every error."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import trio

from corral.ids import new_uuid
from tests.sse_client import open_sse
from tests.support import API, RUNTIME_SETTINGS, Api, Tenant, assert_error, running_server

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


async def wait_status(api: Api, tenant: Tenant, build_id: str, status: str, timeout: float = 120) -> None:
    with trio.fail_after(timeout):
        while (await api.request("GET", f"{BUILDS}/{build_id}", key=tenant.key)).json()["data"]["status"] != status:
            await trio.sleep(0.2)


async def wait_log(api: Api, tenant: Tenant, build_id: str, text: str, timeout: float = 120) -> None:
    with trio.fail_after(timeout):
        while True:
            lines = (await api.request("GET", f"{BUILDS}/{build_id}/logs", key=tenant.key)).json()["data"]["lines"]
            if any(text in line["line"] for line in lines):
                return
            await trio.sleep(0.2)


async def test_cancel_retry_and_rebuild(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    created = await create_template(api, owner, name="slow", setup=["echo started-slow", "sleep 120"])
    template, build = created["template"], created["build"]
    await wait_log(api, owner, build["id"], "started-slow")
    # One build at a time; a running build is not retryable; the template is not ready yet.
    assert_error(await api.request("POST", f"{PATH}/{template['id']}/builds", key=owner.key), 409, "BUILD_IN_PROGRESS")
    assert_error(await api.request("POST", f"{BUILDS}/{build['id']}/retry", key=owner.key), 409, "BUILD_NOT_RETRYABLE")
    assert_error(await api.request("POST", f"{API}/sandboxes", key=owner.key, json={"template_id": "slow"}), 409, "TEMPLATE_NOT_READY")

    cancelled = await api.request("POST", f"{BUILDS}/{build['id']}/cancel", key=owner.key)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["data"]["status"] == "cancelled" and cancelled.json()["data"]["finished_at"]
    driver = await api.platform.runtime.driver()
    assert build["id"] not in {info.id for info in await driver.instances()}  # its instance is gone
    assert_error(await api.request("POST", f"{BUILDS}/{build['id']}/cancel", key=owner.key), 409, "BUILD_ALREADY_TERMINAL")
    assert (await api.request("GET", f"{PATH}/slow", key=owner.key)).json()["data"]["status"] == "failed"
    lines = (await api.request("GET", f"{BUILDS}/{build['id']}/logs", key=owner.key)).json()["data"]["lines"]
    assert lines[-1]["line"] == "build cancelled"

    retried = await api.request("POST", f"{BUILDS}/{build['id']}/retry", key=owner.key)
    assert retried.status_code == 201, retried.text
    second = retried.json()["data"]
    assert second["id"] != build["id"] and second["template_id"] == template["id"] and second["status"] in ("queued", "building")
    assert (await api.request("GET", f"{PATH}/slow", key=owner.key)).json()["data"]["status"] == "building"
    # Deleting the template cancels its running build.
    assert (await api.request("DELETE", f"{PATH}/slow", key=owner.key)).status_code == 200
    assert (await api.request("GET", f"{BUILDS}/{second['id']}", key=owner.key)).json()["data"]["status"] == "cancelled"

    # A failing step fails the build with its exit code; a failed build can be retried.
    failing = await create_template(api, owner, name="broken", setup=["echo about-to-fail", "exit 3"])
    failed = await wait_build(api, owner, failing["build"]["id"])
    assert failed["status"] == "failed" and "exited with 3" in failed["error"]
    assert_error(await api.request("POST", f"{API}/sandboxes", key=owner.key, json={"template_id": "broken"}), 409, "TEMPLATE_NOT_READY")
    again = await api.request("POST", f"{BUILDS}/{failed['id']}/retry", key=owner.key)
    assert again.status_code == 201
    assert (await wait_build(api, owner, again.json()["data"]["id"]))["status"] == "failed"

    # A rebuild of a ready template: the new layer is what new sandboxes get.
    versioned = await create_template(api, owner, name="versioned", setup=["echo v1 > /opt/version"])
    assert (await wait_build(api, owner, versioned["build"]["id"]))["status"] == "ready"
    first_sandbox = await create_sandbox(api, owner, template_id="versioned")
    await api.platform.db.execute(
        "UPDATE sandbox_templates SET setup = ? WHERE id = ?", ('["echo v2 > /opt/version"]', versioned["template"]["id"])
    )  # (templates are immutable through the API; this stands in for a changed apt archive)
    rebuilt = await api.request("POST", f"{PATH}/versioned/builds", key=owner.key)
    assert rebuilt.status_code == 201, rebuilt.text
    assert (await api.request("GET", f"{PATH}/versioned", key=owner.key)).json()["data"]["status"] == "ready"  # still usable
    assert (await wait_build(api, owner, rebuilt.json()["data"]["id"]))["status"] == "ready"
    second_sandbox = await create_sandbox(api, owner, template_id="versioned")
    assert (await run(api, owner, second_sandbox["id"], "cat /opt/version"))["stdout"] == "v2\n"
    assert (await run(api, owner, first_sandbox["id"], "cat /opt/version"))["stdout"] == "v1\n"


async def test_log_stream(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    created = await create_template(api, owner, name="streamed", setup=["echo line-one", "sleep 1", "echo line-two"])
    build_id = created["build"]["id"]
    ticket = (await api.request("POST", f"{API}/auth/sse-ticket", key=owner.key)).json()["ticket"]
    async with open_sse(api.client, f"{BUILDS}/{build_id}/logs/stream?ticket={ticket}") as stream:
        frames = await stream.frames_until("status", timeout=60)
        assert frames[-1].data["status"] in ("queued", "building")
        seen = []
        with trio.fail_after(120):
            while True:
                frame = await stream.next_frame(timeout=60)
                seen.append(frame)
                if frame.event == "status" and frame.data["status"] in ("ready", "failed", "cancelled"):
                    break
        with trio.fail_after(10):  # closed after the terminal status
            try:
                await stream.next_frame(timeout=10)
                raise AssertionError("the stream went on after the terminal status")
            except EOFError:
                pass
    logs = [frame.data["line"] for frame in [*frames, *seen] if frame.event == "log"]
    assert seen[-1].data == {"status": "ready"}
    assert logs.index("line-one") < logs.index("line-two")
    assert all(set(frame.data) == {"line", "ts"} for frame in [*frames, *seen] if frame.event == "log")
    # Resuming from a Last-Event-ID gives only later lines, then the final status.
    async with open_sse(api.client, f"{BUILDS}/{build_id}/logs/stream", headers={**owner.headers, "Last-Event-ID": "2"}) as resumed:
        rest = await resumed.frames_until("status", timeout=30)
    assert next(f.id for f in rest if f.event == "log") == "3" and rest[-1].data == {"status": "ready"}
    assert_error(await api.client.get(f"{BUILDS}/{build_id}/logs/stream"), 401, "UNAUTHORIZED")


async def test_errors_builtins_isolation_and_replay(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    stranger = await api.create_tenant("Stranger")
    listed = (await api.request("GET", PATH, key=owner.key)).json()["data"]
    assert [(t["id"], t["builtin"], t["status"]) for t in listed[:2]] == [("default", True, "ready"), ("svc-desktop", True, "ready")]
    assert (await api.request("GET", f"{PATH}/default", key=owner.key)).json()["data"]["builtin"] is True
    assert_error(await api.request("DELETE", f"{PATH}/default", key=owner.key), 409, "INVALID_STATE")
    assert_error(await api.request("POST", f"{PATH}/svc-desktop/builds", key=owner.key), 409, "INVALID_STATE")

    assert_error(await api.request("POST", PATH, key=owner.key, json={"packages": ["hello"]}), 400, "MISSING_PARAM")
    assert_error(await api.request("POST", PATH, key=owner.key, content=b"not json"), 400, "INVALID_BODY")
    assert_error(await api.request("POST", PATH, key=owner.key, json={"name": "x", "base": "ubuntu"}), 400, "INVALID_TEMPLATE")
    assert_error(await api.request("POST", PATH, key=owner.key, json={"name": "default"}), 409, "TEMPLATE_NAME_TAKEN")
    bad: list[tuple[dict[str, Any], str]] = [
        ({"name": "Has Spaces"}, "name"),
        ({"name": "x" * 64}, "name"),
        ({"name": "b2c1f1a0-4c3e-4a57-9d0c-0f5a1c2b3d4e"}, "name"),
        ({"packages": ["Hello World"]}, "packages"),
        ({"packages": ["-o=evil"]}, "packages"),
        ({"packages": [f"p{i}" for i in range(201)]}, "packages"),
        ({"setup": ["true"] * 51}, "setup"),
        ({"setup": ["  "]}, "setup"),
        ({"env": {"bad-key": "x"}}, "env"),
        ({"env": {"NUL": "a\u0000b"}}, "env"),
        ({"setup": ["echo a\u0000b"]}, "setup"),
        ({"default_preview_port": 0}, "default_preview_port"),
        ({"default_preview_port": 65536}, "default_preview_port"),
    ]
    for extra, field_name in bad:
        response = await api.request("POST", PATH, key=owner.key, json={"name": "n", **extra})
        error = assert_error(response, 422, "VALIDATION_ERROR")
        assert field_name in error["details"], (extra, error)

    # At the limits: 63-character name, 50 setup commands, ports 1 and 65535.
    edge = await create_template(api, owner, name="e" * 63, setup=["true"] * 50, default_preview_port=65535)
    assert edge["template"]["name"] == "e" * 63 and edge["template"]["default_preview_port"] == 65535
    assert (await wait_build(api, owner, edge["build"]["id"]))["status"] == "ready"
    assert_error(await api.request("POST", PATH, key=owner.key, json={"name": "e" * 63}), 409, "TEMPLATE_NAME_TAKEN")

    # 200 packages pass validation (the build then fails at apt: these are no packages).
    many = await create_template(api, owner, name="many", packages=[f"no-such-package-{i}" for i in range(200)])
    assert len(many["template"]["packages"]) == 200
    failed_many = await wait_build(api, owner, many["build"]["id"])
    assert failed_many["status"] == "failed" and "apt-get install" in failed_many["error"]

    # A template over the desktop base.
    desktop = await create_template(api, owner, name="desk", base="svc-desktop", setup=["test -x /usr/bin/Xvnc && echo has-x > /opt/x"])
    assert desktop["template"]["base"] == "svc-desktop"
    assert (await wait_build(api, owner, desktop["build"]["id"]))["status"] == "ready"
    on_desktop = await create_sandbox(api, owner, template_id="desk")
    assert (await run(api, owner, on_desktop["id"], "cat /opt/x; command -v xdotool"))["stdout"] == "has-x\n/usr/bin/xdotool\n"

    # Idempotency-Key: the same create answered again, no second template or build.
    headers = {"Idempotency-Key": "template-once"}
    body = {"name": "once", "setup": ["true"], "default_preview_port": 1}
    first = await api.request("POST", PATH, key=owner.key, json=body, headers=headers)
    again = await api.request("POST", PATH, key=owner.key, json=body, headers=headers)
    assert first.status_code == again.status_code == 201 and again.headers.get("Idempotent-Replayed") == "true"
    assert again.json() == first.json()
    once = first.json()["data"]
    await wait_build(api, owner, once["build"]["id"])

    # Unknown ids and names.
    assert_error(await api.request("GET", f"{PATH}/nope", key=owner.key), 404, "TEMPLATE_NOT_FOUND")
    assert_error(await api.request("GET", f"{BUILDS}/nope", key=owner.key), 404, "BUILD_NOT_FOUND")
    assert_error(await api.request("GET", f"{BUILDS}/{once['template']['id']}", key=owner.key), 404, "BUILD_NOT_FOUND")
    assert_error(await api.request("POST", f"{API}/sandboxes", key=owner.key, json={"template_id": "nope"}), 400, "INVALID_TEMPLATE")

    # Another tenant: 404 on every route, and no sandbox from the template by id or name.
    tid, bid = once["template"]["id"], once["build"]["id"]
    for method, path, code in [
        ("GET", f"{PATH}/{tid}", "TEMPLATE_NOT_FOUND"),
        ("GET", f"{PATH}/once", "TEMPLATE_NOT_FOUND"),
        ("DELETE", f"{PATH}/{tid}", "TEMPLATE_NOT_FOUND"),
        ("POST", f"{PATH}/{tid}/builds", "TEMPLATE_NOT_FOUND"),
        ("GET", f"{BUILDS}/{bid}", "BUILD_NOT_FOUND"),
        ("POST", f"{BUILDS}/{bid}/cancel", "BUILD_NOT_FOUND"),
        ("POST", f"{BUILDS}/{bid}/retry", "BUILD_NOT_FOUND"),
        ("GET", f"{BUILDS}/{bid}/logs", "BUILD_NOT_FOUND"),
        ("GET", f"{BUILDS}/{bid}/logs/stream", "BUILD_NOT_FOUND"),
    ]:
        assert_error(await api.request(method, path, key=stranger.key), 404, code)
    assert [t["id"] for t in (await api.request("GET", PATH, key=stranger.key)).json()["data"]] == ["default", "svc-desktop"]
    for ref in (tid, "once"):
        response = await api.request("POST", f"{API}/sandboxes", key=stranger.key, json={"template_id": ref})
        assert_error(response, 400, "INVALID_TEMPLATE")
    # Scopes: reading needs sandboxes:read, building sandboxes:write.
    reader = (await api.request("POST", f"{API}/api-keys", key=owner.key, json={"name": "r", "scopes": ["sandboxes:read"]})).json()["data"]["key"]
    assert (await api.request("GET", f"{PATH}/{tid}", key=reader)).status_code == 200
    assert_error(await api.request("POST", f"{PATH}/{tid}/builds", key=reader), 403, "insufficient_scope")


async def test_a_build_cut_off_by_a_restart_fails_and_unused_layers_go(tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> None:
    data_dir = tmp_path_factory.mktemp("corral")
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:
        tenant = await api.create_tenant()
        kept = await create_template(api, tenant, name="kept", setup=["echo kept > /opt/kept"])
        assert (await wait_build(api, tenant, kept["build"]["id"]))["status"] == "ready"
        sandbox = await create_sandbox(api, tenant, template_id="kept")
        assert (await api.request("DELETE", f"{PATH}/kept", key=tenant.key)).status_code == 200
        templates_root = api.platform.runtime.templates.root
        assert (templates_root / kept["template"]["id"]).is_dir()  # a sandbox still uses its layer
        slow = await create_template(api, tenant, name="slow", setup=["echo going", "sleep 600"])
        await wait_log(api, tenant, slow["build"]["id"], "going")
        assert (await api.request("DELETE", f"{API}/sandboxes/{sandbox['id']}", key=tenant.key)).status_code == 200
        # Another server's template in the shared template directory: not this store's to sweep.
        foreign = templates_root / new_uuid()
        shutil.copytree(templates_root / kept["template"]["id"], foreign, symlinks=True)
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:
        build = await wait_build(api, tenant, slow["build"]["id"], timeout=60)
        assert build["status"] == "failed" and "control plane stopped" in build["error"]
        driver = await api.platform.runtime.driver()
        assert slow["build"]["id"] not in {info.id for info in await driver.instances()}
        assert (await api.request("GET", f"{PATH}/slow", key=tenant.key)).json()["data"]["status"] == "failed"
        retried = await api.request("POST", f"{BUILDS}/{build['id']}/retry", key=tenant.key)
        assert retried.status_code == 201
        cancelled = await api.request("POST", f"{BUILDS}/{retried.json()['data']['id']}/cancel", key=tenant.key)
        assert cancelled.status_code == 200
        assert not (templates_root / kept["template"]["id"]).exists()  # no sandbox left: swept at start
        assert foreign.is_dir()
    shutil.rmtree(foreign)


async def test_concurrent_builds_per_tenant(runtime_api: Api, owner: Tenant) -> None:
    """At most 5 builds of a tenant queued or building at once (each runs an instance)."""
    api = runtime_api
    running = [await create_template(api, owner, name=f"busy{i}", setup=["sleep 600"]) for i in range(4)]
    fifth = await create_template(api, owner, name="busy4", setup=["true"])  # the limit: 5 at once
    other = await api.create_tenant("Other")
    assert (await create_template(api, other, name="theirs", setup=["true"]))["build"]["status"] in ("queued", "building")
    if (await api.request("GET", f"{BUILDS}/{fifth['build']['id']}", key=owner.key)).json()["data"]["status"] != "ready":
        assert_error(await api.request("POST", PATH, key=owner.key, json={"name": "sixth"}), 409, "BUILD_LIMIT_REACHED")
    await wait_build(api, owner, fifth["build"]["id"])
    sixth = await create_template(api, owner, name="sixth", setup=["sleep 600"])  # room again
    assert_error(await api.request("POST", PATH, key=owner.key, json={"name": "seventh"}), 409, "BUILD_LIMIT_REACHED")
    assert_error(await api.request("POST", f"{PATH}/busy4/builds", key=owner.key), 409, "BUILD_LIMIT_REACHED")
    assert_error(await api.request("GET", f"{PATH}/seventh", key=owner.key), 404, "TEMPLATE_NOT_FOUND")  # nothing left behind
    for created in [*running, sixth]:
        cancelled = await api.request("POST", f"{BUILDS}/{created['build']['id']}/cancel", key=owner.key)
        assert cancelled.status_code == 200, cancelled.text
    assert (await api.request("POST", f"{PATH}/busy4/builds", key=owner.key)).status_code == 201

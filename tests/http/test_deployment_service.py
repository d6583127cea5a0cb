"""Service publishes (contract §12): a `svc_` instance from the artifact, health-checked,
restarted with backoff when it crashes, its logs readable, rollback between services."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from corral.actors.billing import store as billing_store
from corral.actors.deployments import credits, service_actor
from tests.http.deploy_support import deployment, exec_in, get_site, new_sandbox, publish
from tests.support import API, RUNTIME_SETTINGS, Api, Tenant, assert_error, running_server

pytestmark = pytest.mark.slow

SERVER = """
import http.server, os, sys
TEXT = open("message.txt").read()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/crash":
            os._exit(3)
        body = (TEXT + " " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        print("request", self.path, flush=True)
print("listening on", os.environ["PORT"], flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"""


async def write_app(api: Api, owner: Tenant, sandbox_id: str, message: str) -> None:
    for path, content in (("/workspace/server.py", SERVER), ("/workspace/message.txt", message)):
        wrote = await api.request("POST", f"{API}/sandboxes/{sandbox_id}/files/write", key=owner.key, json={"path": path, "content": content})
        assert wrote.status_code == 201, wrote.text


async def test_service_publish_serve_crash_restart_logs_rollback(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await new_sandbox(api, owner)
    await write_app(api, owner, sandbox["id"], "hello")
    dep = await deployment(api, owner, "api")
    first = await publish(api, owner, dep["id"], sandbox["id"], run_command="python3 server.py", port=8000, health_check_path="/health")
    assert first.status_code == 200, first.text
    body = first.json()["data"]
    assert body["version"]["kind"] == "service" and body["version"]["state"] == "ready"
    assert body["version"]["runtime_command"] == "python3 server.py" and body["version"]["runtime_port"] == 8000
    [service] = body["services"]
    assert service["id"].startswith("svc_") and service["state"] == "healthy" and service["type"] == "web_service"
    response = await get_site(api, dep["slug"], "/x")
    assert response.status_code == 200 and response.text == "hello /x"

    logs = await api.request("GET", f"{API}/deployments/{dep['id']}/services/{service['id']}/logs", key=owner.key)
    assert logs.status_code == 200, logs.text
    assert any("listening on 8000" in line["line"] for line in logs.json()["data"]["lines"])
    logs_url = f"{API}/deployments/{dep['id']}/services/{service['id']}/logs"
    for tail in (0, 1001):
        assert_error(await api.request("GET", f"{logs_url}?tail={tail}", key=owner.key), 400, "INVALID_PARAM")
    for tail in (1, 1000):
        assert (await api.request("GET", f"{logs_url}?tail={tail}", key=owner.key)).status_code == 200
    one = (await api.request("GET", f"{logs_url}?tail=1", key=owner.key)).json()["data"]["lines"]
    assert len(one) == 1

    # It crashes: its supervisor starts it again.
    crashed = await get_site(api, dep["slug"], "/crash")
    assert crashed.status_code == 502
    with trio.fail_after(30):
        while True:
            got = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions/{body['version']['id']}", key=owner.key)).json()["data"]
            if got["services"][0]["restarts"] >= 1 and (await get_site(api, dep["slug"], "/y")).status_code == 200:
                break
            await trio.sleep(0.3)
    assert (await get_site(api, dep["slug"], "/y")).text == "hello /y"

    # A second version, then a rollback to the first service (kept running).
    await write_app(api, owner, sandbox["id"], "second")
    second = await publish(api, owner, dep["id"], sandbox["id"], run_command="python3 server.py", port=8000)
    assert second.status_code == 200, second.text
    assert (await get_site(api, dep["slug"], "/")).text == "second /"
    assert (await get_site(api, dep["slug"], "/", version=1)).text == "hello /"
    rolled = await api.request("POST", f"{API}/deployments/{dep['id']}/rollback", key=owner.key, json={"version_id": body["version"]["id"]})
    assert rolled.status_code == 200
    assert (await get_site(api, dep["slug"], "/")).text == "hello /"

    deleted = await api.request("DELETE", f"{API}/deployments/{dep['id']}", key=owner.key)
    assert deleted.status_code == 200
    assert (await get_site(api, dep["slug"], "/")).status_code == 404
    driver = await api.platform.runtime.driver()
    assert not [i for i in await driver.instances() if i.id.startswith("svc_")]


async def test_a_service_that_never_answers_fails_its_version(runtime_api: Api, owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_actor, "HEALTH_TIMEOUT", 4.0)
    api = runtime_api
    sandbox = await new_sandbox(api, owner)
    await exec_in(api, owner, sandbox["id"], "printf x > /workspace/file")
    dep = await deployment(api, owner)
    silent = await publish(api, owner, dep["id"], sandbox["id"], run_command="sleep 1000", port=8000)
    error = assert_error(silent, 422, "HEALTH_CHECK_FAILED")
    version = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions/{error['details']['version_id']}", key=owner.key)).json()["data"]
    assert version["state"] == "failed"
    exits = await publish(api, owner, dep["id"], sandbox["id"], run_command="echo bye; exit 4", port=8000)
    assert "exited" in assert_error(exits, 422, "HEALTH_CHECK_FAILED")["message"]
    assert (await api.request("GET", f"{API}/deployments/{dep['id']}", key=owner.key)).json()["data"]["active_version_id"] is None
    driver = await api.platform.runtime.driver()
    assert not [i for i in await driver.instances() if i.id.startswith("svc_")]  # failed services leave nothing


async def test_a_new_control_plane_routes_what_the_last_one_published(runtime_host: None, tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:
        owner = await api.create_tenant()
        sandbox = await new_sandbox(api, owner)
        await write_app(api, owner, sandbox["id"], "kept")
        static = await deployment(api, owner, "static")
        service = await deployment(api, owner, "service")
        assert (await publish(api, owner, static["id"], sandbox["id"], output_path="/workspace")).status_code == 200
        assert (await publish(api, owner, service["id"], sandbox["id"], run_command="python3 server.py", port=8000)).status_code == 200
    async with running_server(data_dir, **RUNTIME_SETTINGS) as api:
        try:
            assert (await get_site(api, static["slug"], "/message.txt")).text == "kept"
            assert (await get_site(api, service["slug"], "/again")).text == "kept /again"
        finally:
            driver = await api.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


async def test_a_service_is_metered_stopped_for_credits_and_woken_by_a_promote(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await new_sandbox(api, owner)
    await write_app(api, owner, sandbox["id"], "metered")
    dep = await deployment(api, owner, "metered")
    published = await publish(api, owner, dep["id"], sandbox["id"], run_command="python3 server.py", port=8000)
    assert published.status_code == 200, published.text
    body = published.json()["data"]
    service_id = body["services"][0]["id"]
    meter = await billing_store.find_meter(api.platform.db, "deployment_service", service_id)
    assert meter is not None and meter.running

    await credits.stop_for_credits(api.platform, service_id)  # what billing does when credits run out
    meter = await billing_store.find_meter(api.platform.db, "deployment_service", service_id)
    assert meter is not None and not meter.running
    assert (await get_site(api, dep["slug"], "/")).status_code == 503
    version = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions/{body['version']['id']}", key=owner.key)).json()["data"]
    assert version["services"][0]["state"] == "stopped"

    woken = await api.request("POST", f"{API}/deployments/{dep['id']}/versions/{body['version']['id']}/promote", key=owner.key)
    assert woken.status_code == 200, woken.text
    assert (await get_site(api, dep["slug"], "/")).text == "metered /"
    meter = await billing_store.find_meter(api.platform.db, "deployment_service", service_id)
    assert meter is not None and meter.running

    await api.platform.db.execute("UPDATE credit_accounts SET balance_credits = 0 WHERE tenant_id = ?", (owner.id,))
    refused = await publish(api, owner, dep["id"], sandbox["id"], run_command="python3 server.py", port=8000)
    assert_error(refused, 402, "INSUFFICIENT_CREDITS")

"""Promote and rollback are atomic for clients, and their events and webhooks arrive."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from tests.actors.webhooks.receiver import https_receiver, verify_signatures
from tests.http.deploy_support import deployment, exec_in, new_sandbox, publish, router, site_host
from tests.sse_client import open_sse
from tests.support import API, Api, Tenant

pytestmark = pytest.mark.slow


async def test_a_loop_of_requests_during_promotes_sees_no_error(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await new_sandbox(api, owner)
    dep = await deployment(api, owner)
    versions = []
    for text in ("alpha", "beta"):
        await exec_in(api, owner, sandbox["id"], f"mkdir -p /workspace/s && printf '{text}' > /workspace/s/index.html")
        published = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/s", environment="staging")
        assert published.status_code == 200, published.text
        versions.append(published.json()["data"]["version"]["id"])
    first = await api.request("POST", f"{API}/deployments/{dep['id']}/versions/{versions[0]}/promote", key=owner.key)
    assert first.status_code == 200

    seen: dict[str, int] = {}
    failures: list[str] = []
    stop = trio.Event()

    async def hammer(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            response = await client.get("/", headers={"Host": site_host(api, dep["slug"])})
            if response.status_code != 200 or response.text not in ("alpha", "beta"):
                failures.append(f"{response.status_code} {response.text[:80]}")
            seen[response.text] = seen.get(response.text, 0) + 1

    async with router(api) as client, trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(hammer, client)
        for round_ in range(10):
            target = versions[(round_ + 1) % 2]
            promoted = await api.request("POST", f"{API}/deployments/{dep['id']}/versions/{target}/promote", key=owner.key)
            assert promoted.status_code == 200, promoted.text
            await trio.sleep(0.05)
        stop.set()
    assert failures == []
    assert seen.get("alpha", 0) > 0 and seen.get("beta", 0) > 0, seen


async def test_events_stream_and_webhooks(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    api = runtime_api
    async with https_receiver(tmp_path / "receiver") as receiver:
        api.platform.settings.allow_private_destinations = True
        api.platform.settings.ca_bundle = str(receiver.ca_path)
        hook = await api.request("POST", f"{API}/webhooks", key=owner.key, json={"url": receiver.url(), "events": ["deployment.succeeded", "deployment.failed", "deployment.rollback"]})
        assert hook.status_code == 201, hook.text
        secret = hook.json()["data"]["secret"]
        sandbox = await new_sandbox(api, owner)
        await exec_in(api, owner, sandbox["id"], "mkdir -p /workspace/s && printf one > /workspace/s/index.html")
        dep = await deployment(api, owner)
        async with httpx.AsyncClient(base_url=str(api.client.base_url), timeout=60) as client:
            url = f"{API}/deployments/{dep['id']}/events"
            async with open_sse(client, url, {"Authorization": f"Bearer {owner.key}"}) as stream:
                await stream.wait_connected()
                first = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/s")
                assert first.status_code == 200
                frames = await stream.frames_until("deployment.publish.completed")
                kinds = [f.event for f in frames]
                assert kinds[:2] == ["deployment.publish.queued", "deployment.publish.building"]
                assert "deployment.publish.uploading" in kinds and "deployment.publish.promoting" in kinds
                assert "deployment.succeeded" in kinds
                completed = frames[-1].data
                assert completed["deployment_id"] == dep["id"] and completed["url"] == dep["public_url"]
                uploading = next(f for f in frames if f.event == "deployment.publish.uploading")
                assert uploading.data["size_bytes"] > 0 and all(f.id for f in frames)
                failed = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/none")
                assert failed.status_code == 422
                frames = await stream.frames_until("deployment.publish.failed")
                assert frames[-1].data["error_code"] == "EMPTY_ARTIFACT"
        v1 = first.json()["data"]["version"]["id"]
        await exec_in(api, owner, sandbox["id"], "printf two > /workspace/s/index.html")
        second = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/s")
        assert second.status_code == 200
        rolled = await api.request("POST", f"{API}/deployments/{dep['id']}/rollback", key=owner.key, json={"version_id": v1})
        assert rolled.status_code == 200

        def types() -> list[str]:
            return [r.json["type"] for r in receiver.requests]

        await receiver.wait_for(lambda: types().count("deployment.succeeded") == 2 and "deployment.failed" in types() and "deployment.rollback" in types(), timeout=30)
    for received in receiver.requests:
        verify_signatures(secret, received)
        assert received.json["data"]["deployment_id"] == dep["id"]
    rollback = next(r.json for r in receiver.requests if r.json["type"] == "deployment.rollback")
    assert rollback["data"]["version_id"] == v1
    assert rollback["data"]["previous_version_id"] == second.json()["data"]["version"]["id"]

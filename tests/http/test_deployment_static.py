"""Static publishes end to end (contract §12): a real sandbox, real packing from its
root, the blob store, and the preview router serving the versions."""

from __future__ import annotations

import hashlib
import importlib
from typing import Any

import pytest

from corral.actors.deployments import deployment_host, store
from tests.http.deploy_support import (
    deployment,
    exec_in,
    get_site,
    new_sandbox,
    publish,
    router,
    site_host,
)
from tests.support import API, Api, Tenant, assert_error

pytestmark = pytest.mark.slow
publish_module = importlib.import_module("corral.actors.deployments.publish")  # the package exports the function `publish`

SITE = (
    "mkdir -p /workspace/site/docs /workspace/site/img && cd /workspace/site"
    " && printf '<h1>{text}</h1>' > index.html && printf 'body{{color:red}}' > style.css"
    " && printf 'docs' > docs/index.html && printf 'let a=1;' > app.js && printf '\\x89PNG' > img/logo.png"
    " && printf '{{\"a\":1}}' > data.json"
)


async def site(api: Api, owner: Tenant, text: str) -> dict[str, Any]:
    sandbox = await new_sandbox(api, owner)
    await exec_in(api, owner, sandbox["id"], SITE.format(text=text))
    return sandbox


async def test_static_publish_serve_change_rollback_promote(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await site(api, owner, "one")
    dep = await deployment(api, owner)
    slug = dep["slug"]
    assert (await get_site(api, slug)).status_code == 404  # nothing published yet

    first = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site")
    assert first.status_code == 200, first.text
    body = first.json()["data"]
    assert body["promoted"] is True
    version = body["version"]
    assert version["kind"] == "static" and version["state"] == "ready" and version["version_number"] == 1
    assert version["id"].startswith("ver_")
    assert len(version["artifact_sha256"]) == 64 and version["artifact_uri"] == f"blob://sha256/{version['artifact_sha256']}"
    assert version["artifact_manifest"]["file_count"] == 6
    paths = [f["path"] for f in version["artifact_manifest"]["files"]]
    assert paths == sorted(paths) and "index.html" in paths and "docs/index.html" in paths
    assert body["deployment"]["active_version_id"] == version["id"]
    assert body["deployment"]["state"] == "running"
    assert body["deployment"]["public_url"] == dep["public_url"]
    assert body["services"][0]["type"] == "static_web" and body["services"][0]["state"] == "healthy"
    assert version["url"].startswith(f"http://v1-{slug}.")

    page = await get_site(api, slug)
    assert page.status_code == 200 and page.text == "<h1>one</h1>"
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    etag = page.headers["etag"]
    index_sha = next(f["sha256"] for f in version["artifact_manifest"]["files"] if f["path"] == "index.html")
    assert etag == f'"{index_sha}"'
    assert (await get_site(api, slug, "/", **{"If-None-Match": etag})).status_code == 304
    assert (await get_site(api, slug, "/", **{"If-None-Match": '"other"'})).status_code == 200
    types = {
        "/style.css": "text/css; charset=utf-8", "/app.js": "text/javascript; charset=utf-8", "/img/logo.png": "image/png",
        "/data.json": "application/json; charset=utf-8",
    }
    for path, content_type in types.items():
        response = await get_site(api, slug, path)
        assert response.status_code == 200 and response.headers["content-type"] == content_type, path
    assert (await get_site(api, slug, "/docs/")).text == "docs"
    assert (await get_site(api, slug, "/docs")).text == "docs"
    assert (await get_site(api, slug, "/missing.html")).status_code == 404
    assert (await get_site(api, slug, "/../../etc/passwd")).status_code == 404

    # Changed and republished: version 2 serves, version 1 keeps its own URL.
    await exec_in(api, owner, sandbox["id"], "printf '<h1>two</h1>' > /workspace/site/index.html")
    second = (await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site")).json()["data"]
    assert second["version"]["version_number"] == 2 and second["promoted"] is True
    assert (await get_site(api, slug)).text == "<h1>two</h1>"
    assert (await get_site(api, slug, version=1)).text == "<h1>one</h1>"
    v1 = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions/{version['id']}", key=owner.key)).json()["data"]
    assert v1["state"] == "archived" and v1["active"] is False

    # A staging publish leaves production alone; promote then switches it.
    await exec_in(api, owner, sandbox["id"], "printf '<h1>three</h1>' > /workspace/site/index.html")
    staged = (await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site", environment="staging")).json()["data"]
    assert staged["promoted"] is False and staged["version"]["environment"] == "staging"
    assert staged["deployment"]["active_version_id"] == second["version"]["id"]
    assert (await get_site(api, slug)).text == "<h1>two</h1>"
    assert (await get_site(api, slug, version=3)).text == "<h1>three</h1>"
    promoted = await api.request("POST", f"{API}/deployments/{dep['id']}/versions/{staged['version']['id']}/promote", key=owner.key)
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["data"]["deployment"]["active_version_id"] == staged["version"]["id"]
    assert (await get_site(api, slug)).text == "<h1>three</h1>"

    # Rollback to version 1 (archived, still bootable).
    rolled = await api.request("POST", f"{API}/deployments/{dep['id']}/rollback", key=owner.key, json={"version_id": version["id"]})
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["data"]["version"]["state"] == "ready"
    assert (await get_site(api, slug)).text == "<h1>one</h1>"

    # Identical content: the same artifact.
    await exec_in(api, owner, sandbox["id"], "printf '<h1>one</h1>' > /workspace/site/index.html")
    again = (await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site", environment="preview")).json()["data"]
    assert again["version"]["artifact_sha256"] == version["artifact_sha256"]
    assert again["version"]["source_sha256"] == version["source_sha256"]

    listed = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions?limit=2", key=owner.key)).json()
    assert [v["version_number"] for v in listed["data"]] == [4, 3]
    assert listed["data"][0]["artifact_manifest"] == {"file_count": 6, "total_bytes": version["artifact_manifest"]["total_bytes"]}
    rest = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions?cursor={listed['next_cursor']}", key=owner.key)).json()
    assert [v["version_number"] for v in rest["data"]] == [2, 1] and rest["next_cursor"] is None
    archived = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions?state=archived", key=owner.key)).json()["data"]
    assert {v["version_number"] for v in archived} == {2, 3}

    types_seen = [e.type for e in await api.platform.events.list("deployment", dep["id"])]
    for expected in ("deployment.publish.queued", "deployment.publish.building", "deployment.publish.uploading",
                     "deployment.publish.promoting", "deployment.publish.completed", "deployment.succeeded", "deployment.rollback"):
        assert expected in types_seen, expected

    # Deleted: every URL answers 404.
    deleted = await api.request("DELETE", f"{API}/deployments/{dep['id']}", key=owner.key)
    assert deleted.status_code == 200
    assert (await get_site(api, slug)).status_code == 404
    assert (await get_site(api, slug, version=1)).status_code == 404


async def test_failed_publishes_keep_production(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await site(api, owner, "good")
    await exec_in(api, owner, sandbox["id"], "mkdir -p /workspace/empty /workspace/links && ln -s /etc/shadow /workspace/links/shadow && ln -s / /workspace/links/root")
    dep = await deployment(api, owner)
    good = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site")
    assert good.status_code == 200

    empty = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/empty")
    error = assert_error(empty, 422, "EMPTY_ARTIFACT")
    failed_id = error["details"]["version_id"]
    version = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions/{failed_id}", key=owner.key)).json()["data"]
    assert version["state"] == "failed" and version["error"]["code"] == "EMPTY_ARTIFACT"
    # Links are never followed: a directory of nothing but symlinks is empty too.
    assert_error(await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/links"), 422, "EMPTY_ARTIFACT")
    assert_error(await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/links/root/etc"), 422, "EMPTY_ARTIFACT")
    assert_error(await publish(api, owner, dep["id"], sandbox["id"], output_path="/nowhere"), 422, "EMPTY_ARTIFACT")

    broken = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site", build_command="echo compiling; echo oops >&2; exit 3")
    error = assert_error(broken, 422, "BUILD_FAILED")
    assert "oops" in error["details"]["log"] and error["details"]["version_id"].startswith("ver_")
    assert (await get_site(api, dep["slug"])).text == "<h1>good</h1>"
    failed = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions?state=failed", key=owner.key)).json()["data"]
    assert len(failed) == 5
    assert "deployment.failed" in [e.type for e in await api.platform.events.list("deployment", dep["id"])]

    not_ready = await api.request("POST", f"{API}/deployments/{dep['id']}/versions/{failed_id}/promote", key=owner.key)
    assert_error(not_ready, 409, "VERSION_NOT_READY")
    assert_error(await api.request("POST", f"{API}/deployments/{dep['id']}/rollback", key=owner.key, json={"version_id": failed_id}), 409, "VERSION_NOT_READY")

    built = await publish(
        api, owner, dep["id"], sandbox["id"], output_path="/workspace/dist",
        build_command="mkdir -p dist && printf '<p>built</p>' > dist/index.html",
    )
    assert built.status_code == 200, built.text
    assert (await get_site(api, dep["slug"])).text == "<p>built</p>"


async def test_publish_errors(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await site(api, owner, "x")
    dep = await deployment(api, owner)
    missing = await api.request("POST", f"{API}/deployments/{dep['id']}/publish", key=owner.key, json={})
    assert_error(missing, 400, "MISSING_PARAM")
    for bad in ({"kind": "docker"}, {"output_path": "relative"}, {"port": 70000, "run_command": "x"}, {"kind": "service"},
                {"health_check_path": "nope"}):
        response = await publish(api, owner, dep["id"], sandbox["id"], **bad)
        assert_error(response, 422, "VALIDATION_ERROR")
    unknown = await publish(api, owner, dep["id"], "00000000-0000-4000-8000-000000000000")
    assert_error(unknown, 404, "NOT_FOUND")
    stopped = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/stop", key=owner.key)
    assert stopped.status_code == 200
    assert_error(await publish(api, owner, dep["id"], sandbox["id"]), 409, "SANDBOX_NOT_RUNNING")
    other = await api.create_tenant()
    foreign = await api.request(
        "POST", f"{API}/sandboxes/{sandbox['id']}/publish", key=other.key, json={"name": "steal"}
    )
    assert_error(foreign, 404, "NOT_FOUND")
    no_target = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/publish", key=owner.key, json={})
    assert_error(no_target, 400, "MISSING_PARAM")


async def test_sandbox_publish_into_a_new_deployment_idempotently(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await site(api, owner, "from sandbox")
    url = f"{API}/sandboxes/{sandbox['id']}/publish"
    headers = {"Idempotency-Key": "pub-1"}
    body = {"name": "From Sandbox", "output_path": "/workspace/site"}
    first = await api.request("POST", url, key=owner.key, json=body, headers=headers, timeout=300)
    assert first.status_code == 200, first.text
    again = await api.request("POST", url, key=owner.key, json=body, headers=headers, timeout=300)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    deployments = (await api.request("GET", f"{API}/deployments", key=owner.key)).json()["data"]
    assert len(deployments) == 1 and deployments[0]["project_id"] == sandbox["project_id"]
    dep_id = first.json()["data"]["deployment"]["id"]
    into = await api.request("POST", url, key=owner.key, json={"deployment_id": dep_id, "output_path": "/workspace/site", "environment": "staging"}, timeout=300)
    assert into.status_code == 200, into.text
    assert into.json()["data"]["version"]["version_number"] == 2
    slug = deployments[0]["slug"]
    assert (await get_site(api, slug)).text == "<h1>from sandbox</h1>"


async def test_limits_environments_replays_and_the_host_lookup(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await site(api, owner, "limits")
    dep = await deployment(api, owner)
    for port in (0, 65536):
        assert_error(await publish(api, owner, dep["id"], sandbox["id"], run_command="x", port=port), 422, "VALIDATION_ERROR")
    at_max = await publish(api, owner, dep["id"], sandbox["id"], kind="static", port=65535, output_path="/workspace/site", environment="staging")
    assert at_max.status_code == 200, at_max.text
    version = at_max.json()["data"]["version"]
    assert version["runtime_port"] is None  # a static version has no port
    long_env = await publish(api, owner, dep["id"], sandbox["id"], environment="e" * 64)
    assert_error(long_env, 422, "VALIDATION_ERROR")

    sites = api.platform.deployment_sites
    assert sites is not None
    domain = api.platform.settings.public_domain
    assert not sites.live_deployment_host(f"{dep['slug']}.{domain}")  # nothing in production yet
    assert sites.live_deployment_host(f"v1-{dep['slug']}.{domain}")
    assert not sites.live_deployment_host(f"v2-{dep['slug']}.{domain}")
    assert not sites.live_deployment_host(f"{dep['slug']}.elsewhere.test")

    url = f"{API}/deployments/{dep['id']}/versions/{version['id']}/promote"
    headers = {"Idempotency-Key": "promote-1"}
    first = await api.request("POST", url, key=owner.key, json={"environment": "production"}, headers=headers)
    assert first.status_code == 200, first.text
    again = await api.request("POST", url, key=owner.key, json={"environment": "production"}, headers=headers)
    assert again.headers["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert sites.live_deployment_host(f"{dep['slug']}.{domain}".upper() + ".")
    record = await store.load(api.platform.db, dep["id"])
    assert record is not None and deployment_host(api.platform.settings, record) == f"{dep['slug']}.{domain}"
    relabel = await api.request("POST", url, key=owner.key, json={"environment": "qa"})
    assert relabel.status_code == 200 and relabel.json()["data"]["version"]["environment"] == "qa"
    assert_error(await api.request("POST", url, key=owner.key, json={"environment": ""}), 422, "VALIDATION_ERROR")
    await api.request("DELETE", f"{API}/deployments/{dep['id']}", key=owner.key)
    assert not sites.live_deployment_host(f"{dep['slug']}.{domain}")


async def test_a_blob_store_that_cannot_write_is_503(runtime_api: Api, owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    api = runtime_api
    sandbox = await site(api, owner, "x")
    dep = await deployment(api, owner)

    async def full(path: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(api.platform.blobs, "put_file", full)
    error = assert_error(await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site"), 503, "SERVICE_UNAVAILABLE")
    version = (await api.request("GET", f"{API}/deployments/{dep['id']}/versions/{error['details']['version_id']}", key=owner.key)).json()["data"]
    assert version["state"] == "failed"
    assert not list((api.platform.settings.data_dir / "tmp").iterdir())  # the packed tar did not stay behind


async def test_large_files_are_streamed_whole(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await site(api, owner, "big")
    await exec_in(api, owner, sandbox["id"], "head -c 3000000 /dev/urandom > /workspace/site/big.bin")
    digest = (await exec_in(api, owner, sandbox["id"], "sha256sum /workspace/site/big.bin"))["stdout"].split()[0]
    dep = await deployment(api, owner)
    assert (await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site")).status_code == 200
    response = await get_site(api, dep["slug"], "/big.bin")
    assert response.status_code == 200 and response.headers["content-length"] == "3000000"
    assert hashlib.sha256(response.content).hexdigest() == digest
    assert response.headers["etag"] == f'"{digest}"'
    async with router(api) as client:
        head = await client.head("/big.bin", headers={"Host": site_host(api, dep["slug"])})
        assert head.status_code == 200 and head.headers["content-length"] == "3000000" and head.content == b""
        again = await client.get("/index.html", headers={"Host": site_host(api, dep["slug"])})  # same connection, kept alive
        assert again.text == "<h1>big</h1>"


async def test_a_build_past_its_timeout_fails(runtime_api: Api, owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish_module, "BUILD_TIMEOUT", 2)
    api = runtime_api
    sandbox = await site(api, owner, "slow")
    dep = await deployment(api, owner)
    slow = await publish(api, owner, dep["id"], sandbox["id"], output_path="/workspace/site", build_command="echo starting; sleep 30")
    error = assert_error(slow, 422, "BUILD_FAILED")
    assert "timed out after 2 s" in error["message"] and "starting" in error["details"]["log"]

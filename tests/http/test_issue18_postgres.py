"""Profiles, templates, browser tokens and branding on PostgreSQL (the other tests use SQLite)."""

from __future__ import annotations

import uuid

import pytest
import trio

from tests.pg_server import create_database
from tests.support import API, RUNTIME_SETTINGS, assert_error, running_server


async def test_the_whole_surface_on_postgresql(
    runtime_host: None, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    database_url = create_database(postgres_url, f"issue18_{uuid.uuid4().hex[:12]}")
    async with running_server(tmp_path_factory.mktemp("corral"), database_url, **RUNTIME_SETTINGS) as api:
        try:
            tenant = await api.create_tenant()
            key = tenant.key
            branding = await api.request("PUT", f"{API}/tenant/branding", key=key, json={"display_name": "PG", "primary_color": "#010203"})
            assert branding.status_code == 200 and branding.json()["data"]["display_name"] == "PG"

            profile = await api.request(
                "POST", f"{API}/agent-runtime-profiles", key=key,
                json={"name": "pg", "provider": "claude", "env": {"A": "secret-a"}, "is_default": True},
            )
            assert profile.status_code == 201, profile.text
            listed = await api.request("GET", f"{API}/agent-runtime-profiles", key=key)
            assert [p["default_for"] for p in listed.json()["data"]] == [["sandbox", "computer"]]
            patched = await api.request("PATCH", f"{API}/agent-runtime-profiles/pg", key=key, json={"env": {"B": "b"}})
            assert patched.status_code == 200 and patched.json()["data"]["env_keys"] == ["B"]

            created = await api.request("POST", f"{API}/sandbox-templates", key=key, json={"name": "pg-tpl", "setup": ["echo pg > /opt/pg"]})
            assert created.status_code == 201, created.text
            build_id = created.json()["data"]["build"]["id"]
            with trio.fail_after(300):
                while (await api.request("GET", f"{API}/sandbox-template-builds/{build_id}", key=key)).json()["data"]["status"] != "ready":
                    await trio.sleep(0.3)
            lines = (await api.request("GET", f"{API}/sandbox-template-builds/{build_id}/logs", key=key)).json()["data"]["lines"]
            assert lines[-1]["line"].startswith("build ready")
            sandbox = await api.request("POST", f"{API}/sandboxes", key=key, json={"template_id": "pg-tpl"})
            assert sandbox.status_code == 201, sandbox.text
            sid = sandbox.json()["data"]["id"]

            minted = await api.request("POST", f"{API}/browser-tokens", key=key, json={"sandbox_id": sid})
            assert minted.status_code == 201
            token = minted.json()["data"]["token"]
            ran = await api.request("POST", f"{API}/sandboxes/{sid}/exec", key=token, json={"command": "cat /opt/pg"})
            assert ran.status_code == 200 and ran.json()["stdout"] == "pg\n"
            assert_error(await api.request("GET", f"{API}/sandboxes", key=token), 403, "FORBIDDEN")
        finally:
            driver = await api.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)

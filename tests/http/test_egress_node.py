"""The node runs the egress proxy: a sandbox created through the API is behind it from boot."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.net.egress import AuditEntry
from tests.net.egress_support import INTERNET, Recording, internet
from tests.support import RUNTIME_SETTINGS, Api, Tenant, running_server

from .test_sandboxes import create, run


@pytest.fixture
async def egress_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> AsyncIterator[Api]:
    async with internet(tmp_path) as bundle:
        settings = {**RUNTIME_SETTINGS, "egress_allowed_destinations": (f"{INTERNET}/32",), "ca_bundle": bundle}
        async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
            try:
                yield api
            finally:
                driver = await api.platform.runtime.driver()
                for info in await driver.instances():
                    await driver.destroy(info.id)


async def test_a_sandbox_goes_through_the_node_egress_proxy(egress_api: Api) -> None:
    proxy = egress_api.platform.egress_proxy
    assert proxy is not None and proxy.bound_port == egress_api.platform.settings.egress_port
    hooks = Recording()
    proxy.hooks = hooks
    tenant: Tenant = await egress_api.create_tenant()
    sandbox = await create(egress_api, tenant)
    sid = sandbox["id"]
    printed = await run(egress_api, tenant, sid, 'printf %s "$HTTPS_PROXY"')
    assert printed["stdout"].endswith(f":{proxy.config.port}")
    assert Path(egress_api.platform.settings.data_dir, "egress-ca", "ca.crt").exists()

    result = await run(egress_api, tenant, sid, f"curl -sS --noproxy '*' --max-time 10 https://{INTERNET}/from-sandbox")
    assert result["exit_code"] == 0, result
    assert json.loads(result["stdout"]).get("target") == "/from-sandbox", result["stdout"]
    await hooks.wait(1)
    entry: AuditEntry = hooks.entries[-1]
    assert entry.info.mode == "transparent" and entry.info.scheme == "https" and entry.status_code == 200

    # private destinations other than the allowed one are refused
    refused = await run(egress_api, tenant, sid, "curl -sS --max-time 10 http://169.254.169.254/latest/meta-data/")
    assert json.loads(refused["stdout"])["error"]["code"] == "EGRESS_DENIED"

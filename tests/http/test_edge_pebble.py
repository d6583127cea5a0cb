"""The TLS edge against a real ACME server: Pebble (Debian's `pebble`), with a test-only CA.

Pebble validates the HTTP-01 (or TLS-ALPN-01) challenge by connecting to the domain,
resolved through the test DNS server, on the edge's own ports; Caddy trusts Pebble's
HTTPS through `CORRAL_ACME_CA_ROOTS`; the served certificate chains to Pebble's root."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme

from tests.dns_server import DnsServer
from tests.http.domain_support import API, add_domain, new_computer, verify
from tests.http.edge_support import edge_server, https_get, names_in, served_certificate
from tests.support import Api, free_port

assert shutil.which("pebble") is not None, "Debian's pebble is installed by tools/install --test"


@contextlib.asynccontextmanager
async def pebble(
    workdir: Path, ca: trustme.CA, dns: DnsServer, listen: int, http_port: int, tls_port: int
) -> AsyncIterator[tuple[str, str]]:
    """Pebble on loopback port `listen`: (its ACME directory URL, its management URL)."""
    management = free_port()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(workdir / "pebble.crt"))
    cert.private_key_pem.write_to_path(str(workdir / "pebble.key"))
    (workdir / "pebble.json").write_text(json.dumps({"pebble": {
        "listenAddress": f"127.0.0.1:{listen}",
        "managementListenAddress": f"127.0.0.1:{management}",
        "certificate": str(workdir / "pebble.crt"),
        "privateKey": str(workdir / "pebble.key"),
        "httpPort": http_port,
        "tlsPort": tls_port,
        "ocspResponderURL": "",
        "externalAccountBindingRequired": False,
    }}))
    env = {**os.environ, "PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0"}
    command = ["pebble", "-config", str(workdir / "pebble.json"), "-dnsserver", dns.address]
    with open(workdir / "pebble.log", "wb") as log:
        async with trio.open_nursery() as nursery:
            process = await nursery.start(
                lambda task_status: trio.run_process(command, env=env, stdout=log, stderr=log, check=False, task_status=task_status)
            )
            with trio.fail_after(20):
                while True:
                    with contextlib.suppress(OSError):
                        await (await trio.open_tcp_stream("127.0.0.1", listen)).aclose()
                        break
                    await trio.sleep(0.05)
            yield f"https://127.0.0.1:{listen}/dir", f"https://127.0.0.1:{management}"
            process.terminate()
            nursery.cancel_scope.cancel()


@pytest.fixture
async def setup(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("pebble")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(workdir / "pebble-ca.pem"))
    acme_port = free_port()
    https_port, http_port = free_port(), free_port()
    settings = {
        "acme_ca": f"https://127.0.0.1:{acme_port}/dir",
        "acme_ca_roots": str(workdir / "pebble-ca.pem"),
        "edge_https_port": https_port,
        "edge_http_port": http_port,
    }
    async with edge_server(tmp_path_factory, **settings) as (api, dns):
        yield {"api": api, "dns": dns, "ca": ca, "workdir": workdir, "acme_port": acme_port}


async def test_pebble_issues_the_certificate_of_a_verified_domain(setup: dict[str, Any]) -> None:
    api: Api = setup["api"]
    dns: DnsServer = setup["dns"]
    settings = api.platform.settings
    tenant = await api.create_tenant()
    computer = await new_computer(api, tenant)
    fqdn = "shop.pebble-test.example"
    domain = await add_domain(api, tenant, computer["id"], fqdn)
    dns.records[fqdn] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).status_code == 200
    # from now on the name resolves to this machine (where the edge listens) for Pebble's checks
    dns.addresses[fqdn] = ["127.0.0.1"]

    workdir: Path = setup["workdir"]
    ca: trustme.CA = setup["ca"]
    async with pebble(workdir, ca, dns, setup["acme_port"], settings.edge_http_port, settings.edge_https_port) as (directory, management):
        assert directory == settings.acme_ca
        trust_pebble = ssl.create_default_context()
        ca.configure_trust(trust_pebble)
        async with httpx.AsyncClient(verify=trust_pebble, timeout=10) as client:
            root_pem = (await client.get(f"{management}/roots/0")).text
        (workdir / "pebble-root.pem").write_text(root_pem)
        roots = ssl.create_default_context(cafile=str(workdir / "pebble-root.pem"))

        with trio.fail_after(120):
            response = await https_get(api, fqdn, roots)
        assert response.status_code == 401, response.text  # the computer's desktop asks for its token
        assert response.headers["X-Corral-Preview-Error"] == "token_required"
        cert = await served_certificate(api, fqdn, roots)
        assert names_in(cert) == {fqdn}
        assert "Pebble" in " ".join(value for rdn in cert["issuer"] for _, value in rdn)

    with trio.fail_after(10):
        while True:
            record = (await api.request("GET", f"{API}/custom-domains/{domain['id']}", key=tenant.key)).json()["data"]
            if record["status"] == "active":
                break
            await trio.sleep(0.05)
    assert record["tls_issued_at"] is not None

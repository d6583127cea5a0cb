"""The TLS edge end to end (contract §12): Caddy from Debian's package with on-demand TLS
asking `GET /tls/ask`, in front of the preview router, here with Caddy's internal CA.
A custom domain gets no certificate until verified; then the first HTTPS request gets
one, reaches the computer's desktop through the router and makes the domain `active`."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from corral.net.edge import EDGE_HEADER, edge_config, internal_root
from tests.dns_server import DnsServer
from tests.http.computer_support import call, wait_for
from tests.http.domain_support import (
    API,
    SERVICE_DOMAIN,
    add_domain,
    new_computer,
    router_get,
    verify,
)
from tests.http.edge_support import (
    caddy_pids,
    edge_server,
    https_get,
    issuer_of,
    names_in,
    served_certificate,
    wss_first_frame,
)
from tests.support import Api, Tenant


@pytest.fixture
async def server(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, DnsServer]]:
    async with edge_server(tmp_path_factory, acme_ca="internal") as found:
        yield found


async def caddy_root(api: Api) -> ssl.SSLContext:
    """Trust in Caddy's internal CA only (its root appears in the edge's storage)."""
    root = internal_root(edge_config(api.platform.settings))
    with trio.fail_after(30):
        while not root.exists():
            await trio.sleep(0.1)
    context = ssl.create_default_context(cafile=str(root))
    return context


async def domain_status(api: Api, tenant: Tenant, domain_id: str) -> dict[str, Any]:
    response = await api.request("GET", f"{API}/custom-domains/{domain_id}", key=tenant.key)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()["data"]
    return found


async def test_a_verified_domain_gets_a_certificate_and_the_desktop(server: tuple[Api, DnsServer]) -> None:
    api, dns = server
    tenant = await api.create_tenant()
    computer = await new_computer(api, tenant)
    domain = await add_domain(api, tenant, computer["id"], "desk.edge-test.example")
    roots = await caddy_root(api)

    # pending: the edge may not get a certificate for it, so the handshake fails
    with pytest.raises((httpx.ConnectError, ssl.SSLError, trio.BrokenResourceError)):
        await https_get(api, "desk.edge-test.example", roots)

    dns.records["desk.edge-test.example"] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).status_code == 200
    assert (await domain_status(api, tenant, domain["id"]))["tls_issued_at"] is None

    first = await https_get(api, "desk.edge-test.example", roots)
    # the computer's desktop answers through the edge (it asks for its stream token)
    assert first.status_code == 401, first.text
    assert first.headers["X-Corral-Preview-Error"] == "token_required"
    assert computer["name"] in first.text
    cert = await served_certificate(api, "desk.edge-test.example", roots)
    assert names_in(cert) == {"desk.edge-test.example"}
    assert "Caddy Local Authority" in issuer_of(cert)

    with trio.fail_after(10):
        while (record := await domain_status(api, tenant, domain["id"]))["status"] != "active":
            await trio.sleep(0.05)
    assert record["tls_issued_at"] and record["verified_at"] and record["tls_issued_at"] >= record["verified_at"]

    # the real desktop: with the computer's stream token, noVNC's page over HTTPS
    await wait_for(api, tenant, computer["id"], "running", timeout=180)
    token = (await call(api, tenant, "POST", computer["id"], "/stream-token")).json()["token"]
    traded = await https_get(api, "desk.edge-test.example", roots, f"/vnc.html?auth={token}")
    assert traded.status_code == 302, traded.text
    cookie = traded.headers["set-cookie"].split(";")[0]
    with trio.fail_after(30):  # the router's view of the computer is refreshed every 2 s
        while (page := await https_get(api, "desk.edge-test.example", roots, "/vnc.html", Cookie=cookie)).status_code == 503:
            await trio.sleep(0.2)
    assert page.status_code == 200, page.text
    assert "noVNC" in page.text
    # the desktop's RFB stream: a WebSocket through Caddy and the router, over TLS
    status, first_frame = await wss_first_frame(api, "desk.edge-test.example", roots, "/stream", cookie)
    assert status == 101 and first_frame.startswith(b"RFB "), (status, first_frame)

    # removed: the edge still holds the certificate, but the router answers 404
    assert (await api.request("DELETE", f"{API}/custom-domains/{domain['id']}", key=tenant.key)).status_code == 200
    gone = await https_get(api, "desk.edge-test.example", roots)
    assert gone.status_code == 404


async def test_resource_hosts_and_unknown_names(server: tuple[Api, DnsServer]) -> None:
    api, _ = server
    tenant = await api.create_tenant()
    computer = await new_computer(api, tenant)
    roots = await caddy_root(api)
    host = f"{computer['slug']}.{SERVICE_DOMAIN}"
    served = await https_get(api, host, roots)
    assert served.status_code == 401 and served.headers["X-Corral-Preview-Error"] == "token_required"
    assert names_in(await served_certificate(api, host, roots)) == {host}
    for name in (f"nobody.{SERVICE_DOMAIN}", "unknown.example.org"):
        with pytest.raises((httpx.ConnectError, ssl.SSLError, trio.BrokenResourceError)):
            await https_get(api, name, roots)


async def test_http_redirects_to_https(server: tuple[Api, DnsServer]) -> None:
    api, _ = server
    port = api.platform.settings.edge_http_port
    async with httpx.AsyncClient(timeout=10, follow_redirects=False) as client:
        response = await client.get(f"http://127.0.0.1:{port}/some/path?q=1", headers={"Host": "desk.example.org"})
    assert response.status_code in (301, 308), response.text
    assert response.headers["location"].startswith("https://desk.example.org")


async def test_only_the_edge_can_make_a_domain_active(server: tuple[Api, DnsServer]) -> None:
    """A client that reaches the router directly cannot fake the edge: a wrong secret or
    plain HTTP changes nothing, and the header never reaches an app."""
    api, dns = server
    tenant = await api.create_tenant()
    computer = await new_computer(api, tenant)
    domain = await add_domain(api, tenant, computer["id"], "forged.edge-test.example")
    dns.records["forged.edge-test.example"] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).status_code == 200
    secret = api.platform.edge_secret
    for headers in ({EDGE_HEADER: "guess", "X-Forwarded-Proto": "https"}, {EDGE_HEADER: secret, "X-Forwarded-Proto": "http"}):
        response = await router_get(api, "forged.edge-test.example", **headers)
        assert response.status_code == 401
    await trio.sleep(0.3)
    assert (await domain_status(api, tenant, domain["id"]))["status"] == "verified"
    assert secret and not Path(api.platform.settings.data_dir, "edge-secret").stat().st_mode & 0o077


async def test_caddy_is_restarted_when_it_dies(server: tuple[Api, DnsServer]) -> None:
    api, _ = server
    tenant = await api.create_tenant()
    computer = await new_computer(api, tenant)
    roots = await caddy_root(api)
    host = f"{computer['slug']}.{SERVICE_DOMAIN}"
    assert (await https_get(api, host, roots)).status_code == 401
    [pid] = caddy_pids(api)
    os.kill(pid, signal.SIGKILL)
    with trio.fail_after(30):
        while True:
            with contextlib.suppress(httpx.HTTPError, ssl.SSLError, OSError):
                if (await https_get(api, host, roots)).status_code == 401:
                    break
            await trio.sleep(0.1)
    assert caddy_pids(api) and caddy_pids(api) != [pid]

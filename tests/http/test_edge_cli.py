"""`corral edge` as its own process in front of a node started separately: it shares the
node's data directory (the edge secret), asks the node's `tls/ask`, and serves its hosts."""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from corral.cli import build_parser
from corral.config import Settings
from corral.net.edge import edge_config, internal_root
from tests.dns_server import DnsServer
from tests.http.domain_support import (
    SERVICE_DOMAIN,
    add_domain,
    domain_server,
    new_computer,
    verify,
)
from tests.http.edge_support import caddy_pids, https_get, names_in, served_certificate
from tests.support import Api, free_port


@pytest.fixture
async def server(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Api, DnsServer]]:
    async with domain_server(tmp_path_factory, edge_https_port=free_port(), edge_http_port=free_port()) as found:
        yield found


@contextlib.asynccontextmanager
async def corral_edge(api: Api) -> AsyncIterator[trio.Process]:
    settings = api.platform.settings
    command = [
        sys.executable, "-m", "corral", "edge", "--port", str(settings.port), "--preview-port", str(settings.preview_port),
        "--data-dir", str(settings.data_dir), "--https-port", str(settings.edge_https_port),
        "--http-port", str(settings.edge_http_port),
    ]
    env = {**os.environ, "CORRAL_ACME_CA": "internal"}
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            lambda task_status: trio.run_process(command, env=env, check=False, task_status=task_status)
        )
        with trio.fail_after(60):
            while True:
                with contextlib.suppress(OSError):
                    await (await trio.open_tcp_stream("127.0.0.1", settings.edge_https_port)).aclose()
                    break
                assert process.returncode is None, "corral edge exited"
                await trio.sleep(0.1)
        try:
            yield process
        finally:
            process.terminate()
            with trio.move_on_after(10):
                await process.wait()
            nursery.cancel_scope.cancel()


async def test_corral_edge_serves_a_nodes_hosts(server: tuple[Api, DnsServer]) -> None:
    api, dns = server
    tenant = await api.create_tenant()
    computer = await new_computer(api, tenant)
    domain = await add_domain(api, tenant, computer["id"], "cli.edge-test.example")
    dns.records["cli.edge-test.example"] = domain["verification_target"]
    assert (await verify(api, tenant, domain["id"])).status_code == 200
    async with corral_edge(api):
        root = internal_root(edge_config(api.platform.settings))
        with trio.fail_after(30):
            while not root.exists():
                await trio.sleep(0.1)
        roots = ssl.create_default_context(cafile=str(root))
        for host in ("cli.edge-test.example", f"{computer['slug']}.{SERVICE_DOMAIN}"):
            response = await https_get(api, host, roots)
            assert response.status_code == 401 and response.headers["X-Corral-Preview-Error"] == "token_required"
            assert names_in(await served_certificate(api, host, roots)) == {host}
    assert caddy_pids(api) == []  # SIGTERM to `corral edge` stops its Caddy too
    with trio.fail_after(10):
        while (await api.request("GET", f"/api/v1/custom-domains/{domain['id']}", key=tenant.key)).json()["data"]["status"] != "active":
            await trio.sleep(0.05)


def test_serve_takes_the_edge_options() -> None:
    args = build_parser().parse_args(["serve", "--edge", "--https-port", "8443", "--http-port", "8880"])
    settings = Settings.from_args(args)
    assert args.edge and (settings.edge_https_port, settings.edge_http_port) == (8443, 8880)
    defaults = Settings.from_args(build_parser().parse_args(["serve"]))
    assert (defaults.edge_https_port, defaults.edge_http_port) == (443, 80)


def test_serve_edge_without_caddy_says_so(tmp_path: Path) -> None:
    """No `caddy` on PATH: `corral serve --edge` exits 2 with the reason, before starting."""
    env = {**os.environ, "PATH": str(tmp_path), "CORRAL_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "corral", "serve", "--edge", "--port", str(free_port())], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "caddy is not installed" in done.stderr
    edge = subprocess.run([sys.executable, "-m", "corral", "edge"], env=env, capture_output=True, text=True, timeout=60)
    assert edge.returncode == 2 and "caddy is not installed" in edge.stderr

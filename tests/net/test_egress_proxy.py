"""The egress proxy in explicit mode on loopback: HTTP, HTTPS through CONNECT with the
node's CA, upstream verification, hooks, and the SSRF table."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from corral.net.egress import (
    DestinationPolicy,
    DestinationRefused,
    EgressCA,
    EgressHooks,
    EgressProxy,
    EgressProxyConfig,
    refusal_reason,
)
from corral.net.egress.destinations import open_checked
from tests.net.egress_support import Recording, echo_server

LOOPBACK = DestinationPolicy.build(False, ["127.0.0.1/32"])


@asynccontextmanager
async def running_proxy(
    tmp_path: Path, *, destinations: DestinationPolicy = LOOPBACK, hooks: EgressHooks | None = None, ca_bundle: str | None = None
) -> AsyncIterator[EgressProxy]:
    ca = EgressCA(tmp_path / "egress-ca")
    proxy = EgressProxy(EgressProxyConfig("127.0.0.1", 0, destinations, ca_bundle=ca_bundle), ca, hooks)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        yield proxy
        nursery.cancel_scope.cancel()


def client(proxy: EgressProxy, **kwargs: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        proxy=f"http://127.0.0.1:{proxy.bound_port}",
        verify=ssl.create_default_context(cafile=str(proxy.ca.cert_path)),
        timeout=10,
        **kwargs,  # type: ignore[arg-type]
    )


def upstream_tls(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    """A server context for 127.0.0.1 from a CA of the test's own, and that CA's file."""
    test_ca = EgressCA(tmp_path / "upstream-ca")
    return test_ca.context_for("127.0.0.1"), str(test_ca.cert_path)


async def test_http_through_the_proxy_reaches_the_server_and_is_recorded(tmp_path: Path) -> None:
    hooks = Recording()
    async with echo_server() as server, running_proxy(tmp_path, hooks=hooks) as proxy, client(proxy) as http:
        for _ in range(2):  # the second request reuses both connections
            response = await http.post(f"http://127.0.0.1:{server.port}/hello?x=1", content=b"abc")
            assert response.status_code == 200
            echoed = response.json()
            assert echoed["target"] == "/hello?x=1"
            assert echoed["body_size"] == 3
            assert "proxy-connection" not in echoed["headers"]
    await hooks.wait(2)
    entry = hooks.entries[0]
    assert (entry.info.method, entry.info.scheme, entry.info.host, entry.info.port) == ("POST", "http", "127.0.0.1", server.port)
    assert entry.info.path == "/hello?x=1" and entry.info.mode == "explicit"
    assert entry.status_code == 200 and entry.bytes_sent == 3 and entry.upstream_address == "127.0.0.1"
    assert len(hooks.entries) == 2


async def test_https_is_terminated_with_the_node_ca_and_verified_upstream(tmp_path: Path) -> None:
    tls, bundle = upstream_tls(tmp_path)
    hooks = Recording()
    async with (
        echo_server(tls=tls) as server,
        running_proxy(tmp_path, hooks=hooks, ca_bundle=bundle) as proxy,
        client(proxy) as http,
    ):
        for _ in range(2):
            response = await http.get(f"https://127.0.0.1:{server.port}/secure")
            assert response.status_code == 200, response.text
            assert response.json()["target"] == "/secure"
    await hooks.wait(2)
    assert [e.info.scheme for e in hooks.entries] == ["https", "https"]
    assert all(e.info.path == "/secure" for e in hooks.entries)


async def test_an_upstream_certificate_the_proxy_cannot_verify_is_refused(tmp_path: Path) -> None:
    tls, _bundle = upstream_tls(tmp_path)
    hooks = Recording()
    async with echo_server(tls=tls) as server, running_proxy(tmp_path, hooks=hooks) as proxy, client(proxy) as http:
        response = await http.get(f"https://127.0.0.1:{server.port}/secure")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "UPSTREAM_TLS_ERROR"
    assert "certificate verify failed" in response.json()["error"]["message"]
    assert server.peers == []  # no request reached it
    assert hooks.entries[-1].decision.rejected_by == "upstream_tls"


async def test_the_instance_only_trusts_the_proxy_with_the_node_ca(tmp_path: Path) -> None:
    tls, bundle = upstream_tls(tmp_path)
    async with (
        echo_server(tls=tls) as server,
        running_proxy(tmp_path, ca_bundle=bundle) as proxy,
        httpx.AsyncClient(proxy=f"http://127.0.0.1:{proxy.bound_port}", timeout=10) as http,
    ):
        with pytest.raises(httpx.ConnectError):
            await http.get(f"https://127.0.0.1:{server.port}/")


async def test_hooks_deny_transform_and_scrub(tmp_path: Path) -> None:
    hooks = Recording(deny=["localhost"], replace=(b"svc-tok-abc", b"real-secret"))
    async with echo_server() as server, running_proxy(tmp_path, hooks=hooks) as proxy, client(proxy) as http:
        response = await http.get(f"http://127.0.0.1:{server.port}/", headers={"Authorization": "Bearer svc-tok-abc"})
        assert response.status_code == 200
        # upstream saw the value; the echo came back with the placeholder in its place
        assert response.json()["headers"]["authorization"] == "Bearer svc-tok-abc"
        await hooks.wait(1)
        assert any("real-secret" in str(e.transforms) for e in hooks.entries) is False
        assert [t.header for t in hooks.entries[-1].transforms] == ["authorization"]
        denied = await http.get(f"http://localhost:{server.port}/")
    assert denied.status_code == 403
    body = denied.json()["error"]
    assert body["code"] == "EGRESS_DENIED" and body["request_id"]
    assert hooks.entries[-1].decision.rejected_by == "rule:test"
    assert len(server.peers) == 1


async def test_upstream_saw_the_substituted_value(tmp_path: Path) -> None:
    """The scrubber turns the echoed value back; without one the upstream's view shows."""

    class NoScrub(Recording):
        def scrub_response(self, info, headers):  # type: ignore[no-untyped-def]
            return headers, None

    hooks = NoScrub(replace=(b"svc-tok-abc", b"real-secret"))
    async with echo_server() as server, running_proxy(tmp_path, hooks=hooks) as proxy, client(proxy) as http:
        response = await http.get(f"http://127.0.0.1:{server.port}/", headers={"Authorization": "Bearer svc-tok-abc"})
    assert response.json()["headers"]["authorization"] == "Bearer real-secret"


FORBIDDEN_ADDRESSES = {
    "127.0.0.1": "loopback",
    "10.1.2.3": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "169.254.1.1": "link-local",
    "169.254.169.254": "metadata",
    "100.64.0.1": "cgnat",
    "0.0.0.0": "unspecified",
    "::1": "loopback",
    "::ffff:127.0.0.1": "ipv4-mapped",
    "::ffff:8.8.8.8": "ipv4-mapped",
    "64:ff9b::a00:1": "nat64",
    "64:ff9b:1::1": "nat64",
    "2002:a00:1::1": "6to4",
    "fc00::1": "private",
    "fd00:ec2::254": "metadata",
    "fe80::1": "link-local",
}


@pytest.mark.parametrize("address", sorted(FORBIDDEN_ADDRESSES))
def test_the_ssrf_table(address: str) -> None:
    assert refusal_reason(address) == FORBIDDEN_ADDRESSES[address]
    with pytest.raises(DestinationRefused):
        DestinationPolicy().check("example", address)
    DestinationPolicy(allow_private=True).check("example", address)


def test_public_addresses_pass() -> None:
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700::1111", "93.184.216.34"):
        assert refusal_reason(ipaddress.ip_address(address)) is None


async def test_the_proxy_refuses_every_forbidden_destination(tmp_path: Path) -> None:
    hooks = Recording()
    async with running_proxy(tmp_path, destinations=DestinationPolicy(), hooks=hooks) as proxy, client(proxy) as http:
        for address in sorted(FORBIDDEN_ADDRESSES):
            host = f"[{address}]" if ":" in address else address
            response = await http.get(f"http://{host}/latest/meta-data/")
            assert response.status_code == 403, (address, response.text)
            assert response.json()["error"]["code"] == "EGRESS_DENIED"
            with pytest.raises(httpx.ProxyError, match="403"):
                await http.get(f"https://{host}/")
            assert hooks.entries[-1].info.method == "CONNECT", address
        # a name is checked on the address it resolves to (no rebinding around it)
        response = await http.get("http://localhost:80/")
        assert response.status_code == 403
    refused = [e for e in hooks.entries if e.decision.rejected_by == "destination"]
    assert len(refused) == 2 * len(FORBIDDEN_ADDRESSES) + 1
    assert any(e.info.method == "CONNECT" for e in refused)


async def test_the_check_is_on_the_address_connected_to() -> None:
    with pytest.raises(DestinationRefused):
        await open_checked(DestinationPolicy(), "public.example", 80, address="127.0.0.1")


async def test_a_scrubbed_body_of_another_length_is_reframed(tmp_path: Path) -> None:
    hooks = Recording(replace=(b"svc-tok-0123456789", b"v4lue"))
    async with echo_server() as server, running_proxy(tmp_path, hooks=hooks) as proxy, client(proxy) as http:
        for _ in range(2):  # and the connection stays usable
            response = await http.get(f"http://127.0.0.1:{server.port}/", headers={"X-Key": "svc-tok-0123456789"})
            assert response.status_code == 200
            assert response.json()["headers"]["x-key"] == "svc-tok-0123456789"
            assert response.headers.get("transfer-encoding") == "chunked"
        head = await http.head(f"http://127.0.0.1:{server.port}/")
        assert head.status_code == 200 and head.content == b""


async def test_a_big_download_is_relayed_whole_and_recorded(tmp_path: Path) -> None:
    size = 9 * 1024 * 1024 + 7
    tls, bundle = upstream_tls(tmp_path)
    hooks = Recording()
    async with (
        echo_server(big=size) as plain,
        echo_server(tls=tls, big=size) as secure,
        running_proxy(tmp_path, hooks=hooks, ca_bundle=bundle) as proxy,
        client(proxy) as http,
    ):
        for url in (f"http://127.0.0.1:{plain.port}/big", f"https://127.0.0.1:{secure.port}/big"):
            response = await http.get(url)
            assert response.status_code == 200 and len(response.content) == size
            assert response.content == b"x" * size
            assert (await http.get(url.replace("/big", "/after"))).json()["target"] == "/after"
        entries = await hooks.wait(4)
    assert [e.bytes_received for e in entries if e.info.path == "/big"] == [size, size]


async def test_expect_100_continue_gets_its_answer(tmp_path: Path) -> None:
    async with echo_server() as server, running_proxy(tmp_path) as proxy:
        body = "x" * 5000
        result = await trio.run_process(
            ["curl", "-sS", "--max-time", "5", "--expect100-timeout", "4", "-x", f"http://127.0.0.1:{proxy.bound_port}",
             "-H", "Expect: 100-continue", "--data-binary", body, f"http://127.0.0.1:{server.port}/upload", "-w", " %{time_total}"],
            capture_stdout=True,
        )
    answer, elapsed = result.stdout.decode().rsplit(" ", 1)
    assert '"body_size": 5000' in answer
    assert float(elapsed) < 2  # not the client's own timeout


async def test_a_tunnel_opens_no_connection_before_its_request_is_allowed(tmp_path: Path) -> None:
    accepted = 0

    async def count(stream: trio.SocketStream) -> None:
        nonlocal accepted
        accepted += 1
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, count, listeners)
        hooks = Recording(deny=["127.0.0.1"])
        async with running_proxy(tmp_path, hooks=hooks) as proxy, client(proxy) as http:
            response = await http.get(f"https://127.0.0.1:{port}/")
            assert response.status_code == 403
            assert response.json()["error"]["code"] == "EGRESS_DENIED"
        assert accepted == 0
        nursery.cancel_scope.cancel()

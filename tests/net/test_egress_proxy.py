"""The egress proxy in explicit mode on loopback: HTTP, HTTPS through CONNECT with the
node's CA, upstream verification, hooks, and the SSRF table."""

from __future__ import annotations

import ipaddress
import json
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

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
from corral.net.egress.destinations import ALWAYS_REFUSED, local_addresses, open_checked
from tests.dns_server import dns_server
from tests.net.egress_support import Recording, echo_server

LOOPBACK = DestinationPolicy.build(False, ["127.0.0.1/32"])


@asynccontextmanager
async def running_proxy(
    tmp_path: Path,
    *,
    destinations: DestinationPolicy = LOOPBACK,
    hooks: EgressHooks | None = None,
    ca_bundle: str | None = None,
    dns_servers: tuple[str, ...] = (),
) -> AsyncIterator[EgressProxy]:
    ca = EgressCA(tmp_path / "egress-ca")
    config = EgressProxyConfig("127.0.0.1", 0, destinations, ca_bundle=ca_bundle, dns_servers=dns_servers)
    proxy = EgressProxy(config, ca, hooks)
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


def no_node_addresses() -> frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return frozenset()


@pytest.mark.parametrize("address", sorted(FORBIDDEN_ADDRESSES))
def test_the_ssrf_table(address: str) -> None:
    reason = FORBIDDEN_ADDRESSES[address]
    assert refusal_reason(address) == reason
    with pytest.raises(DestinationRefused):
        DestinationPolicy(node_addresses=no_node_addresses).check("example", address)
    opened = DestinationPolicy(allow_private=True, node_addresses=no_node_addresses)
    if reason in ALWAYS_REFUSED:  # the node itself, link-local, metadata: whatever the setting says
        with pytest.raises(DestinationRefused, match=reason):
            opened.check("example", address)
    else:
        opened.check("example", address)


def test_the_setting_opens_private_ranges_never_the_platform() -> None:
    """Contract §18: CORRAL_ALLOW_PRIVATE_DESTINATIONS opens addresses outside the platform only."""
    node = ipaddress.ip_address("203.0.113.77")  # public, and one of this node's
    for allow_private in (False, True):
        policy = replace(
            DestinationPolicy.build(allow_private, ["10.216.0.0/16", "127.0.0.1/32"], ["10.216.9.0/24"]),
            node_addresses=lambda: {node},
        )
        for address in ("10.216.9.7", "10.216.9.1"):  # the instance subnet, even named by the allow list
            with pytest.raises(DestinationRefused, match="is an instance address"):
                policy.check("other-instance.example", address)
        with pytest.raises(DestinationRefused, match="is a node address"):
            policy.check("node.example", str(node))
        with pytest.raises(DestinationRefused, match="metadata"):
            policy.check("metadata.example", "169.254.169.254")
        policy.check("test.example", "127.0.0.1")  # named by the (test-only) allow list
        policy.check("lan.example", "10.216.10.1")  # allow list, outside the subnet
        policy.check("public.example", "93.184.216.34")
    opened = DestinationPolicy.build(True, (), ["10.216.9.0/24"])
    opened.check("lan.example", "192.168.1.20")
    opened.check("lan.example", "10.220.5.2")
    with pytest.raises(DestinationRefused, match="loopback"):
        opened.check("localhost", "127.0.0.1")
    with pytest.raises(DestinationRefused, match="instance"):
        opened.check("b.example", "10.216.9.3")


def test_the_node_addresses_are_every_address_of_every_interface() -> None:
    def ip_json(*argv: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(subprocess.run(["ip", "-j", *argv], capture_output=True, text=True, check=True).stdout)
        return found

    before = local_addresses()
    listed = ip_json("addr")
    after = local_addresses()
    expected = {ipaddress.ip_address(a["local"]) for link in listed for a in link.get("addr_info", [])}
    # Other sessions add and remove links meanwhile: compare what stayed.
    assert before & after <= expected <= before | after
    # The addresses of loopback and of the way out: refused, whatever the setting says.
    routed = {route["dev"] for route in ip_json("route", "show", "default")} | {"lo"}
    stable = {
        ipaddress.ip_address(a["local"]) for link in listed if link["ifname"] in routed for a in link.get("addr_info", [])
    }
    assert ipaddress.ip_address("127.0.0.1") in stable and len(stable) > 2
    policy = DestinationPolicy(allow_private=True)
    for address in stable:
        with pytest.raises(DestinationRefused):
            policy.check("node.example", str(address))


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


async def test_names_mean_what_the_configured_name_servers_say(tmp_path: Path) -> None:
    """The proxy resolves as the node's DNS forwarder does (CORRAL_DNS_SERVERS), not with the
    host's resolver, for absolute URLs and CONNECT alike; HTTPS is verified against the bundle."""
    test_ca = EgressCA(tmp_path / "upstream-ca")
    hooks = Recording()
    async with (
        dns_server() as dns,
        echo_server() as plain,
        echo_server(tls=test_ca.context_for("svc.example.test")) as secure,
        running_proxy(tmp_path, hooks=hooks, ca_bundle=str(test_ca.cert_path), dns_servers=(dns.address,)) as proxy,
        client(proxy) as http,
    ):
        dns.addresses = {"svc.example.test": ["127.0.0.1"], "b.example.test": ["10.216.9.3"]}
        response = await http.get(f"http://svc.example.test:{plain.port}/plain")
        assert response.status_code == 200 and response.json()["target"] == "/plain"
        response = await http.get(f"https://SVC.example.test:{secure.port}/secure")
        assert response.status_code == 200 and response.json()["target"] == "/secure"
        assert "svc.example.test" in dns.queries
        await hooks.wait(2)
        assert [(e.info.destination_address, e.upstream_address) for e in hooks.entries] == [("127.0.0.1", "127.0.0.1")] * 2

        unknown = await http.get("http://nowhere.example.test/")
        assert unknown.status_code == 502 and "no such name" in unknown.json()["error"]["message"]
        with pytest.raises(httpx.ProxyError, match="502"):
            await http.get("https://nowhere.example.test/")
        refused = await http.get("http://b.example.test/")  # private, not in the allow list
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "EGRESS_DENIED"
    assert [e.status_code for e in hooks.entries[2:]] == [502, 502, 403]
    assert hooks.entries[-1].decision.rejected_by == "destination"
    assert hooks.entries[-2].decision.allow and hooks.entries[-2].error  # unreachable: an error, not a refusal


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

"""CNAME checks with dnspython on trio against an in-process DNS server on loopback."""

from __future__ import annotations

import pytest

from corral.net import NameServer, cname_points_to, parse_name_servers
from tests.dns_server import dns_server


def test_parse_name_servers() -> None:
    assert parse_name_servers("") == []
    assert parse_name_servers(None) == []
    assert parse_name_servers("127.0.0.1:5353, 9.9.9.9,[::1]:5300") == [
        NameServer("127.0.0.1", 5353), NameServer("9.9.9.9", 53), NameServer("::1", 5300),
    ]
    with pytest.raises(ValueError):
        parse_name_servers("127.0.0.1:0")


async def test_wildcard_cname_to_the_target_is_verified() -> None:
    async with dns_server() as server:
        server.records["*.sandbox.acme.test"] = "preview.corral.localhost"
        servers = parse_name_servers(server.address)
        check = await cname_points_to("probe.sandbox.acme.test", "Preview.Corral.Localhost.", servers)
    assert check.ok and check.definitive and check.chain == ("preview.corral.localhost",)


async def test_chain_through_an_alias_counts() -> None:
    async with dns_server() as server:
        server.records["*.acme.test"] = "edge.acme-cdn.test"
        server.records["edge.acme-cdn.test"] = "preview.corral.localhost"
        check = await cname_points_to("x.acme.test", "preview.corral.localhost", parse_name_servers(server.address))
    assert check.ok and check.chain == ("edge.acme-cdn.test", "preview.corral.localhost")


async def test_missing_and_wrong_records_are_definitive_failures() -> None:
    async with dns_server() as server:
        servers = parse_name_servers(server.address)
        missing = await cname_points_to("probe.sandbox.acme.test", "preview.corral.localhost", servers)
        server.records["*.sandbox.acme.test"] = "elsewhere.test"
        wrong = await cname_points_to("probe.sandbox.acme.test", "preview.corral.localhost", servers)
    assert not missing.ok and missing.definitive and "no CNAME" in missing.detail
    assert not wrong.ok and wrong.definitive and "elsewhere.test" in wrong.detail


async def test_an_unanswering_server_is_no_verdict() -> None:
    async with dns_server() as server:
        server.silent = True
        check = await cname_points_to("probe.acme.test", "preview.corral.localhost", parse_name_servers(server.address), timeout=0.3)
    assert not check.ok and not check.definitive

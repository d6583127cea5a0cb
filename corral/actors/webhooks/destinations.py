"""Where a webhook may send: HTTPS URLs whose host resolves only to public addresses.

When a webhook is created or its URL changed, only what can never be right is
refused: a URL that is not `https://`, and a host that is a private, loopback or
metadata address by itself (an address literal, or `localhost`). A name is not
resolved then: DNS for a receiver is often set up after its webhook (Stripe, Svix
and GitHub accept such URLs too). Before every attempt the name is resolved and
every address checked, and the attempt connects to exactly the addresses that
passed (`Destination.addresses`), so a name that later resolves to `127.0.0.1` or
the cloud metadata service (DNS rebinding) never reaches them; a name that does not
resolve is a failed attempt, retried on the usual schedule.
`CORRAL_ALLOW_PRIVATE_DESTINATIONS=1` turns the address checks off, for local
development and tests; the URL rules stay.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import trio

MAX_URL_LENGTH = 2048

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
"""Cloud instance-metadata services (AWS, ECS, AWS over IPv6, Alibaba)."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class InvalidUrl(ValueError):
    """The URL is not an acceptable webhook URL; the message says why."""


class DestinationRefused(Exception):
    """The destination resolves to an address webhooks may not reach, or does not resolve."""


@dataclass(frozen=True)
class Target:
    """A parsed webhook URL."""

    url: str
    host: str
    """Lowercase host name or address literal, without IPv6 brackets."""
    port: int
    path: str
    """Path and query, as sent in the request line."""

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == 443 else f"{host}:{self.port}"


@dataclass(frozen=True)
class Destination:
    target: Target
    addresses: tuple[str, ...]
    """The resolved addresses that passed the check, in resolver order."""


def parse_url(url: str) -> Target:
    """An `https://` URL with a host, no credentials and no fragment; else `InvalidUrl`."""
    if len(url) > MAX_URL_LENGTH:
        raise InvalidUrl(f"must be at most {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise InvalidUrl("must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidUrl(f"is not a valid URL ({exc})") from None
    if parts.scheme.lower() != "https":
        raise InvalidUrl("must be an https:// URL")
    if not parts.hostname:
        raise InvalidUrl("must name a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidUrl("must not contain credentials")
    if parts.fragment:
        raise InvalidUrl("must not have a fragment")
    host = parts.hostname.lower().rstrip(".")
    try:
        host.encode("idna")
    except UnicodeError:
        raise InvalidUrl("has an invalid host name") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(url=url, host=host, port=port or 443, path=path)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refused_reason(address: IPAddress) -> str | None:
    """Why webhooks may not reach `address`, or None when it is a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return refused_reason(embedded)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_private or address.is_reserved or not address.is_global:
        return "a private or reserved address"
    return None


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (an address literal resolves to itself)."""
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise DestinationRefused(f"host {host} could not be resolved") from exc
    found: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
        if address not in found:
            found.append(address)
    if not found:
        raise DestinationRefused(f"host {host} could not be resolved")
    return found


LOOPBACK_NAMES = ("localhost",)
"""Names that always mean this machine (RFC 6761), with every name below them."""


def check_url_host(target: Target, *, allow_private: bool) -> None:
    """At creation: refuse a host that is a forbidden address by itself, without DNS."""
    if allow_private:
        return
    if target.host in LOOPBACK_NAMES or target.host.endswith(tuple(f".{name}" for name in LOOPBACK_NAMES)):
        raise DestinationRefused(f"host {target.host} resolves to 127.0.0.1, a loopback address")
    try:
        address = ipaddress.ip_address(target.host.split("%", 1)[0])
    except ValueError:
        return  # a name: checked when it is resolved, before every attempt
    reason = refused_reason(address)
    if reason is not None:
        raise DestinationRefused(f"host {target.host} resolves to {address}, {reason}")


async def check_destination(target: Target, *, allow_private: bool) -> Destination:
    """Resolve `target` and refuse it if any of its addresses is not public."""
    addresses = await resolve(target.host, target.port)
    if not allow_private:
        for address in addresses:
            reason = refused_reason(ipaddress.ip_address(address))
            if reason is not None:
                raise DestinationRefused(f"host {target.host} resolves to {address}, {reason}")
    return Destination(target=target, addresses=tuple(addresses))

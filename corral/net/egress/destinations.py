"""Which destinations the egress proxy may connect to (the SSRF table).

The check runs on the address the proxy actually connects to, after its own
resolution: a name that resolves to a public address at policy time and to
127.0.0.1 at connect time (DNS rebinding) is refused, because the refused address
is the one in hand when the socket is opened. Nothing is resolved twice.

Names are resolved as instances resolve them (the node's DNS forwarder, which asks
`CORRAL_DNS_SERVERS` or the system's resolvers), not with the host's own resolver:
a name means the same address to the proxy as to the instance that named it.

`CORRAL_ALLOW_PRIVATE_DESTINATIONS=1` opens private ranges (a developer's LAN, a test
world), never the platform itself (contract §18): the instance subnet, every address
of the node (every address of every local interface, loopback included, so every
service of the node: its API, preview router, database proxies, DNS forwarder) and
link-local/metadata addresses stay refused whatever it says.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

import trio

from ..dns_forwarder import LookupFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: (network, why it is refused), checked in order; the first match names the reason.
#: The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are not in
#: it: contract §11 does not name them, they are not routed on the internet anyway, and
#: some networks put their package mirrors there (this build farm's deb.debian.org).
FORBIDDEN: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), reason)
    for cidr, reason in (
        ("169.254.169.254/32", "metadata"),
        ("169.254.170.2/32", "metadata"),
        ("fd00:ec2::254/128", "metadata"),
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("169.254.0.0/16", "link-local"),
        ("192.0.0.0/24", "reserved"),
        ("198.18.0.0/15", "reserved"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "ipv4-mapped"),
        ("::/96", "ipv4-compatible"),
        ("64:ff9b::/96", "nat64"),
        ("64:ff9b:1::/48", "nat64"),
        ("2002::/16", "6to4"),
        ("2001::/32", "teredo"),
        ("2001:db8::/32", "reserved"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)


ALWAYS_REFUSED = frozenset({
    "metadata", "unspecified", "loopback", "link-local", "multicast", "ipv4-mapped", "ipv4-compatible",
})
"""Reasons of `FORBIDDEN` that `allow_private` does not open: the node itself (loopback,
the unspecified address, IPv4 forms hidden in IPv6 ones), link-local and metadata."""

LOCALHOST = "127.0.0.1"
"""What `localhost` and `*.localhost` are (RFC 6761), whatever the name servers say."""

Resolver = Callable[[str], Awaitable[Sequence[str]]]
"""Every address of a name (raises `LookupFailed` when it has none)."""


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


class DestinationRefused(Exception):
    """The destination is one instances may not reach through the proxy."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(f"{host} ({address}) is {_article(reason)} {reason} address")
        self.host = host
        self.address = address
        self.reason = reason


class DestinationUnreachable(Exception):
    """The name did not resolve, or no address accepted the connection."""


def refusal_reason(address: str | IPAddress) -> str | None:
    """Why `address` is refused, or None for a public address."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return "link-local"
    for network, reason in FORBIDDEN:
        if ip.version == network.version and ip in network:
            return reason
    return None


_NLMSG_HEADER = struct.Struct("=LHHLL")
_IFADDRMSG = struct.Struct("=BBBBI")
_RTATTR = struct.Struct("=HH")
_RTM_NEWADDR, _RTM_GETADDR = 20, 22
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_IFA_ADDRESS, _IFA_LOCAL = 1, 2


def local_addresses() -> frozenset[IPAddress]:
    """Every address of every interface of this host (of its network namespace), both
    families, as the kernel lists them now (a netlink dump: about 50 us, so it is asked
    at each check and an address added a moment ago counts)."""
    found: set[IPAddress] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        header = _NLMSG_HEADER.pack(
            _NLMSG_HEADER.size + _IFADDRMSG.size, _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0
        )
        sock.send(header + _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        while True:
            data = sock.recv(1 << 16)
            offset = 0
            while offset + _NLMSG_HEADER.size <= len(data):
                length, kind, _flags, _seq, _pid = _NLMSG_HEADER.unpack_from(data, offset)
                if kind == _NLMSG_DONE:
                    return frozenset(found)
                if kind == _NLMSG_ERROR or length < _NLMSG_HEADER.size:
                    raise OSError("the kernel refused to list this host's addresses")
                if kind == _RTM_NEWADDR:
                    found.update(_address_of(data, offset, length))
                offset += (length + 3) & ~3
            if not data:
                raise OSError("the kernel's address list ended early")


def _address_of(data: bytes, offset: int, length: int) -> list[IPAddress]:
    """The node's own address of one RTM_NEWADDR message (IFA_LOCAL, else IFA_ADDRESS:
    on a point-to-point link IFA_ADDRESS is the peer's)."""
    family = _IFADDRMSG.unpack_from(data, offset + _NLMSG_HEADER.size)[0]
    if family not in (socket.AF_INET, socket.AF_INET6):
        return []
    attributes: dict[int, bytes] = {}
    position, end = offset + _NLMSG_HEADER.size + _IFADDRMSG.size, offset + length
    while position + _RTATTR.size <= end:
        size, kind = _RTATTR.unpack_from(data, position)
        if size < _RTATTR.size:
            break
        attributes[kind] = data[position + _RTATTR.size : position + size]
        position += (size + 3) & ~3
    raw = attributes.get(_IFA_LOCAL) or attributes.get(_IFA_ADDRESS)
    return [ipaddress.ip_address(raw)] if raw and len(raw) in (4, 16) else []


@dataclass(frozen=True)
class DestinationPolicy:
    """What the proxy may connect to.

    Refused whatever the settings say: the instance subnet, and (unless the test-only
    allow list names them) every address of the node and `ALWAYS_REFUSED`. Refused
    unless `allow_private` (or the allow list): the rest of `FORBIDDEN`.
    """

    allow_private: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()
    """Test-only (`CORRAL_EGRESS_ALLOWED_DESTINATIONS`): networks that pass, even the
    node's own (a test's servers on loopback), but never the instance subnet."""
    instance_networks: tuple[IPNetwork, ...] = ()
    """The node's instance subnet: instances never reach each other through the proxy."""
    node_addresses: Callable[[], Collection[IPAddress]] = local_addresses
    """This host's addresses, asked at each check."""

    @classmethod
    def build(
        cls, allow_private: bool, allowed: Iterable[str] = (), instance_networks: Iterable[str] = ()
    ) -> DestinationPolicy:
        return cls(
            allow_private,
            tuple(ipaddress.ip_network(cidr, strict=False) for cidr in allowed),
            tuple(ipaddress.ip_network(cidr, strict=False) for cidr in instance_networks),
        )

    def check(self, host: str, address: str) -> None:
        """Raise `DestinationRefused` unless `address` may be connected to."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if _within(ip, self.instance_networks):
            raise DestinationRefused(host, address, "instance")
        if _within(ip, self.allowed_networks):
            return
        reason = refusal_reason(ip)
        if reason is not None and (reason in ALWAYS_REFUSED or not self.allow_private):
            raise DestinationRefused(host, address, reason)
        if ip in self.node_addresses():
            raise DestinationRefused(host, address, "node")


def _within(ip: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(ip.version == network.version and ip in network for network in networks)


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


async def resolve(host: str, port: int, resolver: Resolver | None = None) -> list[str]:
    """Every address of `host` (a literal is itself, `localhost` loopback), IPv4 first:
    asked of `resolver` (the node's DNS forwarder), else of the system's resolver."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    name = host.rstrip(".").lower()
    literal = _literal(name)
    if literal is not None:  # `10.0.0.1.`
        return [literal]
    if name == "localhost" or name.endswith(".localhost"):
        return [LOCALHOST]
    if resolver is not None:
        try:
            found = list(await resolver(name))
        except LookupFailed as exc:
            raise DestinationUnreachable(str(exc)) from exc
        return sorted(dict.fromkeys(found), key=lambda a: ":" in a)
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise DestinationUnreachable(f"cannot resolve {host}: {exc.strerror}") from exc
    addresses: list[str] = []
    for _family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    addresses.sort(key=lambda a: ":" in a)
    return addresses


async def checked_address(policy: DestinationPolicy, host: str, port: int, resolver: Resolver | None = None) -> str:
    """The first address of `host` that passes the check, without connecting to it: a
    CONNECT is answered on this, and the connection is opened (to this address) only
    once the first request inside the tunnel was decided."""
    refused: DestinationRefused | None = None
    for candidate in await resolve(host, port, resolver):
        try:
            policy.check(host, candidate)
        except DestinationRefused as exc:
            refused = refused or exc
            continue
        return candidate
    raise refused or DestinationUnreachable(f"{host} has no address")


async def open_checked(
    policy: DestinationPolicy,
    host: str,
    port: int,
    *,
    address: str | None = None,
    timeout: float = 10.0,
    resolver: Resolver | None = None,
) -> tuple[trio.SocketStream, str]:
    """A TCP connection to `host` (or to the given `address`) whose peer passed the check.

    Each candidate address is checked, then connected to as it is; a refused one
    stops the attempt when no allowed one exists (the refusal is what the caller
    reports). Returns the stream and the address it reached.
    """
    candidates = [address] if address is not None else await resolve(host, port, resolver)
    refused: DestinationRefused | None = None
    failure: OSError | None = None
    for candidate in candidates:
        try:
            policy.check(host, candidate)
        except DestinationRefused as exc:
            refused = refused or exc
            continue
        family = socket.AF_INET6 if ":" in candidate else socket.AF_INET
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            with trio.fail_after(timeout):
                await sock.connect((candidate, port))
        except (OSError, trio.TooSlowError) as exc:
            sock.close()
            failure = exc if isinstance(exc, OSError) else OSError(f"timed out after {timeout} s")
            continue
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return trio.SocketStream(sock), candidate
    if refused is not None and failure is None:
        raise refused
    raise DestinationUnreachable(f"cannot connect to {host}:{port}: {failure}")

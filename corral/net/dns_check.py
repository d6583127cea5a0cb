"""DNS checks: does a name lead, by CNAME records, to a given host?

Preview domains (and later custom domains) are verified by asking DNS, with
dnspython on trio, either the name servers the operator configured
(`CORRAL_DNS_SERVERS`, `host[:port]` items separated by commas; tests point it at
an in-process server on loopback) or the system's resolvers. The chain of CNAMEs is
followed hop by hop (at most 8), so a record pointing at an alias of the target
also counts. A timeout or a server failure is not a verdict: callers keep the
previous state instead of flipping a working domain to pending.
"""

from __future__ import annotations

from dataclasses import dataclass

import dns.asyncbackend
import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver

MAX_HOPS = 8


@dataclass(frozen=True)
class NameServer:
    host: str
    port: int = 53


@dataclass(frozen=True)
class CnameCheck:
    ok: bool
    definitive: bool
    """False when DNS could not be asked (timeout, server failure): no verdict."""
    detail: str
    chain: tuple[str, ...] = ()


def parse_name_servers(text: str | None) -> list[NameServer]:
    """`"127.0.0.1:5353, 9.9.9.9, [::1]:53"` -> servers; empty means the system's."""
    servers = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else 53
        elif item.count(":") == 1:
            host, _, port_text = item.partition(":")
            port = int(port_text)
        else:
            host, port = item, 53
        if not 0 < port < 65536:
            raise ValueError(f"bad name server port in {item!r}")
        servers.append(NameServer(host, port))
    return servers


def _normal(name: str) -> str:
    return name.lower().rstrip(".")


def _resolver(servers: list[NameServer], timeout: float) -> dns.asyncresolver.Resolver:
    if servers:
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [dns.nameserver.Do53Nameserver(s.host, s.port) for s in servers]
    else:
        resolver = dns.asyncresolver.Resolver()
    resolver.timeout = timeout
    resolver.lifetime = timeout
    resolver.cache = None
    return resolver


async def cname_points_to(name: str, target: str, servers: list[NameServer], timeout: float = 3.0) -> CnameCheck:
    """Whether `name` reaches `target` through its CNAME chain."""
    wanted = _normal(target)
    resolver = _resolver(servers, timeout)
    backend = dns.asyncbackend.get_backend("trio")
    current = _normal(name)
    chain: list[str] = []
    for _ in range(MAX_HOPS):
        try:
            answer = await resolver.resolve(current, dns.rdatatype.CNAME, raise_on_no_answer=False, backend=backend, search=False)
        except dns.resolver.NXDOMAIN:
            break
        except (dns.exception.Timeout, dns.resolver.NoNameservers, dns.resolver.LifetimeTimeout) as exc:
            return CnameCheck(False, False, f"DNS did not answer for {current}: {exc}", tuple(chain))
        except dns.exception.DNSException as exc:
            return CnameCheck(False, False, f"DNS lookup of {current} failed: {exc}", tuple(chain))
        if answer.rrset is None or len(answer.rrset) == 0:
            break
        current = _normal(str(answer.rrset[0].target))
        chain.append(current)
        if current == wanted:
            return CnameCheck(True, True, f"{_normal(name)} points to {wanted}", tuple(chain))
    if chain:
        return CnameCheck(False, True, f"{_normal(name)} points to {chain[-1]}, not to {wanted}", tuple(chain))
    return CnameCheck(False, True, f"{_normal(name)} has no CNAME record (it must point to {wanted})")

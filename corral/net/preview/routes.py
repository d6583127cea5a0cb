"""The preview router's routing table: host patterns and the resolvers that decide.

The router itself knows no policy. For each request it finds the route of the Host
header and asks that route's resolver, which answers a `Decision`: `Forward` to an
upstream (with what to strip from the request and add to the response), or a
`Reply` the router sends itself (a refusal page, a redirect). Today one pattern
serves sandbox ports (`{port}-{slug}.sandbox.{domain}`); deployments
(`{slug}.{domain}`) and exact custom domains plug in beside it: exact hosts are
looked up first, then patterns in the order they were added, then an optional
fallback resolver (for hosts only a database knows, such as custom domains).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .http1 import Head


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a request goes. With `netns`, the router may also reach the app on the
    loopback of that network namespace (an app bound to 127.0.0.1 inside an instance)."""

    address: str
    port: int
    netns: str | None = None
    label: str = ""
    """How pages name it: "port 3000 of sandbox my-app"."""


@dataclass(slots=True)
class Forward:
    upstream: Upstream
    target: str | None = None
    """A rewritten request target (e.g. without a token parameter); None keeps it."""
    drop_headers: frozenset[str] = frozenset()
    """Request headers (lowercase names) the app must not see."""
    drop_cookies: frozenset[str] = frozenset()
    """Cookie names removed from the request's Cookie header."""
    add_headers: tuple[tuple[str, str], ...] = ()
    """Request headers for the upstream only (e.g. its own credentials); a client's
    headers of the same names are dropped."""
    response_headers: tuple[tuple[str, str], ...] = ()
    """Added to the app's response (e.g. Set-Cookie)."""
    own_domain: bool = False
    """The host is the tenant's own (a custom domain): its app may set cookies for the
    host's parent domains, which are the tenant's too. Otherwise the host is under a
    parent every tenant's previews share, and an app's cookies stay with its host."""
    relay: bool = False
    """The upstream is another node's preview router, where the resource lives: the
    request goes on as it came (its Host, tokens, cookies and `X-Forwarded-*`; none
    added here, the next router adds them), with `add_headers` (the signed
    `RELAY_HEADER`), and the answer comes back as that router gave it."""
    unreachable: Reply | None = None
    """The page when the upstream cannot be connected to (else "nothing is listening")."""


@dataclass(slots=True)
class Reply:
    """A response the router writes itself."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "text/html; charset=utf-8"
    file: str | None = None
    """A file sent as the body instead of `body`, streamed from the disk in chunks (a
    large static file is never read whole into memory)."""


Decision = Forward | Reply

RELAY_HEADER = "x-corral-relayed"
"""On a request one node's router relays to another's: `<node> <client address> <unix
time> <signature>`. The receiving router takes the client's address from it only when
its `RelayCheck` holds; it is never passed to an app."""
RelayCheck = Callable[[str], "tuple[str, str] | None"]
"""The relay header's value -> (the relaying node, the client's address) when its
signature holds, else None."""


@dataclass(slots=True)
class PreviewRequest:
    """What a resolver sees of a request."""

    head: Head
    host: str
    """The Host header's name part, lowercased, without the port."""
    peer: str
    cookies: dict[str, str] = field(default_factory=dict)

    @property
    def method(self) -> str:
        return self.head.first[0]

    @property
    def target(self) -> str:
        return self.head.first[1]

    @property
    def relayed(self) -> bool:
        """Whether another node's router relayed this request here (never relayed again)."""
        return self.head.relayed_by is not None

    @property
    def is_upgrade(self) -> bool:
        return "upgrade" in self.head.connection_tokens and self.head.get("upgrade") is not None

    def header(self, name: str) -> str | None:
        return self.head.get(name)

    def cookie(self, name: str) -> str | None:
        if not self.cookies:
            for value in self.head.get_all("cookie"):
                for pair in value.split(";"):
                    key, sep, val = pair.strip().partition("=")
                    if sep and key not in self.cookies:
                        self.cookies[key] = val
        return self.cookies.get(name)


Resolver = Callable[[PreviewRequest, "re.Match[str] | None"], Awaitable[Decision]]


class RouteTable:
    def __init__(self) -> None:
        self._exact: dict[str, Resolver] = {}
        self._patterns: list[tuple[str, re.Pattern[str], Resolver]] = []
        self._fallback: Resolver | None = None

    def add_exact(self, host: str, resolver: Resolver) -> None:
        self._exact[host.lower().rstrip(".")] = resolver

    def remove_exact(self, host: str) -> None:
        self._exact.pop(host.lower().rstrip("."), None)

    def add_pattern(self, name: str, pattern: str | re.Pattern[str], resolver: Resolver) -> None:
        """Hosts matching `pattern` (anchored) go to `resolver` with the match object."""
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        self._patterns = [p for p in self._patterns if p[0] != name] + [(name, compiled, resolver)]

    def set_fallback(self, resolver: Resolver | None) -> None:
        self._fallback = resolver

    def match(self, host: str) -> tuple[Resolver, re.Match[str] | None] | None:
        exact = self._exact.get(host)
        if exact is not None:
            return exact, None
        for _, pattern, resolver in self._patterns:
            found = pattern.fullmatch(host)
            if found is not None:
                return resolver, found
        if self._fallback is not None:
            return self._fallback, None
        return None


def strip_query_params(target: str, names: frozenset[str], prefixes: tuple[str, ...] = ("",)) -> tuple[str, dict[str, str]]:
    """`target` without the query parameters in `names` whose values start with one of
    `prefixes` (others are the app's own), and their (first) values."""
    path, sep, query = target.partition("?")
    if not sep:
        return target, {}
    kept: list[str] = []
    found: dict[str, str] = {}
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name in names and value.startswith(prefixes):
            found.setdefault(name, value)
        else:
            kept.append(part)
    if not found:
        return target, {}
    rest = "&".join(p for p in kept if p)
    return (f"{path}?{rest}" if rest else path), found

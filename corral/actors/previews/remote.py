"""A preview host whose resource lives on another node: relayed to that node's router (issue 30).

Only a resource's home node reaches its instance (its address is on that node's
bridge), so a request for a sandbox's port or a computer's desktop that reaches
another node's preview router is relayed, as it came, to the home's router at the
address it advertises (`--advertise-preview`, the `nodes` row's
`advertise_preview_url`): Host, tokens, cookies and body unchanged, the answer (a
page, a redirect with its cookie, a stream, a WebSocket's 101 and its bytes) relayed
back as it comes. The resolver here only finds the home; everything else is decided
where the instance is.

Access is checked at the home, once: the relaying node checks no token (it could, with
the shared secret, but then two places would have to agree on every rule: the
cookie trade, share revocation, the desktop's redirects). Nothing reaches an instance
without the home's router letting it through, exactly as for a request sent there
directly, and the relaying node adds nothing an app or the home trusts except the
signed relay header.

That header (`corral.net.preview.RELAY_HEADER`) carries the relaying node's name,
the client's address and the time under an HMAC keyed from the cluster's signing
secret (every node of a store shares it; its own derivation, so an API forward's
signature is no relay's): the home takes the client's address from it, so an app's
`X-Forwarded-For` is the same through any node, and a relayed request is never
relayed again (two nodes' caches that disagree for a moment about a home cannot send
a request round in circles: the second answers from what it has). An unsigned,
forged or stale header is dropped.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

from corral.actors.nodes import store as nodes
from corral.actors.nodes.signing import NodeSigner
from corral.net.preview import RELAY_HEADER, Forward, Upstream, page

from .services import PreviewServices

log = logging.getLogger("corral.previews.remote")

NODES_SECONDS = 1.0
"""How long the live nodes' preview addresses are kept (a lost node stops being relayed
to within about this, on top of the heartbeat's staleness)."""


class RelaySigner:
    """Signs the client's address on a relayed request; checks another node's signature."""

    def __init__(self, signing_secret: str, node_name: str) -> None:
        self.signer = NodeSigner(signing_secret, b"corral preview relay v1", node_name)
        self.node_name = node_name

    def sign(self, client: str) -> str:
        node, stamp, mac = self.signer.sign(client)
        return f"{node} {client} {stamp} {mac}"

    def check(self, value: str) -> tuple[str, str] | None:
        """(relaying node, client address) when the signature holds and is fresh."""
        parts = value.split(" ")
        if len(parts) != 4:
            return None
        node, client, stamp, mac = parts
        return (node, client) if self.signer.verify(node, client, stamp, mac) else None


def signer_for(platform: PreviewServices) -> RelaySigner:
    return RelaySigner(platform.jwt_secret, platform.settings.node_name)


class RemoteRouters:
    """The other live nodes' preview routers, to relay a resource's requests to its home."""

    def __init__(self, platform: PreviewServices) -> None:
        self.platform = platform
        self.node_name = platform.settings.node_name
        self.shared = platform.db.dialect == "postgresql"
        """Several nodes may share the store; on SQLite every resource is this node's."""
        self.signer = signer_for(platform)
        self._routers: dict[str, Upstream] = {}
        self._read_at = -NODES_SECONDS

    async def home_of(self, node: str | None) -> Upstream | None:
        """The preview router of `node` when it is another live node that advertises
        one; None: serve here (this node's, a lost node's, or one without a record)."""
        if not self.shared or node is None or node == self.node_name:
            return None
        now = time.monotonic()
        if now - self._read_at >= NODES_SECONDS:
            lost_since = nodes.lost_before()
            routers: dict[str, Upstream] = {}
            for record in await nodes.all_nodes(self.platform.db):
                if record.name == self.node_name or nodes.seen_state(record, lost_since) == nodes.LOST:
                    continue
                upstream = router_upstream(record.name, record.advertise_preview_url)
                if upstream is not None:
                    routers[record.name] = upstream
            self._routers, self._read_at = routers, now
        return self._routers.get(node)

    def relay(self, home: Upstream, client: str, what: str) -> Forward:
        """The decision that relays a request for `what` (a sandbox, a desktop) to `home`."""
        return Forward(
            home,
            relay=True,
            add_headers=((RELAY_HEADER, self.signer.sign(client)),),
            unreachable=page(
                503, "node_unreachable", "This preview cannot be reached right now",
                f"The node that runs {what} ({home.label}) does not answer.", "Reload this page in a moment.",
                headers=(("Retry-After", "2"),),
            ),
        )


def router_upstream(name: str, url: str) -> Upstream | None:
    """Where node `name`'s router listens, from its advertised preview URL (None: none)."""
    if not url:
        return None
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    return Upstream(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), None, f"node {name}")

"""What one node of a cluster signs for another: a subject, the node's name and the time.

Nodes share the store's signing secret; each use derives a key of its own from it (a
relayed preview's signature is no blob request's), and a signature is good for a
minute. The header formats are the users' (`corral.actors.previews.remote`,
`corral.actors.nodes.blobs`); this is the part they share.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time

log = logging.getLogger("corral.nodes.signing")

SIGNATURE_SECONDS = 60


class NodeSigner:
    def __init__(self, signing_secret: str, purpose: bytes, node_name: str) -> None:
        self.key = hmac.new(signing_secret.encode(), purpose, hashlib.sha256).digest()
        self.purpose = purpose.decode()
        self.node_name = node_name

    def mac(self, node: str, subject: str, stamp: str) -> str:
        return hmac.new(self.key, f"{node} {subject} {stamp}".encode(), hashlib.sha256).hexdigest()

    def sign(self, subject: str) -> tuple[str, str, str]:
        """(this node, the time, the signature) over `subject`."""
        stamp = str(int(time.time()))
        return self.node_name, stamp, self.mac(self.node_name, subject, stamp)

    def verify(self, node: str, subject: str, stamp: str, mac: str) -> bool:
        """Whether `node` signed `subject` under this key less than a minute ago."""
        if not stamp.isdigit() or abs(time.time() - int(stamp)) > SIGNATURE_SECONDS:
            return False
        if not hmac.compare_digest(mac, self.mac(node, subject, stamp)):
            log.warning("a request signed for %r claimed node %r with a wrong signature", self.purpose, node[:64])
            return False
        return True


__all__ = ["SIGNATURE_SECONDS", "NodeSigner"]

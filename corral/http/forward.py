"""A request for a resource that lives on another node, forwarded there (issue 30).

Only a resource's home node runs its actor and reaches its instance
(`corral.actors.nodes.homes`), so any other node that receives a request for it sends
the request on, as it came, to the home's advertised URL, and relays the answer as it
comes: bodies streamed both ways (a 10 MB upload or download is never held whole),
SSE and other streamed answers chunk by chunk, the status and headers unchanged, so
the caller cannot tell. When the caller goes away, the forwarded request is closed
too, which the home sees as the same hang-up.

The home must know who the caller is (rate limits by address, a key's allowed IPs,
audit rows), not the forwarding node: the forwarded request carries
`X-Corral-Forwarded: <node> <client address> <unix time> <HMAC>`, signed with a key
derived from the cluster's JWT secret (every node of a store has it), and the home
takes the client address from it only when the signature holds and is under a minute
old; an unsigned or forged header is dropped, so no client can claim another address.
A request that arrives forwarded is served where it arrives, never forwarded again.

The client is `node_client.NodeClient` (h11, kept-alive connections to each node): the
request head and body are the caller's, the framing h11's.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio

from corral.actors.nodes.homes import Home, Homes
from corral.errors import ApiError

from .node_client import NodeClient, NodeUnreachable
from .pipeline import error_answer, new_request_id
from .replies import JsonAnswer

log = logging.getLogger("corral.http.forward")

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HEADER = b"x-corral-forwarded"
SIGNATURE_SECONDS = 60
RESOURCE_PATH = re.compile(r"^/api/v1/(sandboxes|computers|databases)/([0-9A-Za-z_-]{1,64})(?:/|$)")
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"content-length", b"expect", HEADER,
})  # fmt: skip
"""Headers of one hop (RFC 9110 §7.6.1), and the length, which goes on as it came or as
the client counts it. `Host` goes on unchanged: the home answers as if asked directly."""
ANSWER_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"trailer", b"upgrade"})


def forwarding_key(jwt_secret: str) -> bytes:
    return hmac.new(jwt_secret.encode(), b"corral node-to-node forwarding", hashlib.sha256).digest()


class Forwarder:
    def __init__(self, homes: Homes, key: bytes) -> None:
        self.homes = homes
        self.key = key
        self.client = NodeClient()

    # -- the caller's address, signed -------------------------------------------------

    def _signature(self, node: str, client: str, stamp: str) -> str:
        return hmac.new(self.key, f"{node} {client} {stamp}".encode(), hashlib.sha256).hexdigest()

    def sign(self, client: str) -> bytes:
        node, stamp = self.homes.node_name, str(int(time.time()))
        return f"{node} {client} {stamp} {self._signature(node, client, stamp)}".encode()

    def arrived_forwarded(self, scope: dict[str, Any]) -> bool:
        """Whether the request came from another node (a valid signature): its client
        address is then put back in the scope. Any `X-Corral-Forwarded` is taken out."""
        headers = scope["headers"]
        found = [value for name, value in headers if name == HEADER]
        if not found:
            return False
        scope["headers"] = [(name, value) for name, value in headers if name != HEADER]
        parts = found[0].decode("latin-1").split(" ")
        if len(parts) != 4:
            return False
        node, client, stamp, signature = parts
        if not stamp.isdigit() or abs(time.time() - int(stamp)) > SIGNATURE_SECONDS:
            return False
        if not hmac.compare_digest(signature, self._signature(node, client, stamp)):
            log.warning("a request claimed to be forwarded by node %r with a wrong signature", node[:64])
            return False
        scope["client"] = (client, 0)
        return True

    # -- forwarding -------------------------------------------------------------------

    async def home_of(self, scope: dict[str, Any]) -> Home | None:
        """The other node to send this request to, or None to serve it here."""
        match = RESOURCE_PATH.match(scope["path"])
        if match is None:
            return None
        return await self.homes.elsewhere(match[1], match[2])

    async def forward(self, scope: dict[str, Any], receive: Receive, send: Send, home: Home) -> None:
        client = scope.get("client")
        headers = [(name, value) for name, value in scope["headers"] if name not in HOP_BY_HOP]
        if not any(name == b"host" for name, _ in headers):
            headers.append((b"host", home.url.split("://", 1)[-1].encode()))
        headers.append((HEADER, self.sign(client[0] if client else "")))
        query = scope.get("query_string", b"")
        target = scope["raw_path"] + (b"?" + query if query else b"")
        whole = scope.get("extensions", {}).get("corral.whole_body")
        body: bytes | AsyncIterator[bytes] = whole if whole is not None else _body(receive)
        length = _header(scope, b"content-length")
        if whole is None and length:  # streamed on with the length it declared (else chunked)
            headers.append((b"content-length", length))
        try:
            answer = await self.client.request(home.url, scope["method"], target, headers, body)
        except NodeUnreachable as exc:
            log.warning("forwarding %s %s to node %s failed: %s", scope["method"], scope["path"], home.name, exc)
            await _unreachable(send, home)
            return
        try:
            async with trio.open_nursery() as nursery:
                if whole is not None:  # the body is in: what comes now is the caller leaving
                    nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
                answer_headers = [(name, value) for name, value in answer.headers if name not in ANSWER_HOP_BY_HOP]
                await send({"type": "http.response.start", "status": answer.status, "headers": answer_headers})
                async for chunk in answer.chunks():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                nursery.cancel_scope.cancel()
        except NodeUnreachable as exc:  # the home went away mid-answer: the caller's connection ends
            log.warning("node %s broke off the answer to %s %s: %s", home.name, scope["method"], scope["path"], exc)
        finally:
            await answer.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise NodeUnreachable("the caller went away before its body was in")
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _header(scope: dict[str, Any], name: bytes) -> bytes:
    return next((value for key, value in scope["headers"] if key == name), b"")


async def _unreachable(send: Send, home: Home) -> None:
    message = f"the node that hosts this resource ({home.name}) cannot be reached; try again shortly"
    request_id = new_request_id()
    answer = error_answer(ApiError(503, "SERVICE_UNAVAILABLE", message, headers={"Retry-After": "2"}), request_id)
    assert isinstance(answer, JsonAnswer)
    await send({"type": "http.response.start", "status": answer.status_code, "headers": answer.raw_headers()})
    await send({"type": "http.response.body", "body": answer.body})


__all__ = ["Forwarder", "forwarding_key"]

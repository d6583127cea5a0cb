"""A request for a resource that lives on another node, forwarded there (issue 30).

Only a resource's home node runs its actor and reaches its instance
(`corral.actors.nodes.homes`), so any other node that receives a request for it sends
the request on, as it came, to the home's advertised URL, and relays the answer as it
comes: bodies streamed both ways (a 10 MB upload or download is never held whole; a
body of at most `POOLED_BODY` is read first, so it goes on a kept-alive connection),
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

A publish (`POST /deployments/{id}/publish`) and a new agent run (`POST /agent-runs`)
are served on the node of the sandbox or computer their body names (`to_named_home`),
and an agent run's own requests on its target's node (`homes.COLLECTIONS`).

A create (`POST /api/v1/{sandboxes|computers|databases}`) has no home yet: the node it
reaches places it (`corral.actors.nodes.placement`: a node with room, and a claim on
that room) and serves it itself, or forwards it to the chosen node with
`X-Corral-Placed: <claim id> <node> <unix time> <HMAC>`, signed as above, which that
node serves without placing again; it holds the claim while it creates the resource
(`claims.holding`) and releases it when the create ends. The caller cannot tell which
node served it, except by the record's `node`. A create's body is read whole before
placing (at most `MAX_CREATE_BODY`): placement needs its size, template and region.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import trio

from corral.actors.computers import get_template
from corral.actors.nodes import claims, homes, placement
from corral.actors.nodes.homes import Home, Homes
from corral.actors.templates import BUILD_SIZE
from corral.errors import ApiError

from .node_client import NodeClient, NodeUnreachable
from .observe import current
from .pipeline import error_answer, new_request_id
from .replies import JsonAnswer

log = logging.getLogger("corral.http.forward")

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HEADER = b"x-corral-forwarded"
PLACED = b"x-corral-placed"
SIGNATURE_SECONDS = 60
RESOURCE_PATH = re.compile(
    r"^/api/v1/(sandboxes|computers|databases|deployments|agent-runs|sandbox-template-builds|sandbox-templates|custom-domains)"
    r"/([0-9A-Za-z_-]{1,64})(?:/|$)"
)
SERVICE_PATH = re.compile(r"^/api/v1/deployments/[0-9A-Za-z_-]{1,64}/services/([0-9A-Za-z_-]{1,64})(?:/|$)")
"""A request for one service of a deployment goes to that service's node, which may not
be the deployment's."""
DOMAIN_PATH = re.compile(r"^/api/v1/(?:computers|deployments)/[0-9A-Za-z_-]{1,64}/domains/([0-9A-Za-z_-]{1,64})(?:/|$)")
"""A request for one custom domain of a computer or a deployment goes to the domain's
home, which may not be (or no longer be) its resource's."""
CREATE_PATH = re.compile(r"^/api/v1/(sandboxes|computers|databases)/?$")
RESOURCE_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
BUILD_PATH = re.compile(r"^/api/v1/sandbox-templates(?:/([0-9A-Za-z_-]{1,64})/builds)?/?$")
"""A new template (its first build) or a rebuild: a build is placed like a sandbox of its size."""
REPLICA_PATH = re.compile(r"^/api/v1/databases/([0-9A-Za-z_-]{1,64})/replicas/?$")
"""A new replica is placed like a create, away from its primary's node (issue 30)."""
PUBLISH_PATH = re.compile(r"^/api/v1/deployments/[0-9A-Za-z_-]{1,64}/publish/?$")
"""A publish reads its source sandbox's files, which only the sandbox's node can."""
AGENT_RUN_PATH = re.compile(r"^/api/v1/agent-runs/?$")
"""A new agent run starts a process in its target, which only the target's node reaches,
and its actor follows that process there."""
TARGET_COLLECTIONS = {"sandbox": "sandboxes", "computer": "computers"}
PLACING_AT_ONCE = 2
"""Placements this node has in the store at once: the others wait here, not on the
cluster's lock holding one of the store's 10 connections each (a burst of creates
would leave none for the node's other requests); placements are one at a time in
the cluster anyway."""
MAX_CREATE_BODY = 1024 * 1024
"""A create's body, read whole for placement on a store several nodes share; past it, 413."""
POOLED_BODY = 64 * 1024
"""A body of at most this declared length is read whole before it is forwarded, so the
request goes on a kept-alive connection (a streamed body cannot be sent again on a new
one if the pooled one turns out closed, so it gets a new connection). A client such as
httpx writes a small JSON body after the head, so the server could not hand it over
with the head: an exec forwarded that way paid a TCP connect each time."""
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"content-length", b"expect", HEADER, PLACED,
})  # fmt: skip
"""Headers of one hop (RFC 9110 §7.6.1), and the length, which goes on as it came or as
the client counts it. `Host` goes on unchanged: the home answers as if asked directly."""
ANSWER_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"trailer", b"upgrade"})


def forwarding_key(jwt_secret: str) -> bytes:
    return hmac.new(jwt_secret.encode(), b"corral node-to-node forwarding", hashlib.sha256).digest()


Serve = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]
Authenticate = Callable[[str | None, str | None], Awaitable[object]]
"""The pipeline's check of a request's credentials (`Authenticator.authenticate`)."""


class Forwarder:
    def __init__(
        self, homes: Homes, key: bytes, regions: Sequence[str] = (), authenticate: Authenticate | None = None
    ) -> None:
        self.homes = homes
        self.key = key
        self.regions = frozenset(regions)
        """`CORRAL_REGIONS`: a create naming another region is left to the route's 422."""
        self.authenticate = authenticate
        """Creates are placed only for valid credentials: no caller without them takes
        the cluster's placement lock or holds room; the route answers its 401."""
        self.placing = trio.CapacityLimiter(PLACING_AT_ONCE)
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
        fields = self._take_signed(scope, HEADER, "")
        if fields is None:
            return False
        scope["client"] = (fields[1], 0)
        return True

    def _take_signed(self, scope: dict[str, Any], header: bytes, label: str) -> tuple[str, str] | None:
        """The two fields of a node-signed header, `<first> <second> <unix time> <HMAC>`
        (signed over `label + first`, `second` and the time), taken out of the scope;
        None when it is absent, malformed, stale or forged."""
        headers = scope["headers"]
        found = [value for name, value in headers if name == header]
        if not found:
            return None
        scope["headers"] = [(name, value) for name, value in headers if name != header]
        parts = found[0].decode("latin-1").split(" ")
        if len(parts) != 4:
            return None
        first, second, stamp, signature = parts
        if not stamp.isdigit() or abs(time.time() - int(stamp)) > SIGNATURE_SECONDS:
            return None
        if not hmac.compare_digest(signature, self._signature(label + first, second, stamp)):
            log.warning("a request came with a wrong signature in %s (%r)", header.decode(), first[:64])
            return None
        return first, second

    # -- forwarding -------------------------------------------------------------------

    async def home_of(self, scope: dict[str, Any]) -> Home | None:
        """The other node to send this request to, or None to serve it here. A request
        forwarded here is served here, unless its resource has just moved off this
        node (a drain): a node that still had this one cached as its home sent it, and
        it goes on, once, to the new home."""
        service = SERVICE_PATH.match(scope["path"])
        domain = DOMAIN_PATH.match(scope["path"])
        match = RESOURCE_PATH.match(scope["path"])
        if service is not None:  # one service of a deployment: where that service runs
            collection, resource_id = "deployment-services", service[1]
        elif domain is not None:
            collection, resource_id = "custom-domains", domain[1]
        elif match is not None:
            collection, resource_id = match[1], match[2]
        else:
            return None
        if self.arrived_forwarded(scope) and not homes.moved_away(resource_id):
            return None
        return await self.homes.elsewhere(collection, resource_id)

    async def forward(
        self, scope: dict[str, Any], receive: Receive, send: Send, home: Home, extra: Sequence[tuple[bytes, bytes]] = ()
    ) -> bool:
        """Send the request to `home` and relay its answer; False when the home could not
        be reached before answering (the caller got a 503), True once it answered."""
        client = scope.get("client")
        headers = [(name, value) for name, value in scope["headers"] if name not in HOP_BY_HOP]
        if not any(name == b"host" for name, _ in headers):
            headers.append((b"host", home.url.split("://", 1)[-1].encode()))
        headers.append((HEADER, self.sign(client[0] if client else "")))
        headers.extend(extra)
        query = scope.get("query_string", b"")
        target = scope["raw_path"] + (b"?" + query if query else b"")
        whole = scope.get("extensions", {}).get("corral.whole_body")
        length = _header(scope, b"content-length")
        if whole is None and length.isdigit() and int(length) <= POOLED_BODY:
            whole = await _whole_body(scope, receive)
            if whole is None:  # the caller went away before its body was in
                return True
        body: bytes | AsyncIterator[bytes] = whole if whole is not None else _body(receive)
        if whole is None and length:  # streamed on with the length it declared (else chunked)
            headers.append((b"content-length", length))
        try:
            answer = await self.client.request(home.url, scope["method"], target, headers, body)
        except NodeUnreachable as exc:
            log.warning("forwarding %s %s to node %s failed: %s", scope["method"], scope["path"], home.name, exc)
            await _unreachable(send, home)
            return False
        answer_headers = [(name, value) for name, value in answer.headers if name not in ANSWER_HOP_BY_HOP]
        whole_answer = answer.body_if_in()
        if whole_answer is not None:  # the answer is in: relayed in one write
            try:
                await send({"type": "http.response.start", "status": answer.status, "headers": answer_headers})
                await send({"type": "http.response.body", "body": whole_answer, "more_body": False})
            finally:
                await answer.aclose()
            return True
        try:
            async with trio.open_nursery() as nursery:
                if whole is not None:  # the body is in: what comes now is the caller leaving
                    nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
                await send({"type": "http.response.start", "status": answer.status, "headers": answer_headers})
                async for chunk in answer.chunks():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                nursery.cancel_scope.cancel()
        except NodeUnreachable as exc:  # the home went away mid-answer: the caller's connection ends
            log.warning("node %s broke off the answer to %s %s: %s", home.name, scope["method"], scope["path"], exc)
        finally:
            await answer.aclose()
        return True

    # -- creates: placed, then served here or forwarded -------------------------------

    def places(self, scope: dict[str, Any]) -> bool:
        """Whether the request is a create, which placement sends to a node (`place`)."""
        path = scope["path"]
        return scope["method"] == "POST" and any(pattern.match(path) is not None for pattern in (CREATE_PATH, REPLICA_PATH, BUILD_PATH))

    def sign_placed(self, claim_id: str, node: str) -> bytes:
        stamp = str(int(time.time()))
        return f"{claim_id} {node} {stamp} {self._signature('placed ' + claim_id, node, stamp)}".encode()

    def placed_claim(self, scope: dict[str, Any]) -> str | None:
        """The claim a create forwarded by placement holds on this node (a valid, fresh
        signature naming this node), else None. Any `X-Corral-Placed` is taken out."""
        fields = self._take_signed(scope, PLACED, "placed ")
        if fields is None or fields[1] != self.homes.node_name:
            return None
        return fields[0]

    async def place(self, scope: dict[str, Any], receive: Receive, send: Send, serve_here: Serve) -> None:
        """A create: placed on a node with room and served there (here, or forwarded with
        its claim); one that another node placed here is served with the claim it holds."""
        if self.arrived_forwarded(scope):
            await self._serve_claimed(scope, receive, send, serve_here, self.placed_claim(scope))
            return
        self.placed_claim(scope)  # a caller's own is dropped
        body = await _small_body(scope, receive, send, "a create")
        if body is None:
            return
        replica_of = REPLICA_PATH.match(scope["path"])
        demand = await self.replica_demand(scope, replica_of[1]) if replica_of else self.demand(scope, body)
        if demand is None or not await self._authenticated(scope):  # the route's answer (401, 400, 422), here
            await serve_here(scope, receive, send)
            return
        try:
            async with self.placing:
                placed = await placement.place(self.homes.db, self.homes.node_name, demand)
        except ApiError as error:
            await _send_error(send, error)
            return
        if placed.node == self.homes.node_name:
            await self._serve_claimed(scope, receive, send, serve_here, placed.claim_id)
            return
        home = Home(placed.node, placed.url)
        _name_forwarded()
        if not await self.forward(scope, receive, send, home, [(PLACED, self.sign_placed(placed.claim_id, placed.node))]):
            with trio.CancelScope(shield=True):
                await claims.release(self.homes.db, placed.claim_id)

    async def _authenticated(self, scope: dict[str, Any]) -> bool:
        if self.authenticate is None:
            return True
        client = scope.get("client")
        try:
            await self.authenticate(_header(scope, b"authorization").decode("latin-1") or None, client[0] if client else None)
        except ApiError:
            return False
        return True

    def demand(self, scope: dict[str, Any], body: bytes) -> placement.Demand | None:
        """What placement needs of a create's body; None for one the route answers
        itself without creating anything (no credentials, a body it refuses)."""
        if not any(name == b"authorization" for name, _ in scope["headers"]):
            return None
        data = _json_object(body)
        if data is None:
            return None
        size, region = data.get("size", "small") if BUILD_PATH.match(scope["path"]) is None else BUILD_SIZE, data.get("region")
        if not isinstance(size, str) or size not in placement.SIZE_NAMES:
            return None
        if region is not None and (not isinstance(region, str) or region not in self.regions):
            return None
        if BUILD_PATH.match(scope["path"]) is not None:  # a build: an instance of its size, of its base
            return placement.Demand("sandbox_template_builds", BUILD_SIZE)
        match = CREATE_PATH.match(scope["path"])
        assert match is not None
        kind, template = match[1], None
        if kind == "sandboxes":
            named = data.get("template_id", "default")
            template = named if isinstance(named, str) else None
        elif kind == "computers":
            found = get_template(data["template_type"]) if isinstance(data.get("template_type"), str) else None
            template = found.runtime_template if found is not None else None
        return placement.Demand(kind, size, template, region)

    async def replica_demand(self, scope: dict[str, Any], primary_id: str) -> placement.Demand | None:
        """A replica's: its primary's size and region, away from its node; None (the
        route answers, where the request is) for a caller without credentials or an id
        that is no live primary."""
        if not any(name == b"authorization" for name, _ in scope["headers"]):
            return None
        row = await self.homes.db.fetch_one(
            "SELECT size, region, node FROM databases WHERE id = ? AND role = 'primary' AND status <> 'deleted'", (primary_id,)
        )
        if row is None or row["size"] not in placement.SIZE_NAMES:
            return None
        return placement.Demand("databases", str(row["size"]), None, str(row["region"]), away_from=row["node"])

    async def _serve_claimed(
        self, scope: dict[str, Any], receive: Receive, send: Send, serve_here: Serve, claim_id: str | None
    ) -> None:
        """Serve a create here; the claim it holds ends with it."""
        if claim_id is None:
            await serve_here(scope, receive, send)
            return
        try:
            with claims.holding(claim_id):
                await serve_here(scope, receive, send)
        finally:
            with trio.CancelScope(shield=True):
                await claims.release(self.homes.db, claim_id)

    # -- publishes and agent runs: served where the resource their body names lives --

    def follows_body(self, scope: dict[str, Any]) -> bool:
        """Whether the request is a publish or a new agent run, served on the node of the
        sandbox or computer its body names (`to_named_home`)."""
        if scope["method"] != "POST":
            return False
        path = scope["path"]
        return PUBLISH_PATH.match(path) is not None or AGENT_RUN_PATH.match(path) is not None

    async def to_named_home(self, scope: dict[str, Any], receive: Receive, send: Send, serve_here: Serve) -> None:
        """A publish packs (or builds in) its `source_sandbox_id`'s files, and a new agent
        run starts a process in its target: only that sandbox's or computer's node
        reaches them, so the request goes there, as the resource's own request does (a
        version's artifact is then written to that node's blob store, which the other
        nodes fetch when they need it; a run's actor follows its process there). A body
        that names no resource this way is served here, where the route answers it."""
        if self.arrived_forwarded(scope):
            await serve_here(scope, receive, send)
            return
        body = await _small_body(scope, receive, send, "a publish" if PUBLISH_PATH.match(scope["path"]) else "an agent run")
        if body is None:
            return
        home = None
        for collection, resource_id in _named_resources(scope["path"], _json_object(body) or {}):
            home = await self.homes.elsewhere(collection, resource_id)
            if home is not None:
                break
        if home is None:
            await serve_here(scope, receive, send)
            return
        _name_forwarded()
        await self.forward(scope, receive, send, home)

    async def aclose(self) -> None:
        await self.client.aclose()


def _named_resources(path: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """The (collection, id) pairs a publish's or a new agent run's body may name, in the
    order the route reads them (`agent_runs.service._target`: `target_id` before
    `sandbox_id` before `computer_id`; a target without a kind may be either)."""
    if PUBLISH_PATH.match(path):
        named, kinds = body.get("source_sandbox_id"), ["sandboxes"]
    else:
        kind = body.get("target_kind")
        if body.get("sandbox_id"):
            kind = kind or "sandbox"
            named = body.get("target_id") or body.get("sandbox_id")
        elif body.get("computer_id"):
            kind = kind or "computer"
            named = body.get("target_id") or body.get("computer_id")
        else:
            named = body.get("target_id")
        kinds = [TARGET_COLLECTIONS[kind]] if isinstance(kind, str) and kind in TARGET_COLLECTIONS else ["sandboxes", "computers"]
    if not isinstance(named, str) or not RESOURCE_ID.match(named):
        return []
    return [(collection, named.lower()) for collection in kinds]


def _name_forwarded() -> None:
    """Name the request's route as the front names a forwarded request's."""
    record = current()
    if record is not None:
        record.route = "forwarded"


async def _small_body(scope: dict[str, Any], receive: Receive, send: Send, what: str) -> bytes | None:
    """The body of a request read whole to decide where it goes (a create, a publish);
    None when the caller went away or it was past `MAX_CREATE_BODY` (answered 413)."""
    body = await _whole_body(scope, receive)
    if body is not None and len(body) > MAX_CREATE_BODY:
        await _send_error(send, ApiError(413, "PAYLOAD_TOO_LARGE", f"{what}'s body may be at most {MAX_CREATE_BODY} bytes"))
        return None
    return body


def _json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object (empty: `{}`); None when it is not one (the route answers)."""
    try:
        data = json.loads(body) if body.strip() else {}
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    return data if isinstance(data, dict) else None


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


async def _whole_body(scope: dict[str, Any], receive: Receive) -> bytes | None:
    """The request's body, read whole (up to one byte past `MAX_CREATE_BODY`) and handed
    on in the scope as the server hands over one that came with its head; None when
    the caller went away first."""
    extensions = scope.setdefault("extensions", {})
    whole = extensions.get("corral.whole_body")
    if whole is not None:
        return bytes(whole)
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_CREATE_BODY or not message.get("more_body", False):
            break
    extensions["corral.whole_body"] = bytes(body)
    return bytes(body)


async def _unreachable(send: Send, home: Home) -> None:
    message = f"the node that hosts this resource ({home.name}) cannot be reached; try again shortly"
    await _send_error(send, ApiError(503, "SERVICE_UNAVAILABLE", message, headers={"Retry-After": "2"}))


async def _send_error(send: Send, error: ApiError) -> None:
    request_id = new_request_id()
    answer = error_answer(error, request_id)
    assert isinstance(answer, JsonAnswer)
    await send({"type": "http.response.start", "status": answer.status_code, "headers": answer.raw_headers()})
    await send({"type": "http.response.body", "body": answer.body})


__all__ = ["Forwarder", "forwarding_key"]

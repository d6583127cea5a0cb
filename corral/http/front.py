"""The API's routes served straight from ASGI, with Quart behind for everything else.

Quart cost more than half of a plain authenticated GET (issue 28: 0.46x of a raw
hypercorn ASGI app): a request context pushed and popped, a werkzeug URL adapter
bound per request, its `Request` and `Response` wrappers, a task group per
connection. The pipeline (`pipeline.py`) needs none of it: it takes the route, the
path parameters and the request's headers, query and body. So `ApiFront` matches
a request against the same werkzeug rules Quart would (one `MapAdapter`, bound once)
and runs the pipeline itself, with `ApiRequest`, a small request made from the ASGI
scope. Whatever it does not recognise goes to Quart unchanged, and answers exactly
as before: unknown paths and methods (the 404 and 405 envelopes), `HEAD`, multipart
bodies (Quart parses forms and files), WebSockets, `/healthz`, the OpenAPI document,
lifespan.

A body that came in whole with its head (nearly every request: the server offers it
as `corral.whole_body`) is taken from the scope, and the handler runs alone, without
a task that follows the client (such a task cost a tenth of an exec); only a streamed
answer then follows the client, to stop when it leaves. A body still on its way is
read by a task of its own while the handler runs, as Quart does, and a client that
goes away then cancels the handler (its call to the agent is cut; the agent lets an
exec's command run to its end, as it did under Quart); a body larger than the server
takes is a 413, one that stalls a 408. Whole JSON answers go out as `replies.JsonAnswer`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from functools import cached_property
from typing import Any
from urllib.parse import parse_qsl

import trio
from quart.utils import encode_headers
from quart.wrappers.response import DataBody
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge, RequestTimeout
from werkzeug.routing import Map, MapAdapter, Rule

from .forward import Forwarder
from .forward_ws import forward_websocket
from .observe import current
from .replies import Answer, JsonAnswer
from .routing import Route

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]
RunRoute = Callable[[Route, dict[str, Any], "ApiRequest"], Awaitable[Answer]]

FORM_TYPES = (b"multipart/", b"application/x-www-form-urlencoded")
"""Bodies Quart parses into `form` and `files`: their requests are Quart's to serve."""
FORWARDED = "forwarded"
"""The route of a request this node sent on to the resource's home (its record's label)."""
BODY_TIMEOUT = 60.0
"""As Quart's `BODY_TIMEOUT`: a body that does not arrive within this is a 408."""
MATCHES_KEPT = 4096
"""Paths whose route `ApiFront.match` remembers (all forgotten at once when full)."""


def declared_length(scope: dict[str, Any]) -> int | None:
    """The request's `Content-Length`, if it declared a valid one."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class _Body:
    """The request body, filled by the front's reader task while the handler runs."""

    def __init__(self, length: int | None, max_bytes: int) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.max_bytes = max_bytes
        self.too_large = length is not None and length > max_bytes
        self.complete = trio.Event()

    def append(self, data: bytes) -> None:
        if self.too_large or not data:
            return
        self.size += len(data)
        if self.size > self.max_bytes:
            self.too_large = True
            self.chunks.clear()
            return
        self.chunks.append(data)


class RequestHeaders:
    """A request's headers by case-insensitive name, the first of repeated ones (as
    werkzeug's `Headers.get`, which is all that handlers ask of them, at a tenth of
    its cost)."""

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._values: dict[str, str] = {}
        for name, value in raw:
            self._values.setdefault(name.decode("latin1").lower(), value.decode("latin1"))

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values


class ApiRequest:
    """What the pipeline and the handlers read of a request (the part of
    `quart.Request` they use), made from the ASGI scope."""

    def __init__(self, scope: dict[str, Any], body: _Body) -> None:
        self.scope = scope
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.query_string: bytes = scope.get("query_string", b"")
        client = scope.get("client")
        self.remote_addr: str | None = client[0] if client else None
        self._body = body
        self.after_answer: list[Callable[[], Awaitable[None]]] = []
        """Work the pipeline leaves until the answer is out (the audit row)."""

    @cached_property
    def headers(self) -> RequestHeaders:
        return RequestHeaders(self.scope["headers"])

    @cached_property
    def args(self) -> MultiDict[str, str]:
        if not self.query_string:
            return MultiDict()
        return MultiDict(parse_qsl(self.query_string.decode("latin1"), keep_blank_values=True))

    @property
    def full_path(self) -> str:
        """Path and query, as werkzeug spells it (always with the `?`)."""
        return f"{self.path}?{self.query_string.decode('latin1')}"

    @property
    def host_url(self) -> str:
        return f"{self.scope.get('scheme', 'http')}://{self.headers.get('Host', '')}/"

    async def get_data(self, cache: bool = True, as_text: bool = False) -> Any:
        """The whole body (`cache` is accepted for Quart's signature: it is always kept).

        A body already in (nearly always: it came with the head) is taken without a
        wait: `Event.wait` on a set event still yields to the scheduler, a trip every
        other ready task and a poll of the sockets ride on, on the way to the agent
        (issue 28: one of the exec's five scheduler steps)."""
        if not self._body.complete.is_set():
            with trio.move_on_after(BODY_TIMEOUT):
                await self._body.complete.wait()
        if self._body.too_large:
            raise RequestEntityTooLarge()
        if not self._body.complete.is_set():
            raise RequestTimeout()
        data = b"".join(self._body.chunks)
        return data.decode() if as_text else data

    @property
    async def files(self) -> MultiDict[str, Any]:
        """Empty, as Quart's is for a body that is not a form (forms are Quart's: `FORM_TYPES`)."""
        return MultiDict()

    @property
    async def form(self) -> MultiDict[str, str]:
        return MultiDict()


class ApiFront:
    """The ASGI application `corral serve` runs: `routes` through `run`, the rest through `fallback`."""

    def __init__(
        self, routes: Iterable[Route], run: RunRoute, fallback: AsgiApp, max_body_bytes: int, forwarder: Forwarder | None = None
    ) -> None:
        self.forwarder = forwarder
        """On a store several nodes share: sends a resource's requests to its home node."""
        self.routes = list(routes)
        self.run = run
        self.fallback = fallback
        self.max_body_bytes = max_body_bytes
        rules = [Rule(route.rule, endpoint=index, methods=[route.method]) for index, route in enumerate(self.routes)]
        self.adapter: MapAdapter = Map(rules).bind("localhost")
        self._matched: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        """The adapter's answers by path and method: a client calls the same paths again
        (an exec loop on one sandbox), and a werkzeug match costs a tenth of the pipeline."""

    def match(self, scope: dict[str, Any]) -> tuple[Route, dict[str, Any]] | None:
        """The route and path parameters Quart would find, or None for what Quart serves itself."""
        if scope["type"] != "http" or scope["method"] == "HEAD":
            return None
        for name, value in scope["headers"]:
            if name.lower() == b"content-type" and value.lower().startswith(FORM_TYPES):
                return None
        key = (scope["path"], scope["method"])
        known = self._matched.get(key)
        if known is None:
            try:
                index, params = self.adapter.match(*key)
            except HTTPException:  # not found, not allowed, or a redirect: Quart's answers
                return None
            if len(self._matched) >= MATCHES_KEPT:
                self._matched.clear()
            known = self._matched[key] = (int(index), dict(params))
        return self.routes[known[0]], dict(known[1])

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        forwarder = self.forwarder
        if forwarder is not None and scope["type"] == "websocket":
            home = await forwarder.home_of(scope)
            if home is not None:  # a WebSocket of a resource on another node: relayed there
                await forward_websocket(forwarder, scope, receive, send, home)
                return
        if forwarder is not None and scope["type"] == "http" and forwarder.places(scope):
            await forwarder.place(scope, receive, send, self._serve)  # a create: placed on a node with room
            return
        if forwarder is not None and scope["type"] == "http" and forwarder.follows_body(scope):
            await forwarder.to_named_home(scope, receive, send, self._serve)  # where the sandbox it names is
            return
        if forwarder is not None and scope["type"] == "http":
            home = await forwarder.home_of(scope)
            if home is not None:  # the resource lives on another node: its request goes there
                record = current()
                if record is not None:
                    record.route = FORWARDED
                await forwarder.forward(scope, receive, send, home)
                return
        await self._serve(scope, receive, send)

    async def _serve(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        """Serve the request on this node: a route through the pipeline, the rest through Quart."""
        matched = self.match(scope)
        if matched is None:
            await self.fallback(scope, receive, send)
            return
        route, params = matched
        length = declared_length(scope)
        body = _Body(length, self.max_body_bytes)
        whole = scope.get("extensions", {}).get("corral.whole_body")
        if whole is not None:
            # The server had the whole body with the head (`corral.asgi_server`): no task
            # reads it, and none follows the client while the handler runs (a client that
            # hangs up mid-exec gets no answer; the exec and its events complete as if it
            # had stayed). A streamed answer still stops when the client leaves.
            body.append(whole)
            await self._answer_whole(route, params, ApiRequest(scope, body), send, receive)
            return
        if not route.is_mutation and not length and not _chunked(scope):
            # A read without a body: its one (empty) body message is already in, so no
            # task follows the body; a client leaving only matters to a stream, which
            # `_send_response` watches.
            if (await receive())["type"] == "http.disconnect":
                return
            await self._answer_whole(route, params, ApiRequest(scope, body), send, receive)
            return
        request = ApiRequest(scope, body)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_body, receive, body, nursery.cancel_scope)
                answer = await self.run(route, params, request)
                await _send_response(send, answer, None)
                nursery.cancel_scope.cancel()
        finally:
            await _after_answer(request)


    async def _answer_whole(
        self, route: Route, params: dict[str, Any], request: ApiRequest, send: Send, receive: Receive
    ) -> None:
        """Run a request whose body is all in, send its answer, then what it left for after."""
        request._body.complete.set()
        answer = await self.run(route, params, request)
        try:
            await _send_response(send, answer, receive)
        finally:
            await _after_answer(request)


async def _after_answer(request: ApiRequest) -> None:
    """What the pipeline left for after the answer (its audit row), also when the
    client went away or the handler was cancelled with it."""
    with trio.CancelScope(shield=True):
        for work in request.after_answer:
            await work()


def _chunked(scope: dict[str, Any]) -> bool:
    return any(name.lower() == b"transfer-encoding" for name, _ in scope["headers"])


async def _read_body(receive: Receive, body: _Body, on_disconnect: trio.CancelScope) -> None:
    """Collect the rest of the body; when the client goes away, cancel the request (as Quart does)."""
    while True:
        message = await receive()
        if message["type"] == "http.request":
            body.append(message.get("body", b""))
            if not message.get("more_body", False):
                body.complete.set()
        elif message["type"] == "http.disconnect":
            on_disconnect.cancel()
            return


async def _send_response(send: Send, answer: Answer, watch: Receive | None) -> None:
    """Send the answer; a streamed one stops when the client goes away (`watch`: the
    receive channel to follow for that, unless the caller already does)."""
    if isinstance(answer, JsonAnswer):  # a whole body: two messages, one write
        await send({"type": "http.response.start", "status": answer.status_code, "headers": answer.raw_headers()})
        await send({"type": "http.response.body", "body": answer.body, "more_body": False})
        return
    await send({"type": "http.response.start", "status": answer.status_code, "headers": encode_headers(answer.headers)})
    if isinstance(answer.response, DataBody):
        await send({"type": "http.response.body", "body": answer.response.data, "more_body": False})
        return
    async with trio.open_nursery() as nursery:
        if watch is not None:
            nursery.start_soon(_read_body, watch, _Body(0, 0), nursery.cancel_scope)
        async with answer.response as chunks:
            async for data in chunks:
                await send({"type": "http.response.body", "body": data.encode() if isinstance(data, str) else data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        nursery.cancel_scope.cancel()


__all__ = ["ApiFront", "ApiRequest"]

"""Keep-alive connections that survive an answer given before the request body arrived.

Many routes answer without reading the body: a 401 for a missing key, a 400 for an
ill-formed id, a 404. A client such as `requests` writes a POST's headers and its body
separately, so such an answer can leave before the body has come in. Hypercorn (0.18,
trio worker) then means to close the connection, since the request is not over; but
it does so in the application's task after the last body message, and quart-trio
cancels that task as soon as hypercorn reports the stream closed. The close never
happens: the connection stays open, the late body and the client's next request on
it are buffered, and nothing reads them again. That next request, on any route, gets
no answer at all (issue 26: 15 of 11,353 fuzzed requests, 30 s each).

`whole_request_first` wraps the ASGI application so that:

- an answer waits (up to `BODY_WAIT_SECONDS`) until the request body is in, which it
  nearly always already is or will be within milliseconds; the connection is then
  reused as usual;
- a body that does not come within that time, or that is larger than the server takes
  (the 413 of `MAX_CONTENT_LENGTH`), gets `Connection: close` on the answer instead of
  a wait;
- the last message of every answer is sent shielded from that cancellation, so that
  hypercorn's own recycling or closing of the connection always runs to its end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

BODY_WAIT_SECONDS = 10.0


def declared_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def whole_request_first(app: Callable[..., Awaitable[None]], max_body_bytes: int) -> AsgiApp:
    async def wrapped(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        body_in = trio.Event()
        length = declared_length(scope)
        too_large = length is not None and length > max_body_bytes

        async def receive_noting_the_end() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" or (message["type"] == "http.request" and not message.get("more_body", False)):
                body_in.set()
            return message

        async def send_after_the_body(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start" and not body_in.is_set():
                if not too_large:
                    with trio.move_on_after(BODY_WAIT_SECONDS):
                        await body_in.wait()
                if not body_in.is_set():
                    message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            if kind == "http.response.body" and not message.get("more_body", False):
                with trio.CancelScope(shield=True):
                    await send(message)
                return
            await send(message)

        await app(scope, receive_noting_the_end, send_after_the_body)

    return wrapped

"""HTTP/1.1 to the other nodes of the cluster, on h11, with kept-alive connections.

What forwarding (`forward.py`) needs of a client is narrow: send a request head and a
body (whole, or streamed as it comes), get the answer's head, then its body chunk by
chunk as it arrives, and keep the connection for the next request. With httpx a forward
added 1.44 ms at p50 on this machine, with this 0.79 ms (`tools/bench/nodes.py`; issue
30's goal: at most 1 ms); on a slower run, a forwarded exec added 1.46 ms, and 0.98 ms
once these sockets no longer went through the scheduler and a whole answer was relayed
in one write (`Answer.body_if_in`). h11 does the framing, both
ways; this module only pools connections and moves bytes, on `corral.sockets.DirectSocket`
(no trip through the scheduler for a send or read that need not wait, as in the server).

A request on a pooled connection that the other node closed meanwhile (its idle
timeout, a restart) fails before any answer came; a whole body is then sent again once
on a new connection. A streamed body cannot be sent twice, so its request goes on a
new connection from the start.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11
import trio

from corral.sockets import DirectSocket

READ_SIZE = 65536
MAX_IDLE_PER_NODE = 32
CONNECT_SECONDS = 5.0


class NodeUnreachable(Exception):
    """The other node could not be connected to, or broke off before answering."""


@dataclass
class _Connection:
    stream: DirectSocket
    h11: h11.Connection

    async def next_event(self) -> object:
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.stream.receive_some(READ_SIZE))
                continue
            return event


class Answer:
    """An answer's status and headers; `chunks()` its body as it comes. Close it (or use
    it as a context manager) to give its connection back."""

    def __init__(self, client: NodeClient, address: tuple[str, int], connection: _Connection, head: h11.Response) -> None:
        self._client = client
        self._address = address
        self._connection: _Connection | None = connection
        self.status = head.status_code
        self.headers: list[tuple[bytes, bytes]] = list(head.headers)
        self._done = False
        self._early: list[bytes] = []
        self._stopped: object = None
        """What `body_if_in` met that was neither body nor its end (chunks() fails on it)."""

    def body_if_in(self) -> bytes | None:
        """The whole body when it is in already (it came with the head, as a JSON answer
        does), read without waiting; else None, and `chunks()` yields it all as it comes.
        A whole answer is relayed in one write, with no task to watch the caller."""
        connection = self._connection
        assert connection is not None
        while True:
            try:
                event = connection.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._stopped = exc
                return None
            if isinstance(event, h11.Data):
                self._early.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._done = True
                body, self._early = b"".join(self._early), []
                return body
            else:
                self._stopped = None if event is h11.NEED_DATA else event
                return None

    async def chunks(self) -> AsyncIterator[bytes]:
        connection = self._connection
        assert connection is not None
        early, self._early = self._early, []
        for chunk in early:
            yield chunk
        if self._stopped is not None:
            raise NodeUnreachable(f"the answer broke off ({self._stopped})")
        while True:
            try:
                event = await connection.next_event()
            except (h11.RemoteProtocolError, trio.BrokenResourceError, OSError) as exc:
                raise NodeUnreachable(f"the answer broke off: {exc}") from exc
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._done = True
                return
            else:
                raise NodeUnreachable(f"the answer broke off ({type(event).__name__})")

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._done and connection.h11.our_state is h11.DONE and connection.h11.their_state is h11.DONE:
            connection.h11.start_next_cycle()
            self._client._give_back(self._address, connection)
        else:
            connection.stream.close()

    async def __aenter__(self) -> Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class NodeClient:
    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def request(
        self, base_url: str, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes | AsyncIterator[bytes]
    ) -> Answer:
        """Send the request to the node at `base_url` (`http://host:port`); the answer once
        its head is in. `headers` must not hold the framing ones: they are set here."""
        parts = urlsplit(base_url)
        address = (parts.hostname or "127.0.0.1", parts.port or 80)
        if isinstance(body, bytes):
            framing = [(b"content-length", str(len(body)).encode())] if body or method not in ("GET", "HEAD") else []
            request = h11.Request(method=method, target=target, headers=[*headers, *framing])
            pooled = self._take(address)
            if pooled is not None:
                with contextlib.suppress(NodeUnreachable):
                    return await self._exchange(address, pooled, request, body)
            return await self._exchange(address, await self._connect(address), request, body)
        declared = any(name == b"content-length" for name, _ in headers)
        framing = [] if declared else [(b"transfer-encoding", b"chunked")]
        request = h11.Request(method=method, target=target, headers=[*headers, *framing])
        return await self._exchange(address, await self._connect(address), request, body)

    async def _exchange(
        self, address: tuple[str, int], connection: _Connection, request: h11.Request, body: bytes | AsyncIterator[bytes]
    ) -> Answer:
        try:
            h = connection.h11
            if isinstance(body, bytes):
                await connection.stream.send_all(h.send(request) + (h.send(h11.Data(data=body)) if body else b"") + h.send(h11.EndOfMessage()))
            else:
                await connection.stream.send_all(h.send(request))
                async for chunk in body:
                    if chunk:
                        await connection.stream.send_all(h.send(h11.Data(data=chunk)))
                await connection.stream.send_all(h.send(h11.EndOfMessage()))
            while True:
                event = await connection.next_event()
                if isinstance(event, h11.InformationalResponse):
                    continue
                if isinstance(event, h11.Response):
                    return Answer(self, address, connection, event)
                raise NodeUnreachable(f"no answer came ({type(event).__name__})")
        except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError, NodeUnreachable) as exc:
            connection.stream.close()
            raise NodeUnreachable(str(exc) or type(exc).__name__) from exc
        except BaseException:
            connection.stream.close()
            raise

    async def _connect(self, address: tuple[str, int]) -> _Connection:
        try:
            with trio.fail_after(CONNECT_SECONDS):
                stream = await DirectSocket.connect(*address)
        except (OSError, trio.TooSlowError) as exc:
            raise NodeUnreachable(f"cannot connect to {address[0]}:{address[1]}: {exc}") from exc
        return _Connection(stream, h11.Connection(h11.CLIENT))

    def _take(self, address: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(address)
        return idle.pop() if idle else None

    def _give_back(self, address: tuple[str, int], connection: _Connection) -> None:
        idle = self._idle.setdefault(address, [])
        if len(idle) < MAX_IDLE_PER_NODE:
            idle.append(connection)
        else:
            connection.stream.close()

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.stream.close()
        self._idle.clear()


__all__ = ["Answer", "NodeClient", "NodeUnreachable"]

"""A TCP proxy whose connections a test can cut, to see clients survive a dropped stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from functools import partial

import trio

from tests.support import free_port


class CuttableProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.connections = 0
        self._scopes: list[trio.CancelScope] = []

    def cut(self) -> None:
        """Drop every open connection (the client sees its stream break mid-body)."""
        for scope in self._scopes:
            scope.cancel()
        self._scopes.clear()

    async def _handle(self, client: trio.SocketStream) -> None:
        self.connections += 1
        with trio.CancelScope() as scope:
            self._scopes.append(scope)
            upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
            async with upstream, client, trio.open_nursery() as nursery:
                nursery.start_soon(self._pipe, client, upstream, nursery.cancel_scope)
                nursery.start_soon(self._pipe, upstream, client, nursery.cancel_scope)
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await client.aclose()

    @staticmethod
    async def _pipe(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        done.cancel()


@asynccontextmanager
async def cuttable_proxy(target_port: int) -> AsyncIterator[CuttableProxy]:
    proxy = CuttableProxy(target_port)
    async with trio.open_nursery() as nursery:
        proxy.port = free_port()
        await nursery.start(partial(trio.serve_tcp, proxy._handle, proxy.port, host="127.0.0.1"))
        yield proxy
        nursery.cancel_scope.cancel()

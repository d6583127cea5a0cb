"""A `corral.client` bound to a test server: the async client directly, the blocking
one in a worker thread (the server runs on this test's trio loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

from corral.client import AsyncClient, Client
from tests.support import Api

T = TypeVar("T")


def base_url(api: Api) -> str:
    return f"http://127.0.0.1:{api.platform.settings.port}"


def sync_client(api: Api, key: str | None) -> Client:
    return Client(base_url(api), key, timeout=60)


def async_client(api: Api, key: str | None) -> AsyncClient:
    return AsyncClient(base_url(api), key, timeout=60)


async def in_thread(function: Callable[[], T]) -> T:
    """Run blocking client code off the loop that serves it."""
    return await trio.to_thread.run_sync(function)

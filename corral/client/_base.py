"""The transport under the generated methods: one request path for sync and async.

`SyncBase` and `AsyncBase` build a request from an operation's path template, path,
query and body values, send it with the credential, retry it by `RetryPolicy`, and
raise the `CorralError` of any error reply. The generated classes
(`_generated.py`) are one small method per operation on top of `_call` (JSON,
bytes or nothing) and `_events` (an SSE stream).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Literal
from urllib.parse import quote

import anyio
import httpx

from corral import __version__

from ._types import UNSET, without_unset
from .errors import CorralConnectionError, error_from_response
from .retry import RetryPolicy
from .sse import Event, SSEParser

__all__ = ["DEFAULT_URL", "AsyncBase", "AsyncEventStream", "EventStream", "Expect", "SyncBase"]

DEFAULT_URL = "http://127.0.0.1:8080"
TICKET_PATH = "/api/v1/auth/sse-ticket"
STREAM_TIMEOUT = httpx.Timeout(30.0, read=None)
"""Streams wait for events as long as it takes; the server's heartbeats keep them open."""
Expect = Literal["json", "bytes", "text", "none"]


class _Common:
    """What the sync and async clients share: the base URL, credential and request shape."""

    def _configure(self, base_url: str | None, api_key: str | None, timeout: float, retry: RetryPolicy) -> None:
        self.base_url = (base_url or DEFAULT_URL).rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retry = retry

    def _headers(self, extra: dict[str, str] | None = None, *, auth: bool = True) -> dict[str, str]:
        headers = {"User-Agent": f"corral-python/{__version__}", "Accept": "application/json"}
        if auth and self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(extra or {})
        return headers

    def url(self, template: str, path: dict[str, Any] | None = None) -> str:
        """The absolute URL of `template` (`/api/v1/sandboxes/{id}`) with its parameters quoted."""
        for name, value in (path or {}).items():
            template = template.replace("{" + name + "}", quote(str(value), safe=""))
        return self.base_url + template

    @staticmethod
    def _query(query: dict[str, Any] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in (query or {}).items():
            if value is None or value is UNSET:
                continue
            out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out

    @staticmethod
    def _idempotency(headers: dict[str, str], idempotent: bool, key: str | None) -> dict[str, str]:
        """An `Idempotency-Key` on routes that honour one: the caller's, else a fresh one that
        every retry of this call reuses (so a retried publish is done once)."""
        if idempotent:
            headers["Idempotency-Key"] = key or f"corral-py-{uuid.uuid4()}"
        return headers

    def _timeout_for(self, body: Any) -> float | None:
        """Work that the body gives a `timeout` (an exec of up to 300 s) gets that long plus a margin."""
        wanted = body.get("timeout") if isinstance(body, dict) else None
        if isinstance(wanted, int | float) and not isinstance(wanted, bool) and wanted + 30 > self.timeout:
            return float(wanted) + 30
        return None

    @staticmethod
    def _decode(response: httpx.Response, expect: Expect) -> Any:
        if expect == "none" or response.status_code == 204:
            return None
        if expect == "bytes":
            return response.content
        if expect == "text":
            return response.text
        return response.json() if response.content else None


class SyncBase(_Common):
    """A blocking client (httpx.Client). Close it, or use it as a context manager."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        http: httpx.Client | None = None,
    ) -> None:
        self._configure(base_url, api_key, timeout, RetryPolicy(max_retries=max_retries, backoff=backoff))
        self._http = http or httpx.Client(timeout=timeout, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SyncBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = UNSET,
        headers: dict[str, str] | None = None,
        files: Any = None,
        data: Any = None,
        timeout: float | None = None,
        auth: bool = True,
    ) -> httpx.Response:
        """Send with retries; the response of a success, else the error raised."""
        all_headers = self._headers(headers, auth=auth)
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    method,
                    url,
                    params=self._query(params),
                    json=None if json is UNSET else json,
                    headers=all_headers,
                    files=files,
                    data=data,
                    timeout=timeout or self.timeout,
                )
            except httpx.TransportError as error:
                delay = self.retry.delay_for_error(attempt, method, httpx.Headers(all_headers), error)
                if delay is None:
                    raise CorralConnectionError(f"{method} {url}: {error or type(error).__name__}") from error
            else:
                if response.status_code < 400:
                    return response
                delay = self.retry.delay_for_status(attempt, method, response)
                if delay is None:
                    raise error_from_response(response)
            time.sleep(delay)
            attempt += 1

    def _call(
        self,
        method: str,
        template: str,
        *,
        path: dict[str, Any] | None = None,
        query: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        idempotent: bool = False,
        idempotency_key: str | None = None,
        expect: Expect = "json",
        request_timeout: float | None = None,
    ) -> Any:
        headers = self._idempotency({}, idempotent, idempotency_key)
        json_body: Any = UNSET if body is None else without_unset(body)
        request_timeout = request_timeout or self._timeout_for(json_body)
        response = self.request(
            method, self.url(template, path), params=query, json=json_body, headers=headers, timeout=request_timeout
        )
        return self._decode(response, expect)

    @contextmanager
    def open_stream(
        self, method: str, url: str, *, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None, auth: bool = True
    ) -> Iterator[httpx.Response]:
        """A response whose body is read as it arrives (downloads, SSE); errors raised."""
        try:
            with self._http.stream(
                method, url, params=self._query(params), headers=self._headers(headers, auth=auth), timeout=STREAM_TIMEOUT
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_from_response(response)
                yield response
        except httpx.ConnectError as error:
            raise CorralConnectionError(f"{method} {url}: {error}") from error

    def _events(
        self,
        template: str,
        *,
        path: dict[str, Any] | None = None,
        query: dict[str, Any] | None = None,
        last_event_id: str | None = None,
        ticket: bool = False,
        ticket_path: str = TICKET_PATH,
    ) -> EventStream:
        return EventStream(self, self.url(template, path), query or {}, last_event_id, ticket_path if ticket else None)

    def call(self, method: str, template: str, **options: Any) -> Any:
        """Any route by its path (`/api/v1/...`, with `{name}`s filled from `path=`): for
        routes newer than this client. Same options and behaviour as the generated methods."""
        return self._call(method, template, **options)

    def events(self, template: str, **options: Any) -> EventStream:
        """Any SSE route by its path, as the generated `stream_*` methods open theirs."""
        return self._events(template, **options)

    def mint_ticket(self, ticket_path: str = TICKET_PATH) -> str:
        """A single-use SSE ticket (60 s) for `?ticket=`."""
        body = self.request("POST", self.base_url + ticket_path).json()
        return str(body["ticket"])


class EventStream:
    """The events of one SSE stream, reconnecting with `Last-Event-ID` after a drop.

    Iterate it (`for event in stream`); `last_event_id` is the last id seen, so a
    later stream can resume from there. Use it as a context manager, or `close()`
    it, to hang up before the server ends the stream."""

    def __init__(
        self,
        client: SyncBase,
        url: str,
        params: dict[str, Any],
        last_event_id: str | None,
        ticket_path: str | None,
        reconnects: int = 5,
    ) -> None:
        self._client = client
        self._url = url
        self._params = params
        self.last_event_id = last_event_id
        self._ticket_path = ticket_path
        self._reconnects = reconnects
        self._iterator: Generator[Event | None, None, None] | None = None
        self._response: httpx.Response | None = None
        self._closed = False

    def connect(self) -> EventStream:
        """Open the stream now and wait until the server has subscribed it (its first
        bytes): whatever happens afterwards is in the stream. `with` does this."""
        if self._iterator is None:
            self._iterator = self._run()
            next(self._iterator, None)
        return self

    def __iter__(self) -> Iterator[Event]:
        if self._iterator is None:
            self._iterator = self._run()
        return (item for item in self._iterator if item is not None)

    def __enter__(self) -> EventStream:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Hang up; safe from another thread than the one iterating (it then stops)."""
        self._closed = True
        if self._response is not None:
            with contextlib.suppress(Exception):
                self._response.close()
        if self._iterator is not None:
            with contextlib.suppress(ValueError):  # being iterated in another thread: it stops by itself
                self._iterator.close()

    def _run(self) -> Generator[Event | None, None, None]:
        """Events, and one None once the first connection delivered its first bytes."""
        failures, ready = 0, False
        while True:
            params, headers = dict(self._params), {"Accept": "text/event-stream"}
            if self.last_event_id is not None:
                headers["Last-Event-ID"] = self.last_event_id
            if self._ticket_path is not None:
                params["ticket"] = self._client.mint_ticket(self._ticket_path)
            parser = SSEParser(last_id=self.last_event_id)
            try:
                with self._client.open_stream("GET", self._url, params=params, headers=headers, auth=self._ticket_path is None) as response:
                    self._response = response
                    for chunk in response.iter_bytes():
                        events = parser.feed(chunk)
                        if not ready:
                            ready = True
                            yield None
                        for event in events:
                            failures = 0
                            if event.id is not None:
                                self.last_event_id = event.id
                            yield event
                return  # the server ended the stream
            except (httpx.TransportError, httpx.StreamError, CorralConnectionError):
                if self._closed:
                    return
                failures += 1
                if failures > self._reconnects:
                    raise
                time.sleep(min(5.0, 0.25 * 2**failures))


class AsyncBase(_Common):
    """The async client (httpx.AsyncClient): runs under trio or asyncio."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._configure(base_url, api_key, timeout, RetryPolicy(max_retries=max_retries, backoff=backoff))
        self._http = http or httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = UNSET,
        headers: dict[str, str] | None = None,
        files: Any = None,
        data: Any = None,
        timeout: float | None = None,
        auth: bool = True,
    ) -> httpx.Response:
        all_headers = self._headers(headers, auth=auth)
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    method,
                    url,
                    params=self._query(params),
                    json=None if json is UNSET else json,
                    headers=all_headers,
                    files=files,
                    data=data,
                    timeout=timeout or self.timeout,
                )
            except httpx.TransportError as error:
                delay = self.retry.delay_for_error(attempt, method, httpx.Headers(all_headers), error)
                if delay is None:
                    raise CorralConnectionError(f"{method} {url}: {error or type(error).__name__}") from error
            else:
                if response.status_code < 400:
                    return response
                delay = self.retry.delay_for_status(attempt, method, response)
                if delay is None:
                    raise error_from_response(response)
            await anyio.sleep(delay)
            attempt += 1

    async def _call(
        self,
        method: str,
        template: str,
        *,
        path: dict[str, Any] | None = None,
        query: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        idempotent: bool = False,
        idempotency_key: str | None = None,
        expect: Expect = "json",
        request_timeout: float | None = None,
    ) -> Any:
        headers = self._idempotency({}, idempotent, idempotency_key)
        json_body: Any = UNSET if body is None else without_unset(body)
        request_timeout = request_timeout or self._timeout_for(json_body)
        response = await self.request(
            method, self.url(template, path), params=query, json=json_body, headers=headers, timeout=request_timeout
        )
        return self._decode(response, expect)

    @asynccontextmanager
    async def open_stream(
        self, method: str, url: str, *, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None, auth: bool = True
    ) -> AsyncIterator[httpx.Response]:
        try:
            async with self._http.stream(
                method, url, params=self._query(params), headers=self._headers(headers, auth=auth), timeout=STREAM_TIMEOUT
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from_response(response)
                yield response
        except httpx.ConnectError as error:
            raise CorralConnectionError(f"{method} {url}: {error}") from error

    def _events(
        self,
        template: str,
        *,
        path: dict[str, Any] | None = None,
        query: dict[str, Any] | None = None,
        last_event_id: str | None = None,
        ticket: bool = False,
        ticket_path: str = TICKET_PATH,
    ) -> AsyncEventStream:
        return AsyncEventStream(self, self.url(template, path), query or {}, last_event_id, ticket_path if ticket else None)

    async def call(self, method: str, template: str, **options: Any) -> Any:
        """Any route by its path: for routes newer than this client."""
        return await self._call(method, template, **options)

    def events(self, template: str, **options: Any) -> AsyncEventStream:
        """Any SSE route by its path."""
        return self._events(template, **options)

    async def mint_ticket(self, ticket_path: str = TICKET_PATH) -> str:
        body = (await self.request("POST", self.base_url + ticket_path)).json()
        return str(body["ticket"])


class AsyncEventStream:
    """`EventStream` for the async client: `async with stream: async for event in stream`."""

    def __init__(
        self,
        client: AsyncBase,
        url: str,
        params: dict[str, Any],
        last_event_id: str | None,
        ticket_path: str | None,
        reconnects: int = 5,
    ) -> None:
        self._client = client
        self._url = url
        self._params = params
        self.last_event_id = last_event_id
        self._ticket_path = ticket_path
        self._reconnects = reconnects
        self._iterator: Any = None

    async def connect(self) -> AsyncEventStream:
        """Open the stream and wait until the server has subscribed it; `async with` does this."""
        if self._iterator is None:
            self._iterator = self._run()
            await anext(self._iterator, None)
        return self

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._iterator is None:
            self._iterator = self._run()
        return self._events(self._iterator)

    @staticmethod
    async def _events(source: AsyncIterator[Event | None]) -> AsyncIterator[Event]:
        async for item in source:
            if item is not None:
                yield item

    async def __aenter__(self) -> AsyncEventStream:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._iterator is not None:
            await self._iterator.aclose()

    async def _run(self) -> AsyncIterator[Event | None]:
        failures, ready = 0, False
        while True:
            params, headers = dict(self._params), {"Accept": "text/event-stream"}
            if self.last_event_id is not None:
                headers["Last-Event-ID"] = self.last_event_id
            if self._ticket_path is not None:
                params["ticket"] = await self._client.mint_ticket(self._ticket_path)
            parser = SSEParser(last_id=self.last_event_id)
            try:
                async with self._client.open_stream(
                    "GET", self._url, params=params, headers=headers, auth=self._ticket_path is None
                ) as response:
                    async for chunk in response.aiter_bytes():
                        events = parser.feed(chunk)
                        if not ready:
                            ready = True
                            yield None
                        for event in events:
                            failures = 0
                            if event.id is not None:
                                self.last_event_id = event.id
                            yield event
                return
            except (httpx.TransportError, CorralConnectionError):
                failures += 1
                if failures > self._reconnects:
                    raise
                await anyio.sleep(min(5.0, 0.25 * 2**failures))

"""A keep-alive connection stays usable after an answer that came before the request body.

Clients such as `requests` write a POST's headers and its body apart; a route that
refuses a request without reading its body (a 401, a malformed id) can answer in
between. The next request on that connection used to get no answer at all (issue 26:
the fuzzer's stalls on unrelated routes).
"""

from __future__ import annotations

import pytest
import trio

from corral import asgi_server
from tests.support import Api

BODY = b'{"provider": "openai", "model": "gpt", "input_tokens": 1, "output_tokens": 1}'


def usage_request(body: bytes = BODY) -> bytes:
    """A run's usage report without its run token: answered 401 without reading the body."""
    return (
        b"POST /api/v1/agent-runs/usage HTTP/1.1\r\nHost: corral\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )


async def read_answer(stream: trio.SocketStream) -> tuple[bytes, bytes]:
    """The status line and headers, and the body (by Content-Length), of one answer."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = await stream.receive_some(65536)
        assert chunk, f"the connection closed before an answer: {buffer!r}"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        chunk = await stream.receive_some(65536)
        assert chunk, "the connection closed in the middle of a body"
        rest += chunk
    return head, rest


def port_of(api: Api) -> int:
    port = api.client.base_url.port
    assert port is not None
    return port


async def test_the_next_request_is_answered_after_an_answer_that_came_before_the_body(api: Api) -> None:
    async with await trio.open_tcp_stream("127.0.0.1", port_of(api)) as stream:
        for _ in range(3):
            await stream.send_all(usage_request())
            await trio.sleep(0.2)  # the route may answer in between
            await stream.send_all(BODY)
            with trio.fail_after(5):
                head, body = await read_answer(stream)
            assert head.startswith(b"HTTP/1.1 401"), head
            assert b'"UNAUTHORIZED"' in body or b"run token" in body, body
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: corral\r\n\r\n")
        with trio.fail_after(5):
            head, body = await read_answer(stream)
        assert head.startswith(b"HTTP/1.1 200") and body == b'{"status":"ok"}'


async def test_an_answer_whose_body_never_comes_closes_the_connection(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asgi_server, "DRAIN_SECONDS", 0.5)
    async with await trio.open_tcp_stream("127.0.0.1", port_of(api)) as stream:
        await stream.send_all(usage_request())
        with trio.fail_after(5):
            head, _ = await read_answer(stream)  # answered at once, without waiting for the body
            assert head.startswith(b"HTTP/1.1 401"), head
        with trio.fail_after(5):
            assert await stream.receive_some(65536) == b""  # then closed: the body never came


async def test_a_body_declared_past_the_limit_gets_its_413_with_connection_close(api: Api) -> None:
    async with await trio.open_tcp_stream("127.0.0.1", port_of(api)) as stream:
        await stream.send_all(usage_request(b"x" * 100).replace(b"Content-Length: 100", b"Content-Length: %d" % (64 * 1024 * 1024)))
        with trio.fail_after(5):
            head, _ = await read_answer(stream)
            assert head.startswith(b"HTTP/1.1 4"), head
            assert b"connection: close" in head.lower(), head
            assert await stream.receive_some(65536) == b""

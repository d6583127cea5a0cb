"""The router's HTTP/1.1 head parser and chunked-body scanner."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.net.preview import (
    ChunkedScanner,
    Framing,
    HttpError,
    parse_request,
    parse_response,
    strip_query_params,
)


def chunked(parts: list[bytes], trailers: bytes = b"") -> bytes:
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts if p)
    return body + b"0\r\n" + trailers + b"\r\n"


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(min_value=1, max_value=50), max_size=40), st.binary(max_size=40))
def test_scanner_finds_the_end_however_the_bytes_are_split(parts: list[bytes], cuts: list[int], after: bytes) -> None:
    message = chunked(parts, b"X-Trailer: yes\r\n")
    stream = message + after
    scanner, offset, position = ChunkedScanner(), 0, 0
    end = -1
    for size in [*cuts, len(stream)]:
        piece = stream[position : position + size]
        if not piece:
            break
        found = scanner.feed(piece)
        if found >= 0:
            end = offset + found
            break
        offset += len(piece)
        position += len(piece)
    assert end == len(message)


@pytest.mark.parametrize("bad", [b"zz\r\n", b"5\r\nhelloXX\r\n", b"-1\r\n", b"1_0\r\n", b"5\nhello\r\n"])
def test_scanner_refuses_malformed_framing(bad: bytes) -> None:
    with pytest.raises(HttpError):
        ChunkedScanner().feed(bad)


def test_request_framing() -> None:
    assert parse_request(b"GET / HTTP/1.1\r\nHost: a").framing is Framing.NONE
    posted = parse_request(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12")
    assert posted.framing is Framing.LENGTH and posted.length == 12
    assert parse_request(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked").framing is Framing.CHUNKED
    assert parse_request(b"POST / HTTP/1.1\r\nContent-Length: 5, 5").length == 5
    assert parse_request(b"GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade").connection_tokens == {"keep-alive", "upgrade"}
    for bad in (b"GET /\r\nHost: a", b"GET / HTTP/1.1\r\nHost: a\nX: b", b"GET / HTTP/1.1\r\nContent-Length: -1", b"G(T / HTTP/1.1"):
        with pytest.raises(HttpError):
            parse_request(bad)


def test_response_framing() -> None:
    def framing(head: bytes, method: str = "GET") -> Framing:
        return parse_response(head, method)[0].framing

    assert framing(b"HTTP/1.1 200 OK\r\nContent-Length: 3") is Framing.LENGTH
    assert framing(b"HTTP/1.1 200 OK\r\nContent-Length: 3", "HEAD") is Framing.NONE
    assert framing(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 3") is Framing.NONE
    assert framing(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked") is Framing.CHUNKED
    assert framing(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip") is Framing.UNTIL_CLOSE
    assert framing(b"HTTP/1.0 200 OK") is Framing.UNTIL_CLOSE
    assert parse_response(b"HTTP/1.1 204", "GET")[1] == 204
    with pytest.raises(HttpError):
        parse_response(b"SSH-2.0-OpenSSH", "GET")


def test_strip_query_params() -> None:
    names = frozenset({"preview_token", "ms"})
    assert strip_query_params("/a?preview_token=x", names) == ("/a", {"preview_token": "x"})
    assert strip_query_params("/a?b=1&ms=ms_y&c=", names) == ("/a?b=1&c=", {"ms": "ms_y"})
    assert strip_query_params("/a?b=1", names) == ("/a?b=1", {})
    assert strip_query_params("/a", names) == ("/a", {})
    assert strip_query_params("/a?ms=250&preview_token=mp_x", names, ("mp_", "ms_")) == ("/a?ms=250", {"preview_token": "mp_x"})

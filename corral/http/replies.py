"""Reply values and JSON encoding shared by every handler."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from quart import Response


@dataclass
class Reply:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def data(value: Any, status: int = 200, **extra: Any) -> Reply:
    """The `{data: ...}` envelope most endpoints use (contract §3)."""
    return Reply({"data": value, **extra}, status)


def raw(value: Any, status: int = 200) -> Reply:
    """Unwrapped bodies: computers, files, credits and exec (spec rule 6)."""
    return Reply(value, status)


def no_content() -> Reply:
    return Reply(None, 204)


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), default=str).encode()


def json_response(value: Any, status: int, headers: dict[str, str] | None = None) -> Response:
    if status == 204:
        return Response(b"", status=204, headers=headers)
    return Response(dumps(value), status=status, headers=headers, content_type="application/json")


class JsonAnswer:
    """A whole JSON answer, which is what nearly every route gives: the front
    (`front.py`) sends it without building a Quart `Response` (werkzeug's headers and
    body wrapper cost about a tenth of a plain GET). Same bytes on the wire as
    `json_response`: the handler's headers, then `Content-Type` and `Content-Length`."""

    __slots__ = ("body", "headers", "status_code")

    def __init__(self, body: bytes, status: int, headers: dict[str, str] | None = None) -> None:
        self.body = body
        self.status_code = status
        self.headers: dict[str, str] = dict(headers) if headers else {}

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        return [
            *((name.lower().encode("latin1"), value.encode("latin1")) for name, value in self.headers.items()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
        ]

    def as_quart(self) -> Response:
        return Response(self.body, status=self.status_code, headers=self.headers, content_type="application/json")


Answer = Response | JsonAnswer
"""What the pipeline answers: a whole JSON body, or Quart's `Response` (streams,
downloads, pages, 204)."""


def json_answer(value: Any, status: int, headers: dict[str, str] | None = None) -> Answer:
    if status == 204:
        return json_response(value, status, headers)
    return JsonAnswer(dumps(value), status, headers)

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

"""What a create or patch body may say about a webhook, checked before anything is stored.

Every problem is collected into one `422 VALIDATION_ERROR` whose `details` name the
fields. `null` counts as "not given" (on patch: unchanged).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from corral.errors import validation_error

from .destinations import InvalidUrl, parse_url
from .events import EVENT_TYPES

MAX_RETRY_COUNT = 10
DEFAULT_RETRY_COUNT = 3
MAX_NAME_LENGTH = 255
MAX_HEADERS = 20
MAX_HEADER_NAME = 100
MAX_HEADER_VALUE = 2048
MAX_METADATA_BYTES = 16 * 1024

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-type",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "user-agent",
        "proxy-authorization",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)
"""Headers the platform sets itself; `X-Service-*` is reserved as a whole."""


@dataclass(frozen=True)
class WebhookFields:
    """The fields a body gave (None: not given)."""

    url: str | None = None
    name: str | None = None
    events: list[str] | None = None
    headers: dict[str, str] | None = None
    retry_count: int | None = None
    metadata: dict[str, Any] | None = None


def header_problem(name: Any, value: Any) -> str | None:
    if not isinstance(name, str) or not _TOKEN.match(name) or len(name) > MAX_HEADER_NAME:
        return f"{str(name)[:40]!r} is not a valid header name"
    lowered = name.lower()
    if lowered in RESERVED_HEADERS or lowered.startswith("x-service-"):
        return f"{name} is set by the platform and cannot be overridden"
    if not isinstance(value, str):
        return f"the value of {name} must be a string"
    if len(value) > MAX_HEADER_VALUE:
        return f"the value of {name} must be at most {MAX_HEADER_VALUE} characters"
    if any((ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F for ch in value):
        return f"the value of {name} must not contain control characters"
    return None


def _events(value: Any, errors: dict[str, str]) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        errors["events"] = "must be a list of event types"
        return None
    unknown = [item for item in value if item not in EVENT_TYPES]
    if unknown:
        errors["events"] = f"unknown event type {unknown[0]!r}; known: {', '.join(EVENT_TYPES)}"
        return None
    return list(dict.fromkeys(value))  # without duplicates, in the given order


def _headers(value: Any, errors: dict[str, str]) -> dict[str, str] | None:
    if not isinstance(value, dict):
        errors["headers"] = "must be an object of header names to string values"
        return None
    if len(value) > MAX_HEADERS:
        errors["headers"] = f"at most {MAX_HEADERS} headers"
        return None
    seen: set[str] = set()
    for name, header_value in value.items():
        problem = header_problem(name, header_value)
        if problem is None and name.lower() in seen:
            problem = f"{name} is given twice"
        if problem is not None:
            errors["headers"] = problem
            return None
        seen.add(name.lower())
    return dict(value)


def parse_webhook_fields(body: dict[str, Any], *, creating: bool) -> WebhookFields:
    """The checked fields of `body`; `url` is required when `creating`."""
    errors: dict[str, str] = {}
    url = body.get("url")
    if url is None:
        if creating:
            errors["url"] = "is required"
    elif not isinstance(url, str):
        errors["url"] = "must be a string"
        url = None
    else:
        url = url.strip()
        try:
            parse_url(url)
        except InvalidUrl as exc:
            errors["url"] = str(exc)
            url = None

    name = body.get("name")
    if name is not None:
        if not isinstance(name, str):
            errors["name"] = "must be a string"
            name = None
        elif len(name.strip()) > MAX_NAME_LENGTH:
            errors["name"] = f"must be at most {MAX_NAME_LENGTH} characters"
            name = None
        else:
            name = name.strip()

    events = _events(body["events"], errors) if body.get("events") is not None else None
    headers = _headers(body["headers"], errors) if body.get("headers") is not None else None

    retry_count = body.get("retry_count")
    if retry_count is not None:
        if isinstance(retry_count, bool) or not isinstance(retry_count, int):
            errors["retry_count"] = "must be an integer"
        elif not 0 <= retry_count <= MAX_RETRY_COUNT:
            errors["retry_count"] = f"must be between 0 and {MAX_RETRY_COUNT}"
        if "retry_count" in errors:
            retry_count = None

    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            errors["metadata"] = "must be an object"
            metadata = None
        elif len(json.dumps(metadata, separators=(",", ":"))) > MAX_METADATA_BYTES:
            errors["metadata"] = f"must be at most {MAX_METADATA_BYTES} bytes as JSON"
            metadata = None

    if errors:
        raise validation_error(errors)
    return WebhookFields(
        url=url, name=name, events=events, headers=headers, retry_count=retry_count, metadata=metadata
    )

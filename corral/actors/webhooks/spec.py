"""What a create or patch body may say about a webhook, checked before anything is stored.

Every problem is collected into one `422 VALIDATION_ERROR` whose `details` name the
fields. `null` counts as "not given" (on patch: unchanged).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from corral.models import Rule, field, model, parse

from .destinations import InvalidUrl, parse_url
from .events import EVENT_TYPES

MAX_RETRY_COUNT = 10
DEFAULT_RETRY_COUNT = 3
MAX_NAME_LENGTH = 255
MAX_HEADERS = 20
MAX_HEADER_NAME = 100
MAX_HEADER_VALUE = 2048
MAX_METADATA_BYTES = 16 * 1024

TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
"""A header name (RFC 9110 token)."""
HEADER_VALUE = r"[^\x00-\x08\x0a-\x1f\x7f]*"
"""A header value: no control character but tab."""

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


def _any_case(text: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in text)


HEADERS_SCHEMA = {
    "maxProperties": MAX_HEADERS,
    "propertyNames": {
        "pattern": f"^{TOKEN}$",
        "maxLength": MAX_HEADER_NAME,
        "not": {"pattern": f"^(?:{'|'.join(_any_case(name) for name in sorted(RESERVED_HEADERS))}|{_any_case('x-service-')}.*)$"},
    },
    "additionalProperties": {"type": "string", "maxLength": MAX_HEADER_VALUE, "pattern": f"^{HEADER_VALUE}$"},
}
"""What `header_problem` allows, said in the request schema (but for one name given twice in two cases)."""


def header_problem(name: Any, value: Any) -> str | None:
    if not isinstance(name, str) or not re.fullmatch(TOKEN, name) or len(name) > MAX_HEADER_NAME:
        return f"{str(name)[:40]!r} is not a valid header name"
    lowered = name.lower()
    if lowered in RESERVED_HEADERS or lowered.startswith("x-service-"):
        return f"{name} is set by the platform and cannot be overridden"
    if not isinstance(value, str):
        return f"the value of {name} must be a string"
    if len(value) > MAX_HEADER_VALUE:
        return f"the value of {name} must be at most {MAX_HEADER_VALUE} characters"
    if not re.fullmatch(HEADER_VALUE, value):
        return f"the value of {name} must not contain control characters"
    return None


def _events_problem(events: list[str]) -> str | None:
    unknown = [item for item in events if item not in EVENT_TYPES]
    return f"unknown event type {unknown[0]!r}; known: {', '.join(EVENT_TYPES)}" if unknown else None


def _headers_problem(headers: dict[str, Any]) -> str | None:
    if len(headers) > MAX_HEADERS:
        return f"at most {MAX_HEADERS} headers"
    seen: set[str] = set()
    for name, header_value in headers.items():
        problem = header_problem(name, header_value)
        if problem is None and name.lower() in seen:
            problem = f"{name} is given twice"
        if problem is not None:
            return problem
        seen.add(name.lower())
    return None


def _url_problem(url: str) -> str | None:
    try:
        parse_url(url)
    except InvalidUrl as exc:
        return str(exc)
    return None


def _metadata_problem(metadata: dict[str, Any]) -> str | None:
    if len(json.dumps(metadata, separators=(",", ":"))) > MAX_METADATA_BYTES:
        return f"must be at most {MAX_METADATA_BYTES} bytes as JSON"
    return None


Url = Annotated[str, Rule(check=_url_problem, format="uri", schema={"pattern": "^https://"})]


@model(missing="details")
class WebhookFields:
    """What a PATCH may change; a field left out or null stays as it is."""

    url: Url | None = None
    name: Annotated[str | None, Rule(max_length=MAX_NAME_LENGTH)] = None
    events: Annotated[
        list[str] | None,
        Rule(check=_events_problem, parse=lambda events: list(dict.fromkeys(events)), schema={"items": {"enum": list(EVENT_TYPES)}},
             description="event types; none: every event"),
    ] = None
    headers: Annotated[dict[str, Any] | None, Rule(check=_headers_problem, message=None, schema=HEADERS_SCHEMA)] = None
    retry_count: Annotated[
        int | None, Rule(minimum=0, maximum=MAX_RETRY_COUNT, message=f"must be between 0 and {MAX_RETRY_COUNT}", schema={"default": DEFAULT_RETRY_COUNT})
    ] = None
    metadata: Annotated[dict[str, Any] | None, Rule(check=_metadata_problem)] = None


@model(missing="details")
class NewWebhook(WebhookFields):
    """A new webhook: `url` (https) is required."""

    url: Url = field()  # `field()`: no default, where the parent's is None


def parse_webhook_fields(body: dict[str, Any], *, creating: bool) -> WebhookFields:
    """The checked fields of `body`; `url` is required when `creating`."""
    return parse(NewWebhook if creating else WebhookFields, body)

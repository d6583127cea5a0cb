"""Webhook secrets and the two signatures every delivery carries (contract §5).

The secret is `whsec_` followed by 32 random bytes in standard base64, the format of
the Standard Webhooks specification, so its libraries accept it as is.

- `X-Service-Signature: sha256=<hex>`: HMAC-SHA256 keyed with the secret string
  exactly as shown at creation (its UTF-8 bytes, `whsec_` included) over the raw
  body, as the product specification states it.
- `webhook-signature: v1,<base64>`: the Standard Webhooks signature, HMAC-SHA256
  keyed with the base64-decoded part after `whsec_`, over `<webhook-id>.<webhook-timestamp>.<body>`.
  The timestamp is the attempt's Unix time, so receivers can refuse replays.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode()


def secret_preview(secret: str) -> str:
    """`whsec_...` and the last four characters: enough to tell secrets apart."""
    return f"{SECRET_PREFIX}...{secret[-4:]}"


def service_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def standard_key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def standard_signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(standard_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_headers(
    *, secret: str, body: bytes, event_id: str, event_type: str, delivery_id: str, timestamp: int | None = None
) -> dict[str, str]:
    """The signed headers of one attempt (the webhook's own headers are added by the sender)."""
    moment = int(time.time()) if timestamp is None else timestamp
    return {
        "X-Service-Signature": service_signature(secret, body),
        "X-Service-Event": event_type,
        "X-Service-Delivery": delivery_id,
        "webhook-id": event_id,
        "webhook-timestamp": str(moment),
        "webhook-signature": standard_signature(secret, event_id, moment, body),
    }

"""Preview tokens (`mp_`, signed, stateless) and share tokens (`ms_`, random, stored as digests).

A preview token is `mp_` + base64url(version, sandbox UUID, expiry, nonce, HMAC-SHA256):
the router checks it without the database, and it names the one sandbox it opens.
The key is derived from the platform's signing secret, which every node shares.
"Destroying the sandbox invalidates all its tokens" needs no revocation list: the
router only routes to sandboxes that exist, and a sandbox's slug is never reused.

A share token is 32 random bytes; only its SHA-256 digest is stored, so a leaked
database does not leak working links, and deleting the share refuses it at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import struct
import uuid
from dataclasses import dataclass

PREVIEW_PREFIX = "mp_"
SHARE_PREFIX = "ms_"
_VERSION = 1
_PAYLOAD = struct.Struct(">B16sQ8s")
_MAC_BYTES = 32


def preview_key(signing_secret: str) -> bytes:
    return hmac.new(signing_secret.encode(), b"corral preview tokens v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class PreviewClaims:
    sandbox_id: str
    expires_at: int
    """Unix seconds."""


def sign_preview_token(key: bytes, sandbox_id: str, expires_at: int) -> str:
    payload = _PAYLOAD.pack(_VERSION, uuid.UUID(sandbox_id).bytes, expires_at, os.urandom(8))
    return PREVIEW_PREFIX + _b64(payload + hmac.new(key, payload, hashlib.sha256).digest())


def read_preview_token(key: bytes, token: str) -> PreviewClaims | None:
    """The claims of a well-formed, correctly signed token (expired or not); else None."""
    if not token.startswith(PREVIEW_PREFIX) or len(token) > 200:
        return None
    try:
        raw = _unb64(token[len(PREVIEW_PREFIX):])
    except (ValueError, TypeError):
        return None
    if len(raw) != _PAYLOAD.size + _MAC_BYTES:
        return None
    payload, mac = raw[: _PAYLOAD.size], raw[_PAYLOAD.size :]
    if not hmac.compare_digest(mac, hmac.new(key, payload, hashlib.sha256).digest()):
        return None
    version, sandbox, expires_at, _ = _PAYLOAD.unpack(payload)
    if version != _VERSION:
        return None
    return PreviewClaims(str(uuid.UUID(bytes=sandbox)), expires_at)


def new_share_token() -> str:
    return SHARE_PREFIX + secrets.token_urlsafe(32)


def share_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()

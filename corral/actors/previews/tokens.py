"""Preview tokens (`mp_`, signed, stateless) and share tokens (`ms_`, random, stored as digests);
desktop stream tokens (`dt_`) are signed the same way with a key of their own.

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
STREAM_PREFIX = "dt_"
"""A computer's desktop and terminal stream token (contract §10)."""
_VERSION = 1
_PAYLOAD = struct.Struct(">B16sQ8s")
_MAC_BYTES = 32


def preview_key(signing_secret: str) -> bytes:
    return hmac.new(signing_secret.encode(), b"corral preview tokens v1", hashlib.sha256).digest()


def stream_key(signing_secret: str) -> bytes:
    """A key of its own, so that no sandbox preview token opens a desktop and no stream token a preview."""
    return hmac.new(signing_secret.encode(), b"corral desktop stream tokens v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class PreviewClaims:
    resource_id: str
    """The one sandbox (preview token) or computer (stream token) the token opens."""
    expires_at: int
    """Unix seconds."""


def sign_preview_token(key: bytes, sandbox_id: str, expires_at: int) -> str:
    return _sign(PREVIEW_PREFIX, key, sandbox_id, expires_at)


def read_preview_token(key: bytes, token: str) -> PreviewClaims | None:
    """The claims of a well-formed, correctly signed token (expired or not); else None."""
    return _read(PREVIEW_PREFIX, key, token)


def sign_stream_token(key: bytes, computer_id: str, expires_at: int) -> str:
    return _sign(STREAM_PREFIX, key, computer_id, expires_at)


def read_stream_token(key: bytes, token: str) -> PreviewClaims | None:
    """The claims of a well-formed, correctly signed stream token (expired or not); else None."""
    return _read(STREAM_PREFIX, key, token)


def _sign(prefix: str, key: bytes, resource_id: str, expires_at: int) -> str:
    payload = _PAYLOAD.pack(_VERSION, uuid.UUID(resource_id).bytes, expires_at, os.urandom(8))
    return prefix + _b64(payload + hmac.new(key, payload, hashlib.sha256).digest())


def _read(prefix: str, key: bytes, token: str) -> PreviewClaims | None:
    if not token.startswith(prefix) or len(token) > 200:
        return None
    try:
        raw = _unb64(token[len(prefix):])
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

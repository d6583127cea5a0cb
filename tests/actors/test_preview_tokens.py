"""Preview tokens are signed and bound to one sandbox; share tokens are stored as digests."""

from __future__ import annotations

import time

from corral.actors.previews.tokens import (
    new_share_token,
    preview_key,
    read_preview_token,
    share_digest,
    sign_preview_token,
)
from corral.ids import new_uuid


def test_a_preview_token_names_its_sandbox_and_expiry() -> None:
    key = preview_key("secret")
    sandbox_id = new_uuid()
    expires = int(time.time()) + 60
    token = sign_preview_token(key, sandbox_id, expires)
    assert token.startswith("mp_") and "=" not in token
    claims = read_preview_token(key, token)
    assert claims is not None and claims.resource_id == sandbox_id and claims.expires_at == expires
    assert sign_preview_token(key, sandbox_id, expires) != token  # a nonce: every token differs


def test_forged_or_foreign_tokens_do_not_read() -> None:
    key = preview_key("secret")
    token = sign_preview_token(key, new_uuid(), int(time.time()) + 60)
    assert read_preview_token(preview_key("another secret"), token) is None
    flipped = token[:10] + ("A" if token[10] != "A" else "B") + token[11:]
    assert read_preview_token(key, flipped) is None
    for junk in ("", "mp_", "mp_!!!", "ms_" + token[3:], token + "AA", "mp_" + "A" * 300):
        assert read_preview_token(key, junk) is None


def test_share_tokens() -> None:
    token = new_share_token()
    assert token.startswith("ms_") and len(token) > 40 and new_share_token() != token
    assert share_digest(token) == share_digest(token) and token not in share_digest(token)

"""JWT sessions: HS256 access (about an hour) and refresh (7 days) tokens."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jwt

from corral.errors import unauthorized
from corral.ids import new_ulid

ISSUER = "corral"


@dataclass(frozen=True)
class SessionClaims:
    user_id: str
    tenant_id: str
    token_type: str


def mint(secret: str, *, user_id: str, tenant_id: str, token_type: str, ttl: int) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "sub": user_id,
        "tid": tenant_id,
        "typ": token_type,
        "iat": now,
        "exp": now + ttl,
        "jti": new_ulid(),
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def decode(secret: str, token: str) -> SessionClaims:
    try:
        claims = jwt.decode(
            token, secret, algorithms=["HS256"], issuer=ISSUER, options={"require": ["exp", "sub", "tid", "typ"]}
        )
    except jwt.ExpiredSignatureError as exc:
        raise unauthorized("token has expired") from exc
    except jwt.PyJWTError as exc:
        raise unauthorized("invalid token") from exc
    return SessionClaims(str(claims["sub"]), str(claims["tid"]), str(claims["typ"]))

"""Password hashing with argon2id, off the event loop (a hash takes tens of milliseconds)."""

from __future__ import annotations

import trio
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()
# A fixed hash to verify against when the user does not exist, so that a login for
# an unknown e-mail takes as long as one with a wrong password.
_DUMMY_HASH = _hasher.hash("corral-timing-equaliser")


async def hash_password(password: str) -> str:
    return await trio.to_thread.run_sync(_hasher.hash, password)


async def verify_password(password_hash: str | None, password: str) -> bool:
    def check() -> bool:
        try:
            return _hasher.verify(password_hash or _DUMMY_HASH, password) and password_hash is not None
        except (VerificationError, InvalidHashError):
            return False

    return await trio.to_thread.run_sync(check)

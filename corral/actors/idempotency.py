"""Idempotency-Key: stored replies of POSTs, per tenant, for 24 hours (contract §12).

One mechanism for every route declared `idempotent=True` (the POSTs of deployments
and databases). The first request with a key claims it (`in_progress`) with the
fingerprint of its method, path and body; its reply is stored when it ends. A repeat
with the same fingerprint gets the stored reply and does nothing again; another
fingerprint is `IDEMPOTENCY_KEY_REUSED`; a repeat while the first still runs is
`IDEMPOTENCY_IN_PROGRESS`.

Replies of 5xx are not stored (the claim is released) so that a retry after a
server-side failure runs again, which is what retrying clients expect. A claim left
`in_progress` by a node process that is gone (a crash, a restart) is stale: its
`owner` differs from this process's, and the next request with the key takes it over.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from corral.errors import ApiError
from corral.ids import new_ulid
from corral.storage import Database, iso_in, utc_now_iso

TTL_SECONDS = 24 * 3600
MAX_KEY_LENGTH = 255
KEY = r"[\x21-\x7e]+"
"""A key: printable ASCII without spaces (and at most `MAX_KEY_LENGTH` of it)."""
_KEY = re.compile(f"^{KEY}$")
PROCESS_OWNER = new_ulid()
"""Names this node process in the claims it holds."""


@dataclass(frozen=True)
class StoredReply:
    status: int
    body: str


def check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or not _KEY.match(key):
        raise ApiError(
            400,
            "INVALID_IDEMPOTENCY_KEY",
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable ASCII characters without spaces",
        )
    return key


def fingerprint(method: str, path: str, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (method.encode(), path.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


async def claim(db: Database, tenant_id: str, key: str, print_: str) -> StoredReply | None:
    """Claim `key` for a request with fingerprint `print_`; the stored reply of an
    earlier identical request instead, or an ApiError when the key cannot be used."""
    now = utc_now_iso()
    row: dict[str, Any] = {
        "tenant_id": tenant_id,
        "idempotency_key": key,
        "fingerprint": print_,
        "state": "in_progress",
        "owner": PROCESS_OWNER,
        "response_status": None,
        "response_body": None,
        "created_at": now,
        "expires_at": iso_in(TTL_SECONDS),
    }

    def work(tx: Any) -> StoredReply | None:
        tx.execute("DELETE FROM idempotency_keys WHERE expires_at < ?", (now,))
        inserted = tx.execute(
            "INSERT INTO idempotency_keys (tenant_id, idempotency_key, fingerprint, state, owner,"
            " response_status, response_body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING",
            tuple(row.values()),
        )
        if inserted:
            return None
        held = tx.fetch_one(
            "SELECT fingerprint, state, owner, response_status, response_body FROM idempotency_keys"
            " WHERE tenant_id = ? AND idempotency_key = ?",
            (tenant_id, key),
        )
        if held is None:  # expired and deleted between the two statements: ours now
            tx.insert("idempotency_keys", row)
            return None
        if held["fingerprint"] != print_:
            raise ApiError(
                422,
                "IDEMPOTENCY_KEY_REUSED",
                "this Idempotency-Key was used with another request (route or body); use a new key",
            )
        if held["state"] == "done":
            return StoredReply(int(held["response_status"]), str(held["response_body"]))
        if held["owner"] == PROCESS_OWNER:
            raise ApiError(409, "IDEMPOTENCY_IN_PROGRESS", "a request with this Idempotency-Key is still running; retry when it ends")
        tx.execute(  # a claim of a process that is gone: take it over
            "UPDATE idempotency_keys SET owner = ?, created_at = ?, expires_at = ?"
            " WHERE tenant_id = ? AND idempotency_key = ?",
            (PROCESS_OWNER, now, row["expires_at"], tenant_id, key),
        )
        return None

    return await db.transaction(work)


async def settle(db: Database, tenant_id: str, key: str, status: int, body: str | None) -> None:
    """Store the reply of the claiming request, or release the claim (`body` None: a 5xx
    or a reply that cannot be stored, such as a stream)."""
    if body is None:
        await db.execute(
            "DELETE FROM idempotency_keys WHERE tenant_id = ? AND idempotency_key = ? AND owner = ?",
            (tenant_id, key, PROCESS_OWNER),
        )
        return
    await db.execute(
        "UPDATE idempotency_keys SET state = 'done', response_status = ?, response_body = ?"
        " WHERE tenant_id = ? AND idempotency_key = ? AND owner = ?",
        (status, body, tenant_id, key, PROCESS_OWNER),
    )

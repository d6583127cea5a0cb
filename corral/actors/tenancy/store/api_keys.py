"""The `api_keys` table: every query about key rows, returning `ApiKeyRecord`s.

Reads are for anyone (authentication reads a key on every request); the writes
(`create`, `revoke`, `mark_used`) are the tenancy package's own (`tenancy.api_keys`).

Authentication's lookup is cached per store (`KeyCache`) for as long as the store is
unchanged: an entry is used only while `Database.data_version()` is what it was when
the key was read, so a revocation (through the API, another process, another node, or
an operator's SQL) is seen on the next request. A store that cannot say whether it
changed (PostgreSQL) is read every time.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from corral.actors.record import RowStore
from corral.storage import Database, utc_now_iso


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """One API key (`scopes` and `allowed_ips` decoded); only its digest is stored."""

    id: str
    tenant_id: str
    user_id: str | None
    name: str
    key_type: str
    key_purpose: str
    key_prefix: str
    key_digest: str
    scopes: list[str] = field(hash=False)
    allowed_ips: list[str] | None = field(hash=False)
    workspace_id: str | None
    rate_limit_rpm: int
    status: str
    created_at: str
    revoked_at: str | None
    last_used_at: str | None


@dataclass(frozen=True, slots=True)
class KeyWithMember(ApiKeyRecord):
    """A key with its user's role in the key's tenant and e-mail address (None when the
    key has no user, or the user left the tenant)."""

    member_role: str | None
    member_email: str | None


API_KEYS = RowStore("api_keys", ApiKeyRecord, json_columns=("scopes", "allowed_ips"))
_WITH_MEMBER = RowStore("api_keys", KeyWithMember, json_columns=("scopes", "allowed_ips"))
"""Decodes the rows of `_WITH_MEMBER_SQL` (a join with `tenant_members` and `users`)."""

_WITH_MEMBER_SQL = (
    "SELECT k.*, m.role AS member_role, u.email AS member_email FROM api_keys k"
    " LEFT JOIN tenant_members m ON m.tenant_id = k.tenant_id AND m.user_id = k.user_id"
    " LEFT JOIN users u ON u.id = k.user_id"
)


MAX_CACHED_KEYS = 10_000


class KeyCache:
    """Active keys by digest, with the store's data version they were read at."""

    def __init__(self) -> None:
        self._by_digest: dict[str, tuple[KeyWithMember, int]] = {}

    def get(self, key_digest: str, version: int) -> KeyWithMember | None:
        cached = self._by_digest.get(key_digest)
        if cached is None or cached[1] != version:
            return None
        return cached[0]

    def keep(self, key: KeyWithMember, version: int) -> None:
        if len(self._by_digest) >= MAX_CACHED_KEYS:
            self._by_digest.clear()
        self._by_digest[key.key_digest] = (key, version)


_CACHES: weakref.WeakKeyDictionary[Database, KeyCache] = weakref.WeakKeyDictionary()


def key_cache(db: Database) -> KeyCache:
    """The cache of keys read from `db` (one per store, so that two nodes in one test
    process keep theirs apart)."""
    cache = _CACHES.get(db)
    if cache is None:
        cache = _CACHES[db] = KeyCache()
    return cache


# -- reads ------------------------------------------------------------------------------


async def with_member_by_digest(db: Database, key_digest: str) -> KeyWithMember | None:
    """The key with this digest and its member, in one query, or from the cache: this
    runs on every key-authenticated request."""
    version = db.data_version()
    if version is not None:
        cached = key_cache(db).get(key_digest, version)
        if cached is not None:
            return cached
    row = await db.fetch_one(_WITH_MEMBER_SQL + " WHERE k.key_digest = ?", (key_digest,))
    if row is None:
        return None
    key = _WITH_MEMBER.record(row)
    if version is not None:  # read at `version` or later: never newer than it says
        key_cache(db).keep(key, version)
    return key


async def with_member_by_id(db: Database, key_id: str) -> KeyWithMember | None:
    row = await db.fetch_one(_WITH_MEMBER_SQL + " WHERE k.id = ?", (key_id,))
    return None if row is None else _WITH_MEMBER.record(row)


async def find(db: Database, tenant_id: str, key_id: str) -> ApiKeyRecord | None:
    """The tenant's key."""
    row = await db.fetch_one("SELECT * FROM api_keys WHERE id = ? AND tenant_id = ?", (key_id, tenant_id))
    return None if row is None else API_KEYS.record(row)


async def list_for_user(db: Database, tenant_id: str, user_id: str | None) -> list[ApiKeyRecord]:
    """The user's keys in the tenant (the keys without a user for None), newest first."""
    rows = await db.fetch_all(
        "SELECT * FROM api_keys WHERE tenant_id = ? AND user_id IS NOT DISTINCT FROM ? ORDER BY created_at DESC, id",
        (tenant_id, user_id),
    )
    return API_KEYS.records(rows)


# -- writes (the tenancy package's) -----------------------------------------------------


async def create(db: Database, record: ApiKeyRecord) -> None:
    await db.transaction(lambda tx: API_KEYS.insert(tx, record))


async def revoke(db: Database, key_id: str, revoked_at: str) -> None:
    await API_KEYS.update(db, key_id, {"status": "revoked", "revoked_at": revoked_at})


async def mark_used(db: Database, key_id: str) -> None:
    """Behind the request (`Database.later`): nobody waits for `last_used_at`."""
    await db.later.add("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (utc_now_iso(), key_id))

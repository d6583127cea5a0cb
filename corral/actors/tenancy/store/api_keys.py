"""The `api_keys` table: every query about key rows, returning `ApiKeyRecord`s.

Reads are for anyone (authentication reads a key on every request); the writes
(`create`, `revoke`, `mark_used`) are the tenancy package's own (`tenancy.api_keys`).

Authentication's lookup is cached per store (`KeyCache`) for as long as the store is
unchanged: an entry is used only while `Database.data_version()` is what it was when
the key was read, so a revocation (through the API, another process, or an operator's
SQL) is seen on the next request.

A store that cannot say whether it changed (PostgreSQL, which several nodes share)
keeps a key for at most `FRESH_SECONDS` from before it was read: a revocation through
the API is seen at once on the node that made it (`revoke` empties the cache, and a
read that was under way then is not kept) and on every other node as soon as it hears
the notice (`tenancy.api_keys.hear_revocations`, milliseconds), and within
`FRESH_SECONDS` in any case (a notice lost with the LISTEN connection, an operator's
SQL). Before, every key-authenticated request on PostgreSQL was one more store round
trip (an exec on a PostgreSQL node: 8.5 ms against 5.7 on SQLite, issue 30's bench).
"""

from __future__ import annotations

import time
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


FRESH_SECONDS = 1.0
"""On a store without a data version: how long a key read stands (issue 30: a revocation
reaches every node within 1 s)."""


class KeyCache:
    """Active keys by digest, with the store's data version they were read at; on a store
    without one, with when they were read (`FRESH_SECONDS`)."""

    def __init__(self) -> None:
        self._by_digest: dict[str, tuple[KeyWithMember, int]] = {}
        self._fresh: dict[str, tuple[KeyWithMember, float]] = {}
        self.epoch = 0
        """Moves on at every `forget_all`: a read begun before it is not kept."""

    def get(self, key_digest: str, version: int) -> KeyWithMember | None:
        cached = self._by_digest.get(key_digest)
        if cached is None or cached[1] != version:
            return None
        return cached[0]

    def keep(self, key: KeyWithMember, version: int) -> None:
        if len(self._by_digest) >= MAX_CACHED_KEYS:
            self._by_digest.clear()
        self._by_digest[key.key_digest] = (key, version)

    def get_fresh(self, key_digest: str) -> KeyWithMember | None:
        cached = self._fresh.get(key_digest)
        if cached is None or time.monotonic() - cached[1] >= FRESH_SECONDS:
            return None
        return cached[0]

    def keep_fresh(self, key: KeyWithMember, read_at: float, epoch: int) -> None:
        """Keep `key`, read from `read_at` on (monotonic), unless the cache was emptied
        since the read began (`epoch`)."""
        if epoch != self.epoch:
            return
        if len(self._fresh) >= MAX_CACHED_KEYS:
            self._fresh.clear()
        self._fresh[key.key_digest] = (key, read_at)

    def forget_all(self) -> None:
        self._by_digest.clear()
        self._fresh.clear()
        self.epoch += 1


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
    cache = key_cache(db)
    version = db.data_version()
    cached = cache.get(key_digest, version) if version is not None else cache.get_fresh(key_digest)
    if cached is not None:
        return cached
    epoch, read_at = cache.epoch, time.monotonic()
    row = await db.fetch_one(_WITH_MEMBER_SQL + " WHERE k.key_digest = ?", (key_digest,))
    if row is None:
        return None
    key = _WITH_MEMBER.record(row)
    if version is not None:  # read at `version` or later: never newer than it says
        cache.keep(key, version)
    else:
        cache.keep_fresh(key, read_at, epoch)
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
    """Revoke the key; this node's cache forgets every key (the caller tells the others)."""
    await API_KEYS.update(db, key_id, {"status": "revoked", "revoked_at": revoked_at})
    key_cache(db).forget_all()


async def mark_used(db: Database, key_id: str) -> None:
    """Behind the request (`Database.later`): nobody waits for `last_used_at`."""
    await db.later.add("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (utc_now_iso(), key_id))

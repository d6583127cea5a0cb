"""The `browser_tokens` table: every query about browser-token rows, returning frozen records.

Only `corral.actors.browser_tokens` writes these rows. The table keeps a token's
SHA-256 digest, never the token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.actors.record import RowStore
from corral.storage import Database, Transaction


@dataclass(frozen=True, slots=True)
class BrowserTokenRecord:
    """One minted browser token (`mbt_`): who minted it, for which sandbox, until when."""

    id: str
    tenant_id: str
    sandbox_id: str
    token_digest: str
    user_id: str | None
    api_key_id: str | None
    workspace_id: str | None
    scopes: list[str] = field(hash=False)
    expires_at: str
    created_at: str


BROWSER_TOKENS = RowStore("browser_tokens", BrowserTokenRecord, json_columns=("scopes",))


async def by_digest(db: Database, digest: str) -> BrowserTokenRecord | None:
    row = await db.fetch_one("SELECT * FROM browser_tokens WHERE token_digest = ?", (digest,))
    return None if row is None else BROWSER_TOKENS.record(row)


# -- writes (the package's) -----------------------------------------------------------


def insert(tx: Transaction, record: BrowserTokenRecord) -> None:
    BROWSER_TOKENS.insert(tx, record)


def prune_expired(tx: Transaction, now: str) -> int:
    """Drop tokens past their expiry (they are refused anyway)."""
    return tx.execute("DELETE FROM browser_tokens WHERE expires_at <= ?", (now,))

"""The one sealed-variables store, on both backends, against a table of its own."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from corral.actors.instances import MAX_VARS, SealedEnv, SealedEnvTable
from corral.errors import ApiError
from corral.storage import Database, SecretBox

TABLE = SealedEnvTable("test_env", "owner_id", "name", "test-env", flag_column="encrypted")


def too_many(limit: int) -> ApiError:
    return ApiError(400, "TOO_MANY", f"at most {limit}")


@pytest.fixture
async def store(db: Database) -> SealedEnv:
    await db.execute(
        "CREATE TABLE test_env (owner_id TEXT NOT NULL, tenant_id TEXT NOT NULL, name TEXT NOT NULL, value {blob} NOT NULL,"
        " encrypted INTEGER NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (owner_id, name))".replace(
            "{blob}", "BYTEA" if "Postgres" in type(db).__name__ else "BLOB"
        )
    )
    return SealedEnv(db, SecretBox(b"k" * 32), TABLE)


@dataclass(frozen=True)
class Owner:
    id: str
    tenant_id: str


OWNER = Owner("o1", "t1")
OTHER = Owner("o2", "t1")


async def test_put_upserts_and_values_are_sealed_to_their_owner(store: SealedEnv) -> None:
    written = await store.put(OWNER, {"A": "1", "B": "2"}, too_many, {"B": False})
    assert [(row["name"], row["encrypted"]) for row in written] == [("A", 1), ("B", 0)]
    await store.put(OWNER, {"A": "one"}, too_many)
    assert await store.plaintext(OWNER) == {"A": "one", "B": "2"}
    rows = await store.db.fetch_all("SELECT value FROM test_env WHERE name = 'A'")
    assert b"one" not in bytes(rows[0]["value"])
    # The sealed value copied to another owner's row does not open there.
    await store.db.execute(
        "INSERT INTO test_env SELECT 'o2', tenant_id, name, value, encrypted, created_at, updated_at FROM test_env"
        " WHERE owner_id = 'o1' AND name = 'A'"
    )
    with pytest.raises(Exception):  # noqa: B017 - the crypto layer's own error type
        await store.plaintext(OTHER)


async def test_copy_delete_and_the_limit(store: SealedEnv) -> None:
    await store.put(OWNER, {"A": "1", "B": "2"}, too_many, {"A": False})
    await store.copy(OWNER, OTHER, too_many)
    assert await store.plaintext(OTHER) == {"A": "1", "B": "2"}
    assert [(row["name"], row["encrypted"]) for row in await store.names("o2")] == [("A", 0), ("B", 1)]
    assert await store.delete("o2", "A") and not await store.delete("o2", "A")
    fill = {f"V{i}": "x" for i in range(MAX_VARS - 2)}
    await store.put(OWNER, fill, too_many)  # exactly MAX_VARS
    with pytest.raises(ApiError) as refused:
        await store.put(OWNER, {"ONE_MORE": "x"}, too_many)
    assert refused.value.code == "TOO_MANY" and len(await store.names("o1")) == MAX_VARS

import pytest
import trio

from corral.storage import Database, SecretBox, associated_data, load_migrations, migrate
from corral.storage.crypto import DecryptionError


async def test_migrations_apply_once(db: Database) -> None:
    assert await migrate(db) == []
    versions = [r["version"] for r in await db.fetch_all("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [m.version for m in load_migrations()]


async def test_round_trip_and_placeholders(db: Database) -> None:
    await db.execute("INSERT INTO platform_settings (key, value) VALUES (?, ?)", ("a", "50% off?"))
    assert await db.fetch_value("SELECT value FROM platform_settings WHERE key = ?", ("a",)) == "50% off?"
    rows = await db.fetch_all("SELECT key FROM platform_settings WHERE value LIKE '%off%'")
    assert rows == [{"key": "a"}]


async def test_transaction_rolls_back_as_a_whole(db: Database) -> None:
    def work(tx):  # type: ignore[no-untyped-def]
        tx.execute("INSERT INTO platform_settings (key, value) VALUES ('k1', 'v')")
        tx.execute("INSERT INTO platform_settings (key, value) VALUES ('k1', 'duplicate')")

    with pytest.raises(Exception):  # noqa: B017 - each driver raises its own IntegrityError
        await db.transaction(work)
    assert await db.fetch_one("SELECT * FROM platform_settings WHERE key = 'k1'") is None


async def test_concurrent_increments_are_not_lost(db: Database) -> None:
    await db.execute("INSERT INTO platform_settings (key, value) VALUES ('n', '0')")

    def bump(tx):  # type: ignore[no-untyped-def]
        if tx.dialect == "postgresql":
            value = tx.fetch_value("SELECT value FROM platform_settings WHERE key = 'n' FOR UPDATE")
        else:
            value = tx.fetch_value("SELECT value FROM platform_settings WHERE key = 'n'")
        tx.execute("UPDATE platform_settings SET value = ? WHERE key = 'n'", (str(int(value) + 1),))

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(db.transaction, bump)
    assert await db.fetch_value("SELECT value FROM platform_settings WHERE key = 'n'") == "40"


def test_secret_box_binds_tenant_and_record() -> None:
    box = SecretBox(b"k" * 32)
    blob = box.encrypt_text("hunter2", associated_data("t1", "r1"))
    assert b"hunter2" not in blob
    assert box.decrypt_text(blob, associated_data("t1", "r1")) == "hunter2"
    with pytest.raises(DecryptionError):
        box.decrypt_text(blob, associated_data("t2", "r1"))
    with pytest.raises(DecryptionError):
        box.decrypt_text(blob, associated_data("t1", "r2"))
    with pytest.raises(DecryptionError):
        SecretBox(b"x" * 32).decrypt_text(blob, associated_data("t1", "r1"))

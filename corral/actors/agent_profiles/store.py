"""The `agent_runtime_profiles` table: every query about profile rows, returning frozen records.

Only `corral.actors.agent_profiles` writes these rows. `env_sealed` is the env object
sealed with the tenant and profile id as associated data; nothing here decrypts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.actors.record import RowStore
from corral.ids import is_uuid
from corral.storage import Database, Transaction


@dataclass(frozen=True, slots=True)
class ProfileRecord:
    id: str
    tenant_id: str
    workspace_id: str | None
    name: str
    provider: str
    model: str | None
    command: str | None
    applies_to: list[str] = field(hash=False)
    env_keys: list[str] = field(hash=False)
    env_sealed: bytes | None
    secret_ids: list[str] = field(hash=False)
    default_kinds: list[str] = field(hash=False)
    """The kinds (`sandbox`, `computer`) this profile is the default for in its scope."""
    created_at: str
    updated_at: str


PROFILES = RowStore(
    "agent_runtime_profiles",
    ProfileRecord,
    json_columns=("applies_to", "env_keys", "secret_ids", "default_kinds"),
)


async def find(db: Database, tenant_id: str, id_or_name: str) -> ProfileRecord | None:
    """The tenant's profile by id (a UUID), else by name."""
    column = "id" if is_uuid(id_or_name) else "name"
    value = id_or_name.lower() if column == "id" else id_or_name
    row = await db.fetch_one(f"SELECT * FROM agent_runtime_profiles WHERE tenant_id = ? AND {column} = ?", (tenant_id, value))
    return None if row is None else _record(row)


async def list_for_tenant(db: Database, tenant_id: str, workspace_id: str | None = None) -> list[ProfileRecord]:
    equal = [("tenant_id", tenant_id)] + ([("workspace_id", workspace_id)] if workspace_id else [])
    return await PROFILES.where(db, equal, order_by="created_at, id")


async def defaults_in(db: Database, tenant_id: str, workspace_id: str | None) -> list[ProfileRecord]:
    """Profiles with a default kind in the workspace (or, for None, at tenant level)."""
    if workspace_id is None:
        rows = await db.fetch_all(
            "SELECT * FROM agent_runtime_profiles WHERE tenant_id = ? AND workspace_id IS NULL AND default_kinds <> '[]'",
            (tenant_id,),
        )
    else:
        rows = await db.fetch_all(
            "SELECT * FROM agent_runtime_profiles WHERE tenant_id = ? AND workspace_id = ? AND default_kinds <> '[]'",
            (tenant_id, workspace_id),
        )
    return [_record(row) for row in rows]


def _record(row: dict[str, object]) -> ProfileRecord:
    record = PROFILES.record(row)
    if record.env_sealed is not None and not isinstance(record.env_sealed, bytes):
        return PROFILES.replaced(record, {"env_sealed": bytes(record.env_sealed)})
    return record


# -- writes (the package's) -------------------------------------------------------------


def name_taken(tx: Transaction, tenant_id: str, name: str, except_id: str | None = None) -> bool:
    return tx.fetch_one(
        "SELECT 1 FROM agent_runtime_profiles WHERE tenant_id = ? AND name = ? AND id <> ?", (tenant_id, name, except_id or "")
    ) is not None


def scope_defaults(tx: Transaction, tenant_id: str, workspace_id: str | None) -> list[ProfileRecord]:
    if workspace_id is None:
        rows = tx.fetch_all(
            "SELECT * FROM agent_runtime_profiles WHERE tenant_id = ? AND workspace_id IS NULL AND default_kinds <> '[]'",
            (tenant_id,),
        )
    else:
        rows = tx.fetch_all(
            "SELECT * FROM agent_runtime_profiles WHERE tenant_id = ? AND workspace_id = ? AND default_kinds <> '[]'",
            (tenant_id, workspace_id),
        )
    return [_record(row) for row in rows]


def set_default_kinds(tx: Transaction, profile_id: str, kinds: list[str], now: str) -> None:
    tx.execute(
        "UPDATE agent_runtime_profiles SET default_kinds = ?, updated_at = ? WHERE id = ?",
        (PROFILES.row({"default_kinds": kinds})["default_kinds"], now, profile_id),
    )


def insert(tx: Transaction, record: ProfileRecord) -> None:
    PROFILES.insert(tx, record)


def replace(tx: Transaction, record: ProfileRecord) -> None:
    PROFILES.delete(tx, record.id)
    PROFILES.insert(tx, record)


def delete(tx: Transaction, profile_id: str) -> None:
    PROFILES.delete(tx, profile_id)


def load_in(tx: Transaction, profile_id: str) -> ProfileRecord | None:
    row = tx.fetch_one("SELECT * FROM agent_runtime_profiles WHERE id = ?", (profile_id,))
    return None if row is None else _record(row)

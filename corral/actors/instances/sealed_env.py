"""One store for every instance kind's environment variables, sealed at rest.

A sandbox's and a computer's variables are the same thing with different API
shapes: validated by the kind, then kept here. Every value is sealed with
AES-256-GCM (`SecretBox`) whose associated data binds the tenant, the instance
resource and the variable's name, so a value copied to another row, resource or
tenant does not decrypt. Values leave the store only in plaintext toward the
instance (at boot in memory, and with every exec or process), never to the API.

Each kind names its table in a `SealedEnvTable`; the SQL lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from corral.errors import ApiError
from corral.storage import Database, Row, Transaction, associated_data, utc_now_iso

MAX_VARS = 200
"""Variables one resource may hold; an environment larger than this is a design smell."""


class Sealer(Protocol):
    """What the store needs of the secret box."""

    def encrypt_text(self, plaintext: str, aad: bytes) -> bytes: ...

    def decrypt_text(self, blob: bytes, aad: bytes) -> str: ...


class Owner(Protocol):
    """The resource the variables belong to: a sandbox or computer record."""

    @property
    def id(self) -> str: ...

    @property
    def tenant_id(self) -> str: ...


@dataclass(frozen=True)
class SealedEnvTable:
    """Where one kind keeps its variables."""

    table: str
    owner_column: str
    name_column: str
    purpose: str
    """Bound into the associated data: a sandbox's value never opens as a computer's."""
    flag_column: str | None = None
    """A column that keeps the caller's `encrypted` flag (sandboxes report it back)."""


class SealedEnv:
    def __init__(self, db: Database, sealer: Sealer, table: SealedEnvTable) -> None:
        self.db = db
        self.sealer = sealer
        self.t = table

    def _aad(self, owner: Owner, name: str) -> bytes:
        return associated_data(owner.tenant_id, owner.id, f"{self.t.purpose}:{name}")

    async def names(self, owner_id: str) -> list[Row]:
        """`name` (and the flag, if kept), `created_at`, `updated_at` of each variable, by name."""
        t = self.t
        flag = f", {t.flag_column}" if t.flag_column else ""
        return await self.db.fetch_all(
            f"SELECT {t.name_column}{flag}, created_at, updated_at FROM {t.table} WHERE {t.owner_column} = ? "
            f"ORDER BY {t.name_column}",
            (owner_id,),
        )

    async def put(
        self,
        owner: Owner,
        values: Mapping[str, str],
        too_many: Callable[[int], ApiError],
        flags: Mapping[str, bool] | None = None,
    ) -> list[Row]:
        """Upsert `values` (names not given are kept); answer the rows written.

        `too_many(MAX_VARS)` is raised, in the kind's own words, when the resource
        would hold more than `MAX_VARS` variables.
        """
        t = self.t
        sealed = {name: self.sealer.encrypt_text(value, self._aad(owner, name)) for name, value in values.items()}
        owner_id, tenant_id = owner.id, owner.tenant_id

        def work(tx: Transaction) -> list[Row]:
            now = utc_now_iso()
            existing = {
                row[t.name_column]: row
                for row in tx.fetch_all(
                    f"SELECT {t.name_column}, created_at FROM {t.table} WHERE {t.owner_column} = ?", (owner_id,)
                )
            }
            if len(set(existing) | set(sealed)) > MAX_VARS:
                raise too_many(MAX_VARS)
            written: list[Row] = []
            for name, blob in sealed.items():
                fields: dict[str, object] = {"value": blob, "updated_at": now}
                if t.flag_column:
                    fields[t.flag_column] = int((flags or {}).get(name, True))
                if name in existing:
                    assignments = ", ".join(f"{column} = ?" for column in fields)
                    tx.execute(
                        f"UPDATE {t.table} SET {assignments} WHERE {t.owner_column} = ? AND {t.name_column} = ?",
                        (*fields.values(), owner_id, name),
                    )
                    created = existing[name]["created_at"]
                else:
                    tx.insert(
                        t.table,
                        {t.owner_column: owner_id, "tenant_id": tenant_id, t.name_column: name, "created_at": now, **fields},
                    )
                    created = now
                row: Row = {t.name_column: name, "created_at": created, "updated_at": now}
                if t.flag_column:
                    row[t.flag_column] = fields[t.flag_column]
                written.append(row)
            return written

        return await self.db.transaction(work)

    async def delete(self, owner_id: str, name: str) -> bool:
        """True if the variable was there."""
        t = self.t
        deleted = await self.db.execute(
            f"DELETE FROM {t.table} WHERE {t.owner_column} = ? AND {t.name_column} = ?", (owner_id, name)
        )
        return deleted == 1

    async def plaintext(self, owner: Owner) -> dict[str, str]:
        """The variables in plaintext, for a boot, an exec or a process about to start."""
        t = self.t
        rows = await self.db.fetch_all(
            f"SELECT {t.name_column}, value FROM {t.table} WHERE {t.owner_column} = ?", (owner.id,)
        )
        return {
            row[t.name_column]: self.sealer.decrypt_text(row["value"], self._aad(owner, row[t.name_column])) for row in rows
        }

    async def copy(self, source: Owner, target: Owner, too_many: Callable[[int], ApiError]) -> None:
        """A fork's or clone's environment: the source's values, sealed anew for the target."""
        values = await self.plaintext(source)
        if not values:
            return
        flags = None
        if self.t.flag_column:
            flags = {row[self.t.name_column]: bool(row[self.t.flag_column]) for row in await self.names(source.id)}
        await self.put(target, values, too_many, flags)

"""`RecordActor` and `RowStore`: an actor whose record is one row of one table.

Most resources (computers, sandboxes, processes, later databases and deployments)
are a row with a status column. A kind keeps its SQL in its own `store.py`, around
one `RowStore`: rows come out as the kind's frozen record (a dataclass whose fields
are the columns, JSON columns decoded), and only the kind's actor writes them. The
actor loads its record on activation, makes it from a draft when it is new
(`ActorSystem.create`), persists each state change with one UPDATE, and marks the
row `error` when the supervisor gives up.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, Generic, TypeVar

from corral.actors.actor import Actor
from corral.actors.runtime_errors import public_message
from corral.errors import ApiError, not_found
from corral.storage import Database, Row, Transaction, sql_identifier, utc_now_iso

_column = sql_identifier

R = TypeVar("R")


class RowStore(Generic[R]):
    """`table`'s rows as `record_type` instances (frozen dataclasses named by column).

    `json_columns` hold JSON text in the table and decoded values in the record.
    """

    def __init__(
        self, table: str, record_type: type[R], *, id_column: str = "id", json_columns: tuple[str, ...] = ()
    ) -> None:
        if not dataclasses.is_dataclass(record_type):
            raise TypeError(f"{record_type.__name__} must be a dataclass")
        self.table = _column(table)
        self.record_type = record_type
        self.id_column = _column(id_column)
        self.json_columns = frozenset(json_columns)
        self.columns = tuple(field.name for field in dataclasses.fields(record_type))

    # -- rows <-> records -----------------------------------------------------------

    def record(self, row: Row) -> R:
        """The record of a full row (columns it does not know are ignored)."""
        return self.record_type(**{name: self._decode(name, row[name]) for name in self.columns})

    def records(self, rows: list[Row]) -> list[R]:
        return [self.record(row) for row in rows]

    def row(self, values: dict[str, Any]) -> Row:
        """Column values as stored: JSON columns encoded."""
        return {name: self._encode(name, value) for name, value in values.items()}

    def replaced(self, record: R, values: dict[str, Any]) -> R:
        return dataclasses.replace(record, **values)  # type: ignore[type-var]

    def _decode(self, name: str, value: Any) -> Any:
        return json.loads(value) if name in self.json_columns and isinstance(value, str) else value

    def _encode(self, name: str, value: Any) -> Any:
        return json.dumps(value) if name in self.json_columns and value is not None else value

    # -- queries every kind has -----------------------------------------------------

    async def load(self, db: Database, record_id: str) -> R | None:
        row = await db.fetch_one(f"SELECT * FROM {self.table} WHERE {self.id_column} = ?", (record_id,))
        return None if row is None else self.record(row)

    async def value(self, db: Database, record_id: str, column: str) -> Any:
        """One column of the row as stored now (what the actor's record may not have seen)."""
        return await db.fetch_value(
            f"SELECT {_column(column)} FROM {self.table} WHERE {self.id_column} = ?", (record_id,)
        )

    async def where(
        self, db: Database, equal: list[tuple[str, Any]], *, also: str = "", order_by: str = "created_at DESC, id"
    ) -> list[R]:
        """Rows whose columns equal the values in `equal` (column names are checked),
        and the fixed condition `also`, in `order_by` order."""
        clauses = [f"{_column(name)} = ?" for name, _ in equal] + ([also] if also else [])
        rows = await db.fetch_all(
            f"SELECT * FROM {self.table} WHERE {' AND '.join(clauses) or 'TRUE'} ORDER BY {order_by}",
            tuple(value for _, value in equal),
        )
        return self.records(rows)

    def insert(self, tx: Transaction, record: R) -> None:
        tx.insert(self.table, self.row(dataclasses.asdict(record)))  # type: ignore[call-overload]

    async def update(self, db: Database, record_id: str, values: dict[str, Any], where: dict[str, Any] | None = None) -> bool:
        """Write `values` into the row; False when there is no such row (or none that
        also holds `where`'s values: a fence, such as the row's home)."""
        assignments = ", ".join(f"{_column(name)} = ?" for name in values)
        fence = "".join(f" AND {_column(name)} = ?" for name in where or ())
        changed = await db.execute(
            f"UPDATE {self.table} SET {assignments} WHERE {self.id_column} = ?{fence}",
            (*self.row(values).values(), record_id, *(where or {}).values()),
        )
        return changed == 1

    def delete(self, tx: Transaction, record_id: str) -> None:
        tx.execute(f"DELETE FROM {self.table} WHERE {self.id_column} = ?", (record_id,))


class RecordActor(Actor):
    """An actor over one row of its `store`, with `id_column = self.id`.

    Set `store`; the defaults fit the project's tables (`status`, `updated_at`,
    `tenant_id`). `self.record` is the row as last loaded or persisted, as the
    store's frozen record. A kind whose resources are made by their actor overrides
    `create_record` (called on the first activation of `ActorSystem.create`).

    Example::

        class SandboxActor(RecordActor):
            kind = "sandbox"
            store = SANDBOXES              # RowStore("sandboxes", SandboxRecord)
            transitions = TransitionTable({("running", Stop): "stopped"},
                                          refusals={Stop: ("SANDBOX_NOT_RUNNING", "...")})

            @handles(Stop)
            async def stop(self, message: Stop) -> SandboxRecord:
                await self.apply(message)            # 409 or persist the new status
                return self.record
    """

    store: ClassVar[RowStore[Any]]
    state_column: ClassVar[str] = "status"
    updated_at_column: ClassVar[str | None] = "updated_at"
    tenant_column: ClassVar[str | None] = "tenant_id"
    #: the state written by `on_failed`, and an optional column for the error text.
    error_state: ClassVar[str] = "error"
    error_column: ClassVar[str | None] = None

    record: Any

    def not_found(self) -> ApiError:
        """The error `get` raises when the row does not exist."""
        return not_found(f"{self.kind} not found")

    async def load(self) -> Any:
        return await self.store.load(self.db, self.id)

    async def create_record(self, draft: Any) -> Any:
        """Write the new resource's row from `draft` and return its record."""
        raise self.not_found()

    async def on_activate(self) -> None:
        record = await self.load()
        if record is None and self.draft is not None:
            record = await self.create_record(self.draft)
        if record is None:
            raise self.not_found()
        self.record = record
        self.state = str(getattr(record, self.state_column))
        if self.tenant_column is not None:
            self.tenant_id = getattr(record, self.tenant_column)

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        values = {self.state_column: state, **fields}
        if self.updated_at_column is not None:
            values.setdefault(self.updated_at_column, utc_now_iso())
        await self._update(values)
        if getattr(self, "record", None) is not None:
            self.record = self.store.replaced(self.record, values)

    async def on_failed(self, error: BaseException) -> None:
        values: dict[str, Any] = {self.state_column: self.error_state}
        if self.error_column is not None:
            # The supervisor logged the crash; the row says what a tenant may read.
            values[self.error_column] = f"{type(error).__name__}: {public_message(error)}"[:1000]
        if self.updated_at_column is not None:
            values[self.updated_at_column] = utc_now_iso()
        await self._update(values)

    async def _update(self, values: dict[str, Any]) -> None:
        if not await self.store.update(self.db, self.id, values):
            raise self.not_found()

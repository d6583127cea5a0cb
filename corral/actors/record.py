"""`RecordActor`: an actor whose record is one row of one table.

Most resources (computers, sandboxes, databases, deployments) are a row with a
status column. This base loads the row on activation, persists state changes with
one UPDATE, and marks the row `error` when the supervisor gives up.
"""

from __future__ import annotations

from typing import Any, ClassVar

from corral.actors.actor import Actor
from corral.errors import ApiError, not_found
from corral.storage import Row, sql_identifier, utc_now_iso

_column = sql_identifier


class RecordActor(Actor):
    """An actor over `table`'s row with `id_column = self.id`.

    Set `table`; the defaults fit the project's tables (`id`, `status`, `updated_at`,
    `tenant_id`). `self.record` is the row as last loaded or persisted.

    Example::

        class SandboxActor(RecordActor):
            kind = "sandbox"
            table = "sandboxes"
            transitions = TransitionTable({("running", Stop): "stopped"},
                                          refusals={Stop: ("SANDBOX_NOT_RUNNING", "...")})

            async def on_activate(self) -> None:
                await super().on_activate()          # loads self.record, self.state
                await self.services.runtime.adopt(self.id)

            @handles(Stop)
            async def stop(self, message: Stop) -> dict:
                await self.apply(message)            # 409 or persist the new status
                return self.record
    """

    table: ClassVar[str]
    id_column: ClassVar[str] = "id"
    state_column: ClassVar[str] = "status"
    updated_at_column: ClassVar[str | None] = "updated_at"
    tenant_column: ClassVar[str | None] = "tenant_id"
    #: the state written by `on_failed`, and an optional column for the error text.
    error_state: ClassVar[str] = "error"
    error_column: ClassVar[str | None] = None

    record: Row

    def not_found(self) -> ApiError:
        """The error `get` raises when the row does not exist."""
        return not_found(f"{self.kind} not found")

    async def load(self) -> Row | None:
        return await self.db.fetch_one(
            f"SELECT * FROM {_column(self.table)} WHERE {_column(self.id_column)} = ?",
            (self.id,),
        )

    async def on_activate(self) -> None:
        row = await self.load()
        if row is None:
            raise self.not_found()
        self.record = row
        self.state = str(row[self.state_column])
        if self.tenant_column is not None:
            self.tenant_id = row.get(self.tenant_column)

    async def save(self, state: str, fields: dict[str, Any]) -> None:
        values = {self.state_column: state, **fields}
        if self.updated_at_column is not None:
            values.setdefault(self.updated_at_column, utc_now_iso())
        await self._update(values)
        self.record = {**getattr(self, "record", {}), **values}

    async def on_failed(self, error: BaseException) -> None:
        values: dict[str, Any] = {self.state_column: self.error_state}
        if self.error_column is not None:
            values[self.error_column] = f"{type(error).__name__}: {error}"[:1000]
        if self.updated_at_column is not None:
            values[self.updated_at_column] = utc_now_iso()
        await self._update(values)

    async def _update(self, values: dict[str, Any]) -> None:
        assignments = ", ".join(f"{_column(name)} = ?" for name in values)
        changed = await self.db.execute(
            f"UPDATE {_column(self.table)} SET {assignments} WHERE {_column(self.id_column)} = ?",
            (*values.values(), self.id),
        )
        if changed != 1:
            raise self.not_found()

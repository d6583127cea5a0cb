"""The node: an actor over its `nodes` row (contract §20).

A node joins when it starts (`Join`: its address, region and capacity, a new boot id,
state `active`), renews its heartbeat with its load every `HEARTBEAT_SECONDS`
(`Heartbeat`), and is drained by an operator (`Drain`: `active` or `draining` ->
`draining`; draining twice is the same), and leaves when it stops cleanly (`Leave`).
A restart joins as `active` again: a drain lasts until the node's next start. `lost` is never written: it is what a node whose
heartbeat stopped looks like (`store.seen_state`).

On SQLite, which one node serves, `Join` also forgets the rows of other names (a node
that was renamed; `service.join` has refused to start beside a live one) and gives
every resource without this node's name its `node` (made before nodes were recorded,
or under the old name): nothing else can be writing them, and no other node hosts
anything there. It is the one write of those rows outside their own actors, a
migration's.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from corral.actors.actor import handles
from corral.actors.record import RecordActor
from corral.actors.transitions import TransitionTable
from corral.config import SettingsError
from corral.errors import ApiError, not_found
from corral.storage import Transaction, utc_now_iso

from . import store
from .store import ACTIVE, DRAINING, NODES, NodeRecord

log = logging.getLogger("corral.nodes")


@dataclass(frozen=True)
class NodeLoad:
    """What a heartbeat reports: capacity (it may change: disk) and load."""

    cores: int
    memory_mb: int
    disk_free_mb: int
    instances: int
    pooled: int
    memory_mb_used: int
    templates: list[str]
    max_instances: int = 0
    max_memory_mb: int = 0
    disk_reserve_mb: int = 0
    """Placement's limits on the node (`placement.py`), from its settings."""


@dataclass(frozen=True)
class Join:
    advertise_url: str
    region: str
    boot_id: str
    load: NodeLoad
    single_node: bool
    """The store is SQLite: no second node may share it."""
    advertise_preview_url: str = ""


@dataclass(frozen=True)
class Heartbeat:
    load: NodeLoad


@dataclass(frozen=True)
class Drain:
    """Place no new work on the node until it restarts, and move what `move` says to
    other nodes (`moves.MOVES`: `none`, `stopped`, `all`); answers its record."""

    move: str = "stopped"


@dataclass(frozen=True)
class Leave:
    """The node stops cleanly: it is lost at once, and its name frees a SQLite store."""


class SecondNodeRefused(SettingsError):
    """A second node on a one-node (SQLite) store: `corral serve` says so and exits 2."""


def node_not_found() -> ApiError:
    return not_found("node not found", "NODE_NOT_FOUND")


class NodeActor(RecordActor):
    kind = "node"
    store = NODES
    record: NodeRecord
    state_column = "state"
    tenant_column = None
    transitions = TransitionTable({("*", Join): ACTIVE, ((ACTIVE, DRAINING), Drain): DRAINING})

    def not_found(self) -> ApiError:
        return node_not_found()

    async def create_record(self, draft: Join) -> NodeRecord:
        now = utc_now_iso()
        record = NodeRecord(
            name=self.id, advertise_url=draft.advertise_url, region=draft.region, state=ACTIVE, boot_id=draft.boot_id,
            started_at=now, heartbeat_at=now, updated_at=now, advertise_preview_url=draft.advertise_preview_url,
            **dataclasses.asdict(draft.load),
        )

        def write(tx: Transaction) -> None:
            if draft.single_node:
                store.forget_others(tx, self.id)
                store.adopt_homeless(tx, self.id)
            NODES.insert(tx, record)

        await self.db.transaction(write)
        return record

    @handles(Join)
    async def join(self, message: Join) -> NodeRecord:
        next_state = self.transition(message)
        if self.record.boot_id != message.boot_id:  # not the run that made the row just now
            now = utc_now_iso()
            values: dict[str, Any] = {
                "state": next_state, "advertise_url": message.advertise_url, "region": message.region,
                "boot_id": message.boot_id, "started_at": now, "heartbeat_at": now, "updated_at": now, "moving": None,
                "advertise_preview_url": message.advertise_preview_url, **dataclasses.asdict(message.load),
            }

            def write(tx: Transaction) -> None:
                if message.single_node:
                    store.forget_others(tx, self.id)
                    store.adopt_homeless(tx, self.id)
                tx.execute(
                    f"UPDATE nodes SET {', '.join(f'{name} = ?' for name in values)} WHERE name = ?",
                    (*NODES.row(values).values(), self.id),
                )

            await self.db.transaction(write)
            self.record = NODES.replaced(self.record, values)
            self.state = next_state
            self.mark_persisted()
        return self.record

    @handles(Heartbeat)
    async def heartbeat(self, message: Heartbeat) -> NodeRecord:
        """The heartbeat and load columns alone: never `state`, which an operator's drain
        (through another node's actor, perhaps) may have changed meanwhile."""
        now = utc_now_iso()
        values = {"heartbeat_at": now, "updated_at": now, **dataclasses.asdict(message.load)}
        if not await NODES.update(self.db, self.id, values):
            raise self.not_found()
        self.record = NODES.replaced(self.record, values)
        return self.record

    @handles(Leave)
    async def leave(self, message: Leave) -> None:
        values = {"boot_id": "", "updated_at": utc_now_iso()}
        if await NODES.update(self.db, self.id, values):
            self.record = NODES.replaced(self.record, values)

    @handles(Drain)
    async def drain(self, message: Drain) -> NodeRecord:
        await self.reload()  # the node may have restarted (and rejoined) since this actor read its row
        moving = None if message.move == "none" else message.move
        if self.state != DRAINING or self.record.moving != moving:
            await self.apply(message, moving=moving)
            log.info("node %s is draining: no new work is placed on it; moving %s of its resources", self.id, message.move)
        return self.record

    async def reload(self) -> None:
        """The row as stored now: another node's heartbeats write it through that node's actor."""
        record = await self.load()
        if record is None:
            raise self.not_found()
        self.record, self.state = record, record.state
        self.mark_persisted()

    async def on_failed(self, error: BaseException) -> None:
        """A node has no error state: its heartbeat stops, and it is seen as lost."""

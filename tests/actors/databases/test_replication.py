"""Which replicas a node ends as orphans (`ReplicaWaits.end_orphaned_replicas`), on a
real store. The servers and the actors are stand-ins: what is under test is the choice
made from the rows; the promotion itself is proved end to end in
`tests/actors/nodes/test_three_nodes.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.actors.databases.messages import PrimaryMoved
from corral.actors.databases.replication import PROMOTING_STATUS, ReplicaWaits
from corral.storage import Database, migrate, open_database, utc_now_iso
from tests.actors.nodes.test_lost_node import insert_node

LOST_HOST = "10.9.0.1"


@dataclass
class Servers:
    """The replica servers this node has, and the host each streams from."""

    upstreams: dict[str, str]

    @property
    def layout(self) -> Servers:
        return self

    def load(self, server_id: str) -> object | None:
        return object() if server_id in self.upstreams else None

    def upstream_host(self, server_id: str) -> str:
        return self.upstreams[server_id]


@dataclass
class Refs:
    asked: list[tuple[str, Any]] = field(default_factory=list)

    async def get(self, actor_class: type, actor_id: str) -> Refs.Ref:
        return Refs.Ref(self, actor_id)

    @dataclass
    class Ref:
        refs: Refs
        actor_id: str

        async def ask(self, message: Any, timeout: float) -> bool:
            self.refs.asked.append((self.actor_id, message))
            return True


async def insert_database(db: Database, database_id: str, *, role: str, status: str, node: str, primary_id: str | None = None) -> None:
    now = utc_now_iso()
    await db.execute(
        "INSERT INTO databases (id, tenant_id, name, engine, engine_version, status, size, region, role, primary_id,"
        " auto_suspend_seconds, port, pg_user, pg_database, server_restarts, workspace_id, project_id, node, created_at, updated_at)"
        " VALUES (?, 'ten_1', ?, 'postgres', '16', ?, 'small', 'local', ?, ?, 0, ?, 'u', 'd', 0, 'ws', 'prj', ?, ?, ?)",
        (database_id, database_id, status, role, primary_id, 15000 + len(database_id), node, now, now),
    )


async def test_a_replica_is_not_ended_while_its_primary_is_promoted_here_and_is_once_that_primary_runs(tmp_path: Path) -> None:
    """The take-over of a lost primary writes it onto the replica's node (`restarting`)
    before the replica hands its server over: ending that replica as an orphan in between
    would stop the very server being promoted (and leave the primary with none)."""
    db = open_database(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        await migrate(db)
        now = utc_now_iso()
        await db.execute("INSERT INTO tenants (id, name, created_at, updated_at) VALUES ('ten_1', 'T', ?, ?)", (now, now))
        await insert_node(db, "node-a", "active", boot_id="boot", heartbeat_at="2000-01-01T00:00:00.000000Z")
        await db.execute("UPDATE nodes SET advertise_url = ? WHERE name = 'node-a'", (f"http://{LOST_HOST}:8080",))
        await insert_node(db, "node-b", "active", boot_id="boot", heartbeat_at=now)
        # `kept` is still its lost node's: its replica streams from that node, as it should.
        await insert_database(db, "kept", role="primary", status="running", node="node-a")
        await insert_database(db, "kept-r", role="replica", status="running", node="node-b", primary_id="kept")
        # `moved` was taken over by this node, which promotes `moved-r` into it.
        await insert_database(db, "moved", role="primary", status=PROMOTING_STATUS, node="node-b")
        await insert_database(db, "moved-r", role="replica", status="running", node="node-b", primary_id="moved")
        refs = Refs()
        waits = ReplicaWaits(db, refs, "node-b", Servers({"kept-r": LOST_HOST, "moved-r": LOST_HOST}), object)  # type: ignore[arg-type]

        await waits.end_orphaned_replicas()
        assert refs.asked == []

        # Promoted from another replica (this one was not handed over): this one is an orphan.
        await db.execute("UPDATE databases SET status = 'running' WHERE id = 'moved'")
        await waits.end_orphaned_replicas()
        assert refs.asked == [("moved-r", PrimaryMoved("node-b"))]
    finally:
        await db.close()

"""The database: a kind of instance actor (`corral.actors.instances`) whose instance is a
PostgreSQL server (`corral.vm.postgres`).

States (contract §13): creating -> running | error; running -> stopping -> stopped;
running -> suspended (idle) -> running (wake, or a client at the proxy);
running -> restarting -> running; stopped/suspended/running -> restoring -> running;
any -> deleted. A server that exits under a running database is started again with
backoff (1, 2, 4, 8, 16 s); the restart is written in its log and counted in
`server_restarts`; after five within ten minutes the database is `error`.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from corral.actors.actor import handles
from corral.actors.instances import failure_summary
from corral.actors.instances.moving import MovingInstance
from corral.actors.instances.refusals import Refusals
from corral.actors.nodes.archives import export_to_blobs
from corral.actors.nodes.placement import Demand
from corral.actors.runtime import database_disk_gb, disk_mb
from corral.actors.timings import timed
from corral.actors.transitions import TransitionTable
from corral.errors import ApiError, conflict
from corral.net import NetworkError
from corral.storage import Blob, BlobNotFound, associated_data, utc_now_iso
from corral.vm import SIZES, InstanceInfo, InstanceSpec, RuntimeDriver
from corral.vm.postgres import PostgresDriver, replica_name

from . import replication, store
from .messages import (
    AddReplica,
    Backup,
    BackupDone,
    Boot,
    Booted,
    Branch,
    Destroy,
    HandOver,
    Move,
    PrimaryMoved,
    RecoverServer,
    Resize,
    Restart,
    Restore,
    Restored,
    Rotate,
    ServerExited,
    Start,
    Stop,
    Suspend,
    Upstream,
    WaitForReplicas,
    Wake,
)
from .node import DatabaseNode
from .store import DATABASES, BackupRecord, DatabaseDraft, DatabaseRecord, RestoreRecord

log = logging.getLogger("corral.databases")

PASSWORD_PURPOSE = "database-password"
BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0)
CRASH_WINDOW = 600.0
LIVE_STATES = ("running", "stopped", "suspended")


def database_not_found() -> ApiError:
    return ApiError(404, "DATABASE_NOT_FOUND", "database not found")


def new_password() -> str:
    return secrets.token_urlsafe(24)


def _invalid(text: str) -> tuple[str, str]:
    return ("INVALID_STATE", text)


class DatabaseActor(MovingInstance):
    kind = "database"
    store = DATABASES
    record: DatabaseRecord
    booting_state = "creating"
    adopt_while_booting = False
    removed_state = "deleted"
    gone_states = ("deleted",)
    refusals = Refusals()
    transitions = TransitionTable(
        {
            ("creating", Boot): "creating",
            ("creating", Booted): "running",
            (("stopped", "suspended", "error"), Start): "running",
            (("running", "suspended"), Stop): "stopped",
            ("running", Restart): "running",
            ("running", Wake): "running",
            ("suspended", Wake): "running",
            ("running", Suspend): "suspended",
            (("running", "suspended"), Upstream): "running",
            (LIVE_STATES, Resize): "*",
            (LIVE_STATES, Move): "*",
            (LIVE_STATES, Branch): "*",
            ("running", AddReplica): "*",
            ("running", Backup): "*",
            (LIVE_STATES, Restore): "restoring",
            ("restoring", Restored): "*",
            (("running", "stopped", "suspended", "restarting", "error"), Rotate): "*",
            ("running", ServerExited): "restarting",
            ("restarting", RecoverServer): "running",
            ("*", BackupDone): "*",
            ("*", Destroy): "deleted",
            ("running", HandOver): "deleted",
        },
        refusals={
            Start: _invalid("database cannot be started from its current status"),
            Stop: _invalid("database cannot be stopped from its current status"),
            Restart: _invalid("database must be running to restart"),
            Wake: _invalid("database cannot be woken from its current status"),
            Suspend: _invalid("database is not running"),
            Upstream: _invalid("database is not running"),
            Resize: _invalid("database cannot be resized from its current status"),
            Move: _invalid("database cannot be moved from its current status"),
            Branch: _invalid("database cannot be branched from its current status"),
            AddReplica: _invalid("database must be running to add a replica"),
            HandOver: _invalid("replica is not running"),
            Backup: _invalid("database must be running to back up"),
            Restore: _invalid("database cannot be restored from its current status"),
            Restored: _invalid("database is not being restored"),
            Rotate: _invalid("credentials cannot be rotated from the database's current status"),
            ServerExited: _invalid("database is not running"),
            RecoverServer: _invalid("database is not restarting"),
            Boot: _invalid("database is not being created"),
            Booted: _invalid("database is not being created"),
        },
    )

    movable_states = ("stopped",)
    movable_when_running = ("running", "suspended")
    movable_where = (
        "role = 'primary' AND NOT EXISTS (SELECT 1 FROM databases r WHERE r.primary_id = databases.id AND r.status <> 'deleted')"
    )
    """A drain moves a primary without replicas: a replica is made again from its primary
    (delete it, add one), and a primary's replicas stream from its node's address."""

    _crashes: list[float]

    # -- the kind's hooks -----------------------------------------------------------------------

    @property
    def node(self) -> DatabaseNode:
        node: DatabaseNode = self.services.databases
        return node

    @property
    def servers(self) -> PostgresDriver:
        return self.node.driver

    async def driver(self) -> RuntimeDriver:
        return self.servers

    def not_found(self) -> ApiError:
        return database_not_found()

    def runtime_template(self) -> str:
        return "postgresql-15"

    def disk_gb(self) -> float:
        return database_disk_gb(self.services.settings, self.record.size)

    def spec(self, boot_env: dict[str, str], instance_id: str | None = None) -> InstanceSpec:
        env = {
            "role": self.record.pg_user,
            "database": self.record.pg_database,
            "port": str(self.node.server_port(self.record.port)),
            "listen": ",".join(self.node.listen_hosts(True)),
        }
        if self.record.primary_id:
            env["replica_of"] = self.record.primary_id
        return InstanceSpec(
            instance_id=instance_id or self.id,
            template=self.runtime_template(),
            limits=replace(SIZES[self.record.size], disk_mb=disk_mb(self.disk_gb())),
            env=env,
            hostname=self.id,
            boot_env=boot_env,
        )

    def password(self) -> str | None:
        sealed = self.record.password_sealed
        if sealed is None or self.tenant_id is None:
            return None
        return str(self.services.secrets.decrypt_text(bytes(sealed), associated_data(self.tenant_id, self.id, PASSWORD_PURPOSE)))

    async def boot_env(self) -> dict[str, str]:
        """The primary's password, and the addresses to listen on (the node's, as now)."""
        env = {"listen": ",".join(self.node.listen_hosts(True))}
        password = self.password()
        if password is not None and self.record.role == "primary":
            env["password"] = password
        return env

    async def make_instance(
        self, driver: RuntimeDriver, env: dict[str, str], clone_source: str | None, snapshot_source: str | None
    ) -> InstanceInfo:
        if self.record.role == "replica" and self.record.primary_id:
            spec = self.spec(env)
            source = await replication.primary_source(self.db, self.services.settings.node_name, self.node, self.record.primary_id)
            if source is not None:  # the primary is another node's (issue 30)
                spec.env.update(primary_host=source[0], primary_port=str(source[1]))
            return await self.servers.create_replica(self.record.primary_id, spec)
        return await super().make_instance(driver, env, clone_source, snapshot_source)

    recovering_state = replication.PROMOTING_STATUS
    """A primary being promoted from its replica here reads `restarting` until it answers."""

    async def has_copy_here(self) -> bool:
        if self.record.role != "primary":
            return False
        return await replication.local_replica(self.db, self.services.settings.node_name, self.id, self.servers) is not None

    async def recover_here(self, lost_node: str) -> bool:
        """A primary whose node is lost, taken over by a node that runs a replica of it:
        the replica hands its server over, which is promoted to be this database's
        (same id, role, password and port: `url` follows it, with this node's host).
        False when no running replica of it is here: it reads `NODE_LOST` as others do."""
        if self.record.role != "primary":
            return False
        replica = await replication.local_replica(self.db, self.services.settings.node_name, self.id, self.servers)
        if replica is None:
            return False
        try:
            replica_ref = await self.services.system.get(type(self), replica.id)
            await replica_ref.ask(HandOver(self.id), timeout=120)
            info = await self.servers.promote_into(replica.id, self.spec(await self.boot_env()))
        except Exception as exc:  # it reads NODE_LOST, not a status nothing will change
            log.warning("database %s: replica %s could not be promoted: %s", self.id, replica.id, exc)
            return False
        self.info = info
        await self.services.runtime.driver()  # the bridge, for the proxy's internal address
        await self.node.proxy.listen(self.id, self.record.port, self.node.listen_hosts(True))
        await self.persist(state="running", error=None, last_activity_at=utc_now_iso())
        await self.on_instance_up(info)
        self.node.proxy.mark_active(self.id)
        await self.emit(
            "promoted", {**self.subject_data(), "replica_id": replica.id, "lost_node": lost_node, "node": self.record.node}
        )
        log.warning("database %s of lost node %s runs again here, promoted from its replica %s", self.id, lost_node, replica.id)
        return True

    async def create_record(self, draft: DatabaseDraft) -> DatabaseRecord:
        record = await self.db.transaction(lambda tx: store.create(tx, self.id, draft, self.services.settings.node_name))
        self.tenant_id = record.tenant_id
        return record

    async def on_activate(self) -> None:
        self._crashes = []
        await super().on_activate()
        if self.state == "deleted":
            raise self.not_found()
        if self.draft is not None:
            await self.emit("created", self.subject_data())

    async def reconcile(self) -> None:
        """A state a control-plane restart caught mid-change is settled first: a stop goes
        on to `stopped`, anything else to `running` (which the base then makes true)."""
        if self.state == "stopping":
            with contextlib.suppress(Exception):
                await self.halt_instance()
            await self.persist(state="stopped")
        elif self.state in ("starting", "restarting", "restoring"):
            await self.persist(state="running")
        await super().reconcile()

    def subject_data(self) -> dict[str, Any]:
        return {"database_id": self.id, "name": self.record.name, "status": self.state}

    async def on_instance_up(self, info: InstanceInfo) -> None:
        await self.open_fast_path()

    async def before_halt(self) -> None:
        await self.close_fast_path()

    async def open_fast_path(self) -> None:
        """New connections go straight to the running server (`corral.net.pgproxy.access`)."""
        node = self.node
        try:
            await node.access.open_fast_path(
                self.id, node.listen_hosts(True), self.record.port, node.server_port(self.record.port)
            )
        except NetworkError as exc:  # the proxy still serves every connection
            log.warning("database %s: no fast path: %s", self.id, exc)

    async def close_fast_path(self) -> None:
        with contextlib.suppress(NetworkError):
            await self.node.access.close_fast_path(self.id)

    async def on_running(self, booted: bool) -> None:
        self.node.proxy.mark_active(self.id)
        if booted:
            await self.emit("ready", self.subject_data())
        await self.emit("started", self.subject_data())

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "port": self.record.port,
            "server_restarts": self.record.server_restarts,
            "open_connections": self.node.proxy.open_connections(self.id),
        }

    # -- moving to another node (a drain: `corral.actors.nodes.moves`) ---------------------------

    def move_demand(self) -> Demand:
        return Demand("databases", self.record.size, None, self.record.region)

    async def check_movable(self) -> None:
        if self.record.role != "primary":
            raise conflict("INVALID_STATE", "a replica does not move: delete it and add one to its primary")
        if await store.replicas_of(self.db, self.id):
            raise conflict("INVALID_STATE", "a database with replicas does not move: delete its replicas first")

    async def stop_for_move(self) -> bool:
        """The server stops cleanly (its files are then consistent as they lie); a
        suspended one is stopped already. It starts again on its new node."""
        if self.state == "running":
            await self.persist(state="stopping")
            await self.halt_instance()
        await self.persist(state="stopped")
        await self.emit("stopped", {**self.subject_data(), "reason": "move"})
        return True

    async def start_after_move(self) -> None:
        await self.start(Start())

    async def pack_for_move(self) -> Blob:
        return await export_to_blobs(
            self.services.blobs, self.services.settings.data_dir, lambda path: self.servers.archive_data(self.id, path)
        )

    async def unpack_moved(self, driver: RuntimeDriver, archive_sha256: str) -> None:
        archive = await self.services.blobs.verified_path(archive_sha256)
        with contextlib.suppress(Exception):  # what an adoption cut short left
            await self.servers.destroy(self.id)
        self.info = await self.servers.create_from_archive(self.spec(await self.boot_env()), archive)

    async def after_move_here(self) -> None:
        """Its clients connect at its port on this node from now on (the port is the
        cluster's: it stays the database's)."""
        await self.services.runtime.driver()  # the bridge, for the proxy's internal address
        await self.node.proxy.listen(self.id, self.record.port, self.node.listen_hosts(True))

    async def after_move_away(self) -> None:
        self.node.proxy.forget(self.id)

    # -- lifecycle ----------------------------------------------------------------------------------

    @handles(Start, Wake)
    async def start(self, message: Start | Wake) -> DatabaseRecord:
        waking = isinstance(message, Wake)
        if waking and self.state == "running":
            return self.record
        with timed(self.services, self.kind, "wake") if waking else contextlib.nullcontext():
            next_state = self.transition(message)
            await self.persist(state="starting")
            try:
                await self.start_instance()
            except BaseException:
                await self.persist(state="error", error="the server did not start")
                raise
            await self.persist(state=next_state, error=None)
            await self.on_running(booted=False)
            if waking:
                await self.emit("woken", self.subject_data())
        return self.record

    @handles(Upstream)
    async def upstream(self, message: Upstream) -> str:
        """The socket path for the proxy's client, waking a suspended server on the way."""
        self.transition(message)
        if self.state == "suspended":
            await self.start(Wake())
        return str(self.servers.socket_path(self.id))

    @handles(Stop, Suspend)
    async def stop(self, message: Stop | Suspend) -> DatabaseRecord:
        next_state = self.transition(message)
        if isinstance(message, Suspend):
            await self.close_fast_path()  # from now on new clients reach the proxy, which wakes it
            if self.node.proxy.open_connections(self.id) or await self.servers.client_connections(self.id):
                await self.open_fast_path()
                self.node.proxy.mark_active(self.id)
                raise conflict("INVALID_STATE", "database has open connections")
        if self.state == "running":
            await self.persist(state="stopping")
            await self.halt_instance()
        await self.persist(state=next_state)
        await self.emit("suspended" if isinstance(message, Suspend) else "stopped", self.subject_data())
        return self.record

    @handles(Restart)
    async def restart(self, message: Restart) -> DatabaseRecord:
        next_state = self.transition(message)
        await self.persist(state="restarting")
        await self.halt_instance()
        await self.start_instance()
        await self.persist(state=next_state)
        await self.emit("restarted", self.subject_data())
        self.node.proxy.mark_active(self.id)
        return self.record

    @handles(Resize, Move)
    async def change(self, message: Resize | Move) -> DatabaseRecord:
        """A new size or region; a running server restarts with it (contract §13)."""
        self.transition(message)
        was_running = self.state == "running"
        if isinstance(message, Resize):
            await self.servers.resize(self.id, SIZES[message.size])
            fields: dict[str, Any] = {"size": message.size}
        else:
            fields = {"region": message.region}
        if was_running:
            await self.persist(state="restarting", **fields)
            await self.halt_instance()
            await self.start_instance()
            await self.persist(state="running")
            self.node.proxy.mark_active(self.id)
        else:
            await self.persist(**fields)
        await self.emit("resized" if isinstance(message, Resize) else "moved", {**self.subject_data(), **fields})
        return self.record

    @handles(Branch)
    async def branch(self, message: Branch) -> str:
        self.transition(message)
        return self.id

    @handles(AddReplica)
    async def add_replica(self, message: AddReplica) -> str:
        self.transition(message)
        if self.record.role != "primary":
            raise conflict("INVALID_STATE", "a replica cannot have replicas; add one to its primary")
        return self.id

    @handles(Rotate)
    async def rotate(self, message: Rotate) -> DatabaseRecord:
        self.transition(message)
        if self.record.role != "primary":
            raise conflict("INVALID_STATE", "a replica's credentials are its primary's: rotate the primary's")
        password = new_password()
        assert self.tenant_id is not None
        sealed = self.services.secrets.encrypt_text(password, associated_data(self.tenant_id, self.id, PASSWORD_PURPOSE))
        if self.state == "running":
            await self.servers.rotate_password(self.id, self.record.pg_user, password)
        await self.persist(password_sealed=sealed)
        await self.emit("credentials.rotated", {"database_id": self.id})
        return self.record

    @handles(HandOver)
    async def hand_over(self, message: HandOver) -> DatabaseRecord:
        if self.record.primary_id != message.primary_id:
            raise conflict("INVALID_STATE", "not a replica of that database")
        next_state = self.transition(message)
        self.node.proxy.forget(self.id)
        await self.halt_instance()
        await self.persist(state=next_state, password_sealed=None)
        await self.emit("deleted", {"database_id": self.id, "name": self.record.name, "promoted_into": message.primary_id})
        return self.record

    @handles(WaitForReplicas)
    async def wait_for_replicas(self, message: WaitForReplicas) -> list[str]:
        """The primary's synchronous replicas (`replication.ReplicaWaits`), on its server
        as it is (a stopped one takes them when it starts): of the candidates, those it
        waits for already, and those streaming from it now. A replica is waited for only
        once it has streamed from this server, so a commit never waits for one that
        never came (a replica of the primary this one was promoted from)."""
        if self.is_removed() or self.record.role != "primary":
            return []
        with self.refused():
            waited = set(self.servers.waited_replicas(self.id))
            streaming = set(await self.servers.streaming_replicas(self.id)) if self.state == "running" else set()
            keep = [rid for rid in message.replica_ids if replica_name(rid) in waited or replica_name(rid) in streaming]
            await self.servers.wait_for_replicas(self.id, keep)
            return self.servers.waited_replicas(self.id)

    @handles(PrimaryMoved)
    async def primary_moved(self, message: PrimaryMoved) -> bool:
        """This replica streams from a server that is no longer its primary's (the
        primary was promoted from another replica on another node): it cannot follow
        the new one (it may hold WAL the new one never had), so it stops, `error`,
        to be deleted and added again (`replication.ReplicaWaits`)."""
        if self.is_removed() or self.record.role != "replica" or self.state != "running":
            return False
        self.node.proxy.forget(self.id)
        await self.halt_instance()
        error = (
            f"its primary was promoted from another replica on node {message.node}: this replica cannot follow it;"
            " delete it and add a new one"
        )
        await self.persist(state="error", error=error)
        await self.emit("error", {**self.subject_data(), "error": error})
        return True

    @handles(Destroy)
    async def destroy(self, message: Destroy) -> DatabaseRecord:
        next_state = self.transition(message)
        self.node.proxy.forget(self.id)
        if self.record.role == "replica" and self.state == "running":
            # Its primary stops waiting for it (`replication.ReplicaWaits`) before it goes.
            await self.persist(state="stopping")
        await self.destroy_instance()
        await self.persist(state=next_state, password_sealed=None)
        await self.emit("deleted", {"database_id": self.id, "name": self.record.name})
        return self.record

    # -- crashes ---------------------------------------------------------------------------------------

    @handles(ServerExited)
    async def server_exited(self, message: ServerExited) -> None:
        if self.state != "running":
            return
        info = await self.servers.info(self.id)
        if info.init_pid is not None:
            return  # it runs after all
        now = time.monotonic()
        self._crashes = [t for t in self._crashes if now - t < CRASH_WINDOW] + [now]
        attempt = len(self._crashes)
        if attempt > len(BACKOFF):
            self.servers.note(self.id, f"the server exited {attempt} times in {int(CRASH_WINDOW)} s; giving up")
            await self.persist(state="error", error="the server keeps exiting")
            await self.emit("error", {**self.subject_data(), "error": "the server keeps exiting"})
            return
        delay = BACKOFF[attempt - 1]
        self.transition(message)
        await self.close_fast_path()
        self.servers.note(self.id, f"the server exited unexpectedly; restarting it in {delay:g} s (attempt {attempt})")
        await self.persist(state="restarting", server_restarts=self.record.server_restarts + 1)
        await self.emit("server.exited", {"database_id": self.id, "attempt": attempt, "restart_in_seconds": delay})
        self.spawn(self._recover_later, delay)

    async def _recover_later(self, delay: float) -> None:
        await trio.sleep(delay)
        with contextlib.suppress(ApiError):
            await self.ref.tell(RecoverServer())

    @handles(RecoverServer)
    async def recover(self, message: RecoverServer) -> None:
        if self.state != "restarting":
            return
        next_state = self.transition(message)
        try:
            await self.start_instance()
        except Exception as exc:  # counted as one more crash
            self.servers.note(self.id, f"the restart failed: {failure_summary(exc)}")
            await self.persist(state="running")
            await self.server_exited(ServerExited())
            return
        self.servers.note(self.id, "the server was restarted by its supervisor")
        await self.persist(state=next_state, error=None)
        await self.emit("restarted", {**self.subject_data(), "reason": "crash"})

    # -- backups and restores ----------------------------------------------------------------------------

    @handles(Backup)
    async def backup(self, message: Backup) -> BackupRecord:
        self.transition(message)
        assert self.tenant_id is not None
        record = BackupRecord(
            id=message.backup_id,
            tenant_id=self.tenant_id,
            database_id=self.id,
            status="running",
            method="pg_basebackup",
            size_bytes=None,
            blob_sha256=None,
            source_user=self.record.pg_user,
            source_database=self.record.pg_database,
            error=None,
            started_at=utc_now_iso(),
            completed_at=None,
        )
        await self.db.transaction(lambda tx: store.insert_backup(tx, record))
        await self.emit("backup.started", {"database_id": self.id, "backup_id": record.id})
        self.spawn(self._run_backup, record.id)
        return record

    async def _run_backup(self, backup_id: str) -> None:
        outcome = BackupDone(backup_id, None, None, "interrupted")
        try:
            with timed(self.services, self.kind, "backup"), tempfile.TemporaryDirectory(
                dir=self.node.driver.layout.root, prefix=".backup-"
            ) as work:
                archive = Path(work) / "base.tar.gz"
                await self.servers.backup(self.id, archive)
                blob = await self.services.blobs.put_file(archive)
                outcome = BackupDone(backup_id, blob.sha256, blob.size_bytes)
        except Exception as exc:  # the backup fails, the database does not
            log.warning("backup %s of database %s failed: %s", backup_id, self.id, exc)
            outcome = BackupDone(backup_id, None, None, failure_summary(exc))
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(ApiError):
                await self.ref.tell(outcome)

    @handles(BackupDone)
    async def backup_done(self, message: BackupDone) -> None:
        await store.finish_backup(self.db, message.backup_id, size=message.size_bytes, sha256=message.sha256, error=message.error)
        what = "failed" if message.error else "completed"
        await self.emit(f"backup.{what}", {"database_id": self.id, "backup_id": message.backup_id, "error": message.error})

    @handles(Restore)
    async def restore(self, message: Restore) -> RestoreRecord:
        if self.record.role != "primary":
            raise conflict("INVALID_STATE", "a replica cannot be restored; restore its primary")
        next_state = self.transition(message)
        if message.backup.status != "completed" or message.backup.blob_sha256 is None:
            raise conflict("BACKUP_NOT_READY", "backup is not completed")
        assert self.tenant_id is not None
        record = RestoreRecord(
            id=message.restore_id,
            tenant_id=self.tenant_id,
            database_id=self.id,
            backup_id=message.backup.id,
            status="running",
            error=None,
            started_at=utc_now_iso(),
            completed_at=None,
        )
        await self.db.transaction(lambda tx: store.insert_restore(tx, record))
        previous = self.state
        await self.close_fast_path()
        await self.persist(state=next_state)
        await self.emit("restore.started", {"database_id": self.id, "restore_id": record.id, "backup_id": message.backup.id})
        self.spawn(self._run_restore, record.id, message.backup.blob_sha256, previous)
        return record

    async def _run_restore(self, restore_id: str, sha256: str, previous: str) -> None:
        outcome = Restored(restore_id, "interrupted")
        try:
            archive = await self.services.blobs.verified_path(sha256)
            await self.servers.restore_archive(self.id, archive, await self.boot_env())
            outcome = Restored(restore_id)
        except BlobNotFound:
            outcome = Restored(restore_id, "the backup's archive is gone from the blob store")
        except Exception as exc:  # the data from before is back: the database is as it was
            log.warning("restore %s into database %s failed: %s", restore_id, self.id, exc)
            outcome = Restored(restore_id, failure_summary(exc))
        finally:
            self._previous = previous
            with trio.CancelScope(shield=True), contextlib.suppress(ApiError):
                await self.ref.tell(outcome)

    _previous: str = "running"

    @handles(Restored)
    async def restored(self, message: Restored) -> None:
        self.transition(message)
        await store.finish_restore(self.db, message.restore_id, message.error)
        info = await self.servers.info(self.id)
        state = "running" if info.init_pid is not None else ("stopped" if self._previous == "stopped" else "suspended")
        if message.error is None:
            state = "running"
        await self.persist(state=state)
        if state == "running":
            await self.open_fast_path()
            self.node.proxy.mark_active(self.id)
        what = "failed" if message.error else "completed"
        await self.emit(f"restore.{what}", {"database_id": self.id, "restore_id": message.restore_id, "error": message.error})

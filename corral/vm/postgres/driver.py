"""`PostgresDriver`: database servers as a runtime of the instance base.

A database server is an instance like a sandbox: made from a template (a prepared
cluster, copied: `initdb` per create would take 0.75 s), started, stopped, cloned
(a branch), resized, destroyed, re-adopted after a control-plane restart. So it
implements `RuntimeDriver`, and the database actor is a kind of `InstanceActor`.
What a namespace instance has and a server has not (a guest agent, pause, file
snapshots) answers `InvalidInstanceState`; what a server has beyond (backups,
restores, replicas, passwords, statistics) is here as plain methods.

`InstanceSpec.env` carries the server's identity (`role`, `database`, and
`replica_of` for a replica); `boot_env` its password, in memory only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import logging
import os
import random
import re
import secrets
import signal
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import trio

from ..cgroups import CgroupLimits, CgroupV1
from ..disk import DiskStore
from ..driver import InstanceInfo, InstanceSpec, InstanceState, Limits, RuntimeDriver
from ..errors import InstanceNotFound, InvalidInstanceState, LaunchFailed
from . import admin, files, server_log
from .layout import (
    ADMIN_ROLE,
    ENGINE_VERSION,
    PG_BIN,
    REPLICATION_ROLE,
    SOCKET_PORT,
    Layout,
    ServerState,
)
from .ready import ReadyCopies

log = logging.getLogger("corral.vm.postgres")

UID_FIRST = 700_000
UID_COUNT = 1_000_000
TEMPLATE_NAME = f"postgresql-{ENGINE_VERSION}"
NOBODY = 65534
START_TIMEOUT = 60.0


class BackupFailed(Exception):
    """pg_basebackup or a restore's archive failed (the detail is in the message)."""


async def _unpack_data(archive: Path, data: Path, what: str) -> None:
    """A data directory's archive (a backup's, or `archive_data`'s) into the new, empty
    directory `data`; `BackupFailed` when it does not unpack or holds no cluster."""
    data.mkdir(mode=0o700)
    result = await trio.run_process(["tar", "-xzf", str(archive), "-C", str(data)], capture_stdout=True, capture_stderr=True, check=False)
    if result.returncode != 0 or not (data / "PG_VERSION").exists():
        raise BackupFailed(f"{what} cannot be unpacked: {result.stderr.decode(errors='replace').strip()[:300]}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PostgresDriver(RuntimeDriver):
    def __init__(self, root: Path, cgroup_parent: str | None = "corral-db", disk_reserve_bytes: int = 0) -> None:
        self.layout = Layout(root)
        self.cgroups = CgroupV1(parent=cgroup_parent) if cgroup_parent else None
        if self.cgroups is not None and not self.cgroups.available():
            self.cgroups = None
        self._disks: DiskStore | None = None
        self._disk_owner = cgroup_parent or "corral-db"
        self.disk_reserve_bytes = disk_reserve_bytes
        self._template_lock = trio.Lock()
        self._locks: dict[str, trio.Lock] = {}
        self.ready = ReadyCopies(self.layout, lambda: self.disks, self.prepare_template)
        self.replication_secret: bytes | None = None
        """Set on a store several nodes share (the same on every node): replicas on other
        nodes derive their primary's replication password from it, which every primary
        sets when it starts (issue 30). None: the node's own `.replication-secret`."""

    @property
    def disks(self) -> DiskStore:
        """Each server's cluster is on a disk of its own (made on first use: a node
        without databases makes nothing under the root)."""
        if self._disks is None:
            self._disks = DiskStore(
                self.layout.root / "disks", owner=self._disk_owner, reserve_bytes=self.disk_reserve_bytes, spares=0, layer_dirs=False
            )
        return self._disks

    # -- files ----------------------------------------------------------------------------

    def socket_dir(self, server_id: str) -> Path:
        return self.layout.run(server_id)

    def socket_path(self, server_id: str) -> Path:
        return self.layout.socket(server_id, self._state(server_id).port)

    def _sock(self, state: ServerState) -> tuple[Path, int]:
        return (self.layout.run(state.id), state.port)

    def port(self, server_id: str) -> int:
        """The server's own TCP port (the proxy's fast path leads there)."""
        return self._state(server_id).port

    def log_path(self, server_id: str) -> Path:
        return self.layout.log(server_id)

    def _state(self, server_id: str) -> ServerState:
        state = self.layout.load(server_id)
        if state is None:
            raise InstanceNotFound(server_id)
        return state

    def _lock(self, server_id: str) -> trio.Lock:
        return self._locks.setdefault(server_id, trio.Lock())

    def _note(self, server_id: str, text: str) -> None:
        """A line of the control plane's own in the server's log (restarts, restores)."""
        with contextlib.suppress(OSError), open(self.layout.log(server_id), "a") as handle:
            handle.write(server_log.note_line(text))

    def note(self, server_id: str, text: str) -> None:
        self._note(server_id, text)

    def trim_logs(self) -> int:
        """Every server's log on this node kept under `server_log.MAX_BYTES`; how many
        were cut."""
        return sum(1 for server_id in self.layout.server_ids() if server_log.trim(self.layout.log(server_id)))

    # -- the template -----------------------------------------------------------------------

    async def prepare_template(self) -> None:
        """The prepared cluster every new server copies (made once per data directory)."""
        async with self._template_lock:
            if (self.layout.template / "data" / "PG_VERSION").exists():
                return
            root = self.layout.root
            root.mkdir(parents=True, exist_ok=True)
            os.chmod(root, 0o711)
            work = root / f"template-{ENGINE_VERSION}.tmp"
            files.remove_tree(work)
            work.mkdir()
            os.chown(work, NOBODY, NOBODY)
            data, run = work / "data", work / "run"
            result = await files.run_as(
                NOBODY,
                [str(PG_BIN / "initdb"), "-D", str(data), "-U", ADMIN_ROLE, "-A", "trust", "--no-locale", "-E", "UTF8", "--no-sync"],
            )
            if result.returncode != 0:
                raise LaunchFailed(f"initdb failed: {result.stderr.decode().strip()}")
            run.mkdir()
            os.chown(run, NOBODY, NOBODY)
            files.write_config(data, run, "app_user", 512)
            (data / "pg_hba.conf").write_text("local all all trust\nlocal replication all trust\n")
            with trio.CancelScope(shield=True):  # started, it is stopped below whatever happens
                start = await files.run_as(
                    NOBODY, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(work / "log"), "-w", "-s", "start"]
                )
            if start.returncode != 0:
                raise LaunchFailed(f"the template server did not start: {start.stderr.decode().strip()}")
            try:
                await admin.template_roles((run, SOCKET_PORT))
            except BaseException:
                with trio.CancelScope(shield=True):  # a cancelled preparation leaves no server behind
                    await files.run_as(NOBODY, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-s", "stop"])
                    files.remove_tree(work)
                raise
            with trio.CancelScope(shield=True):
                await files.run_as(NOBODY, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-s", "stop"])
            files.remove_tree(self.layout.template)
            work.rename(self.layout.template)

    # -- processes ----------------------------------------------------------------------------

    def _cgroup(self, state: ServerState) -> list[str]:
        if self.cgroups is None:
            return []
        return self.cgroups.create(state.id, CgroupLimits(state.vcpus, state.memory_mb, state.pids_max))

    async def _pg_ctl_start(self, state: ServerState) -> None:
        """Start the server and wait until it accepts connections. The postmaster is
        spawned the way `pg_ctl start` does it (a session of its own, output appended to
        the log, not this process's child), but without `pg_ctl`'s own steps (a
        `postgres -V` to check the binary, a shell); and where `pg_ctl -w` polls every
        100 ms, the readiness line of `postmaster.pid` is polled here every 2 ms."""
        data = self.layout.data(state.id)
        cgroup = await trio.to_thread.run_sync(self._cgroup, state)
        with open(self.layout.log(state.id), "ab") as log_file:
            result = await files.spawn_as(state.uid, [str(PG_BIN / "postgres"), "-D", str(data)], log_file.fileno(), cgroup)
        if result.returncode != 0:
            raise LaunchFailed(f"the database server did not start: {self._log_tail(state.id)}".strip())
        began = trio.current_time()
        with trio.move_on_after(START_TIMEOUT):
            while True:
                if files.server_ready(data):
                    return
                await trio.sleep(0.002)
                if files.failed_to_start(data, trio.current_time() - began):
                    raise LaunchFailed(f"the database server did not start: {self._log_tail(state.id)}".strip())
        raise LaunchFailed(f"the database server did not become ready within {START_TIMEOUT:g} s")

    async def _end_fresh_start(self, state: ServerState) -> None:
        """A fresh copy's first start ran without fsync (`files.mark_fresh`): its settings
        go, the postmaster reloads (it does before it accepts another connection, so every
        backend from now on has fsync on: checked), and its disk is written out."""
        data = self.layout.data(state.id)
        if not files.end_fresh(data):
            return
        pid = files.postmaster_pid(data)
        if pid is not None:
            os.kill(pid, signal.SIGHUP)
            await admin.wait_setting(self._sock(state), "fsync", "on")
        files.sync_later(data)

    def _log_tail(self, server_id: str) -> str:
        try:
            lines = server_log.tail_bytes(self.layout.log(server_id), 1 << 16)[0].decode(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(line for line in lines[-3:] if "FATAL" in line or "ERROR" in line)

    async def _pg_ctl_stop(self, state: ServerState, mode: str = "fast") -> None:
        data = self.layout.data(state.id)
        if files.postmaster_pid(data) is None:
            return
        await files.run_as(state.uid, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", mode, "-w", "-t", "60", "-s", "stop"])
        if files.postmaster_pid(data) is not None and self.cgroups is not None:
            await trio.to_thread.run_sync(self.cgroups.kill_all, state.id)

    def _is_replica(self, server_id: str) -> bool:
        return (self.layout.data(server_id) / "standby.signal").exists()

    def _info(self, state: ServerState) -> InstanceInfo:
        pid = files.postmaster_pid(self.layout.data(state.id))
        return InstanceInfo(
            id=state.id,
            state=InstanceState.RUNNING if pid is not None else InstanceState.STOPPED,
            template=TEMPLATE_NAME,
            limits=Limits(state.vcpus, state.memory_mb, state.pids_max),
            hostname=state.id,
            address=None,
            agent_port=0,
            agent_token="",
            init_pid=pid,
            created_at=state.created_at,
        )

    # -- RuntimeDriver ------------------------------------------------------------------------

    def _new_state(self, spec: InstanceSpec) -> ServerState:
        used = self.layout.used_uids()
        while True:
            uid = UID_FIRST + random.randrange(UID_COUNT)
            if uid not in used:
                break
        return ServerState(
            id=spec.instance_id,
            uid=uid,
            vcpus=spec.limits.vcpus,
            memory_mb=spec.limits.memory_mb,
            pids_max=spec.limits.pids_max,
            role=spec.env["role"],
            database=spec.env["database"],
            created_at=_now(),
            replica_of=spec.env.get("replica_of"),
            port=int(spec.env.get("port", SOCKET_PORT)),
            listen=spec.env.get("listen", ""),
        )

    def _make_dirs(self, state: ServerState) -> None:
        server_dir = self.layout.server_dir(state.id)
        server_dir.mkdir(parents=True, exist_ok=True)
        self.layout.run(state.id).mkdir(exist_ok=True)
        self.layout.log(state.id).touch()

    def _finish_dirs(self, state: ServerState, primary_conninfo: str | None = None, slot: str | None = None) -> None:
        data = self.layout.data(state.id)
        if primary_conninfo is not None and slot is None:
            slot = files.replica_slot(state.id)
        files.write_config(
            data, self.layout.run(state.id), state.role, state.memory_mb, primary_conninfo, state.port, state.listen, slot
        )
        files.chown_tree(self.layout.server_dir(state.id), state.uid)
        image = self.layout.server_dir(state.id) / "disk.img"
        if image.exists():  # the disk's image is root's alone: its server must not grow it
            os.chown(image, 0, 0)
            os.chmod(image, 0o600)
        os.chmod(self.layout.server_dir(state.id), 0o711)
        os.chmod(self.layout.run(state.id), 0o711)
        os.chmod(data, 0o700)
        os.chmod(self.layout.log(state.id), 0o600)
        self.layout.save(state)

    async def _begin(self, spec: InstanceSpec, from_template: bool = False) -> tuple[ServerState, bool]:
        """The new server's state and directories, its disk mounted; with
        `from_template`, a ready copy of the template becomes them when there is one
        (returns whether its disk holds the template cluster already)."""
        if self.layout.load(spec.instance_id) is not None:
            raise InvalidInstanceState(f"database server {spec.instance_id} exists already")
        await self.prepare_template()
        state = self._new_state(spec)
        server_dir = self.layout.server_dir(state.id)
        copied = False
        try:
            if from_template:
                self.disks.check_reserve()
                copied = self.ready.take(spec.limits.disk_mb, server_dir)
            await trio.to_thread.run_sync(self._make_dirs, state)
            if copied:
                await self.disks.ensure(server_dir)
            else:
                await self.disks.create(server_dir, spec.limits.disk_mb)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.disks.remove(server_dir)
                await trio.to_thread.run_sync(files.remove_tree, server_dir)
            raise
        return state, copied

    async def keep_ready(self) -> None:
        """Keep copies of the template ready for creates (`ReadyCopies`), until cancelled."""
        await self.ready.run()

    async def create(self, spec: InstanceSpec) -> InstanceInfo:
        state, copied = await self._begin(spec, from_template=True)
        try:
            def copy() -> None:
                if not copied:
                    files.copy_tree(self.layout.template / "data", self.layout.data(state.id))
                self._finish_dirs(state)

            await trio.to_thread.run_sync(copy)
        except BaseException:
            await self.destroy(spec.instance_id)
            raise
        return await self.start(spec.instance_id, spec.boot_env)

    async def start(self, instance_id: str, boot_env: dict[str, str] | None = None) -> InstanceInfo:
        """Start the server (a running one is left as it is). `boot_env` holds the
        primary's `password`, and may hold `listen`: the TCP addresses it listens on
        from this start (the node's database host may have changed since it was made)."""
        state = self._state(instance_id)
        async with self._lock(instance_id):
            await self.disks.ensure(self.layout.server_dir(instance_id), verify=False)  # mounted again after a reboot
            if files.postmaster_pid(self.layout.data(instance_id)) is None:
                listen = (boot_env or {}).get("listen")
                if listen is not None and listen != state.listen:
                    state = await trio.to_thread.run_sync(self._listen_on, state, listen)
                if self.cgroups is not None:  # backends a crashed postmaster left would hold its shared memory
                    await trio.to_thread.run_sync(self.cgroups.kill_all, instance_id)
                files.clear_stale_lock(self.layout.data(instance_id), self.layout.run(instance_id))
                await self._pg_ctl_start(state)
            await self._end_fresh_start(state)
            if not self._is_replica(instance_id):
                password = (boot_env or {}).get("password")
                replication = self.replication_password(instance_id) if self.replication_secret is not None else None
                await admin.adopt(self._sock(state), state.role, state.database, password, replication)
                await self._drop_orphan_slots(state)
            return self._info(state)

    async def stop(self, instance_id: str) -> InstanceInfo:
        state = self._state(instance_id)
        async with self._lock(instance_id):
            await self._pg_ctl_stop(state)
            return self._info(state)

    async def kill(self, instance_id: str) -> None:
        """Stop the server at once, as a crash would (tests of supervision)."""
        state = self._state(instance_id)
        pid = files.postmaster_pid(self.layout.data(instance_id))
        if pid is not None:
            os.kill(pid, 9)
        del state

    async def destroy(self, instance_id: str) -> None:
        state = self.layout.load(instance_id)
        if state is not None:
            async with self._lock(instance_id):
                await self._pg_ctl_stop(state, "immediate")
            if state.replica_of is not None and state.primary_host:
                await self._drop_remote_slot(state)
            elif state.replica_of is not None:
                await self._drop_slot(state.replica_of, files.replica_slot(instance_id))
        if self.cgroups is not None:
            await trio.to_thread.run_sync(self.cgroups.remove, instance_id)
        await self.disks.remove(self.layout.server_dir(instance_id))
        await trio.to_thread.run_sync(files.remove_tree, self.layout.server_dir(instance_id))
        self.layout.state_file(instance_id).unlink(missing_ok=True)
        self._locks.pop(instance_id, None)

    async def _drop_slot(self, primary_id: str, slot: str) -> None:
        """Free the WAL a gone replica held on its primary. A primary that is not running
        now drops the slots of its gone replicas when it starts (`_drop_orphan_slots`)."""
        primary = self.layout.load(primary_id)
        if primary is None or files.postmaster_pid(self.layout.data(primary_id)) is None:
            return
        with contextlib.suppress(Exception):  # the slot was never made (a failed create), or is gone
            await admin.query(
                self._sock(primary),
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                (slot,),
            )

    async def _drop_remote_slot(self, replica: ServerState) -> None:
        """Free the WAL a gone replica held on a primary of another node, as the
        replication role over TCP (its walsender may take a moment to end after the
        replica's server stopped). A primary that cannot be reached keeps the slot: its
        WAL is bounded by `max_slot_wal_keep_size` (`files.conf`)."""
        assert replica.replica_of is not None
        password = self.replication_password(replica.replica_of)
        slot = files.replica_slot(replica.id, remote=True)
        for _ in range(20):
            try:
                await admin.drop_remote_slot(replica.primary_host, replica.primary_port, password, slot)
                return
            except admin.SlotActive:
                await trio.sleep(0.1)
            except Exception as exc:
                log.warning("replica %s: its slot on %s:%s was not dropped: %s", replica.id, replica.primary_host, replica.primary_port, exc)
                return

    async def _drop_orphan_slots(self, primary: ServerState) -> None:
        replicas = {
            files.replica_slot(server_id)
            for server_id in self.layout.server_ids()
            if (state := self.layout.load(server_id)) is not None and state.replica_of == primary.id
        }
        rows = await admin.query(
            self._sock(primary), "SELECT slot_name FROM pg_replication_slots WHERE starts_with(slot_name, 'replica_') AND NOT active"
        )
        for (slot,) in rows:
            if slot not in replicas:
                await self._drop_slot(primary.id, str(slot))

    async def _basebackup(self, source_id: str, argv: list[str]) -> None:
        source = self._state(source_id)
        result = await trio.run_process(
            [str(PG_BIN / "pg_basebackup"), "-h", str(self.layout.run(source_id)), "-p", str(source.port), "-U", ADMIN_ROLE,
             "-c", "fast", "--no-sync", *argv],
            env=files.ENV, capture_stdout=True, capture_stderr=True, check=False,
        )
        if result.returncode != 0:
            raise BackupFailed(f"pg_basebackup failed: {result.stderr.decode(errors='replace').strip()[:400]}")

    async def clone(self, source_id: str, spec: InstanceSpec) -> InstanceInfo:
        """A branch: the source's data at this moment (an online base backup of a running
        source, a copy of a stopped one), independent afterwards."""
        source = self._state(source_id)
        state, _ = await self._begin(spec)
        data = self.layout.data(state.id)
        try:
            if files.postmaster_pid(self.layout.data(source_id)) is not None:
                await self._basebackup(source.id, ["-D", str(data), "-X", "stream"])
            else:
                await trio.to_thread.run_sync(files.copy_tree, self.layout.data(source_id), data)
            await trio.to_thread.run_sync(self._finish_dirs, state)
            files.mark_fresh(data)
        except BaseException:
            await self.destroy(spec.instance_id)
            raise
        return await self.start(spec.instance_id, spec.boot_env)

    def replication_password(self, primary_id: str) -> str:
        if self.replication_secret is not None:
            return hmac.new(self.replication_secret, primary_id.encode(), hashlib.sha256).hexdigest()
        path = self.layout.secret_file
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32))
        return hmac.new(path.read_bytes(), primary_id.encode(), hashlib.sha256).hexdigest()

    async def create_replica(self, primary_id: str, spec: InstanceSpec) -> InstanceInfo:
        """A streaming, read-only replica of the running primary (hot standby): over the
        primary's socket when it is this node's, else over TCP at `primary_host` and
        `primary_port` of `spec.env` (a primary on another node, issue 30)."""
        remote_host = spec.env.get("primary_host")
        if remote_host:
            return await self._create_remote_replica(primary_id, remote_host, int(spec.env["primary_port"]), spec)
        primary = self._state(primary_id)
        if files.postmaster_pid(self.layout.data(primary_id)) is None:
            raise InvalidInstanceState("the primary is not running")
        password = self.replication_password(primary_id)
        await admin.set_replication_password(self._sock(primary), password)
        state, _ = await self._begin(spec)
        conninfo = (
            f"host={self.layout.run(primary.id)} port={primary.port} user={REPLICATION_ROLE} "
            f"password={password} application_name={files.replica_name(state.id)}"
        )
        slot = files.replica_slot(state.id)
        try:
            await self._basebackup(primary.id, ["-D", str(self.layout.data(state.id)), "-X", "stream", "-C", "-S", slot])
            await trio.to_thread.run_sync(self._finish_dirs, state, conninfo)
        except BaseException:
            await self.destroy(spec.instance_id)
            raise
        return await self.start(spec.instance_id)

    async def _create_remote_replica(self, primary_id: str, host: str, port: int, spec: InstanceSpec) -> InstanceInfo:
        """A replica of a primary another node runs, streaming from its server's TCP port
        as the replication role (SCRAM, with the password both nodes derive). Its slot on
        the primary is `remote_<id>` (`files.replica_slot`), which the primary's own
        clean-up of gone local replicas leaves alone; this node drops it when the replica
        goes (`destroy`)."""
        password = self.replication_password(primary_id)
        state, _ = await self._begin(spec)
        state = dataclasses.replace(state, primary_host=host, primary_port=port)
        conninfo = (
            f"host={host} port={port} user={REPLICATION_ROLE} password={password}"
            f" application_name={files.replica_name(state.id)} connect_timeout=10"
        )
        slot = files.replica_slot(state.id, remote=True)
        try:
            result = await trio.run_process(
                [str(PG_BIN / "pg_basebackup"), "-h", host, "-p", str(port), "-U", REPLICATION_ROLE, "-w",
                 "-c", "fast", "--no-sync", "-D", str(self.layout.data(state.id)), "-X", "stream", "-C", "-S", slot],
                env={**files.ENV, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"},
                capture_stdout=True, capture_stderr=True, check=False,
            )
            if result.returncode != 0:
                raise BackupFailed(
                    f"pg_basebackup from {host}:{port} failed: {result.stderr.decode(errors='replace').strip()[:400]}"
                )
            await trio.to_thread.run_sync(self._finish_dirs, state, conninfo, slot)
        except BaseException:
            await self.destroy(spec.instance_id)
            raise
        return await self.start(spec.instance_id)

    def waited_replicas(self, server_id: str) -> list[str]:
        """The replicas (their ids' `files.replica_name`) the server's commits wait for."""
        try:
            text = (self.layout.run(server_id) / files.STANDBYS_FILE).read_text()
        except FileNotFoundError:
            return []
        return sorted(re.findall(r'"([^"]+)"', text))

    async def wait_for_replicas(self, server_id: str, replica_ids: Sequence[str]) -> bool:
        """Make the server's commits wait until every one of the replicas has flushed them
        (synchronous replication; none: commits wait for no replica); the running server
        takes it at once (a reload). Returns whether anything changed."""
        names = sorted(files.replica_name(replica_id) for replica_id in replica_ids)
        if names == self.waited_replicas(server_id):
            return False
        state = self._state(server_id)
        run_dir, data = self.layout.run(server_id), self.layout.data(server_id)

        def write() -> None:
            temporary = run_dir / (files.STANDBYS_FILE + ".new")
            temporary.write_text(files.standbys_conf(names))
            temporary.replace(run_dir / files.STANDBYS_FILE)
            conf = data / "corral.conf"  # a server made before the include: it gains it now
            if files.STANDBYS_FILE not in conf.read_text():
                conninfo, slot = self._primary_conninfo(data), self._primary_slot(data)
                conf.write_text(files.conf(run_dir, state.memory_mb, conninfo, state.port, state.listen, slot))

        await trio.to_thread.run_sync(write)
        if files.postmaster_pid(data) is not None:
            await admin.query(self._sock(state), "SELECT pg_reload_conf()")
        return True

    async def promote_into(self, replica_id: str, spec: InstanceSpec) -> InstanceInfo:
        """The replica's server becomes the server of `spec` (its primary, whose node is
        lost: issue 30): stopped, its directory (its disk mounted in it: the mount moves
        with it) renamed to the primary's, its configuration the primary's (port, listen
        addresses, no `standby.signal`, no upstream), and started: it replays the WAL it
        received and comes up as a primary, on the primary's identity (its data has the
        primary's role and password already)."""
        source = self._state(replica_id)
        if self.layout.load(spec.instance_id) is not None:
            raise InvalidInstanceState(f"database server {spec.instance_id} exists already")
        async with self._lock(replica_id):
            await self._pg_ctl_stop(source)
            if self.cgroups is not None:
                await trio.to_thread.run_sync(self.cgroups.remove, replica_id)
            self.layout.server_dir(replica_id).rename(self.layout.server_dir(spec.instance_id))
            state = dataclasses.replace(
                source, id=spec.instance_id, role=spec.env["role"], database=spec.env["database"],
                port=int(spec.env.get("port", SOCKET_PORT)), listen=spec.env.get("listen", ""),
                replica_of=None, primary_host="", primary_port=0,
            )
            await trio.to_thread.run_sync(self._finish_dirs, state)
            self.layout.state_file(replica_id).unlink(missing_ok=True)
        self._locks.pop(replica_id, None)
        self._note(state.id, f"promoted: this server was replica {replica_id} of this database, whose node was lost")
        return await self.start(state.id, spec.boot_env)

    async def backup(self, instance_id: str, dest: Path) -> int:
        """A compressed tar of a consistent base backup of the running server (WAL
        included) at `dest`; returns its size."""
        state = self._state(instance_id)
        with open(dest, "wb") as out:
            result = await trio.run_process(
                [str(PG_BIN / "pg_basebackup"), "-h", str(self.layout.run(instance_id)), "-p", str(state.port),
                 "-U", ADMIN_ROLE, "-c", "fast", "-D", "-", "-F", "t", "-X", "fetch", "-z"],
                env=files.ENV, stdout=out, capture_stderr=True, check=False,
            )
        if result.returncode != 0:
            dest.unlink(missing_ok=True)
            raise BackupFailed(f"pg_basebackup failed: {result.stderr.decode(errors='replace').strip()[:400]}")
        return dest.stat().st_size

    async def restore_archive(self, instance_id: str, archive: Path, boot_env: dict[str, str] | None = None) -> InstanceInfo:
        """Replace the server's data with a backup archive's and start it; if the
        archive does not unpack or the server does not come up from it, the data it
        had is put back (and started again when it ran) before the error is raised."""
        state = self._state(instance_id)
        data = self.layout.data(instance_id)
        kept = data.with_name("data.before-restore")
        was_running = files.postmaster_pid(data) is not None
        async with self._lock(instance_id):
            await self._pg_ctl_stop(state)
            await trio.to_thread.run_sync(files.remove_tree, kept)
            data.rename(kept)
            try:
                await _unpack_data(archive, data, "the backup archive")
                await trio.to_thread.run_sync(self._finish_dirs, state)
                self._note(instance_id, "restoring from a backup")
                await self._pg_ctl_start(state)
                await admin.adopt(self._sock(state), state.role, state.database, (boot_env or {}).get("password"))
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self._pg_ctl_stop(state, "immediate")
                    await trio.to_thread.run_sync(files.remove_tree, data)
                    kept.rename(data)
                    self._note(instance_id, "the restore failed; the data from before it is back")
                    if was_running:
                        with contextlib.suppress(Exception):
                            await self._pg_ctl_start(state)
                raise
            await trio.to_thread.run_sync(files.remove_tree, kept)
            return self._info(state)

    async def archive_data(self, instance_id: str, dest: Path) -> None:
        """The stopped server's data directory as a compressed tar at `dest` (the layout a
        backup has: `create_from_archive` and `restore_archive` take it). The server must
        be stopped cleanly, so the files are consistent as they lie."""
        data = self.layout.data(instance_id)
        self._state(instance_id)
        if files.postmaster_pid(data) is not None:
            raise InvalidInstanceState(f"database server {instance_id} is running; stop it before packing its data")
        result = await trio.run_process(
            ["tar", "-czf", str(dest), "-C", str(data), "."], capture_stdout=True, capture_stderr=True, check=False
        )
        if result.returncode != 0:
            dest.unlink(missing_ok=True)
            raise BackupFailed(f"the data directory cannot be packed: {result.stderr.decode(errors='replace').strip()[:300]}")

    async def create_from_archive(self, spec: InstanceSpec, archive: Path) -> InstanceInfo:
        """A new server of `spec` whose data is an archive's (`archive_data`, a backup),
        left stopped: a database moved here from another node (issue 30). Its disk is
        written out before this returns, since the archive is then removed."""
        state, _ = await self._begin(spec)
        data = self.layout.data(state.id)
        try:
            await _unpack_data(archive, data, "the data archive")
            await trio.to_thread.run_sync(self._finish_dirs, state)
            await trio.to_thread.run_sync(files.sync_now, data)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.destroy(spec.instance_id)
            raise
        self._note(spec.instance_id, "made from a data archive (moved from another node)")
        return self._info(state)

    async def rotate_password(self, instance_id: str, role: str, password: str) -> None:
        await admin.rotate(self._sock(self._state(instance_id)), role, password)

    async def database_stats(self, instance_id: str, database: str) -> dict[str, int]:
        rows = await admin.query(
            self._sock(self._state(instance_id)),
            "SELECT COALESCE(SUM(numbackends),0), COALESCE(SUM(xact_commit + xact_rollback),0),"
            " (SELECT pg_database_size(%s)) FROM pg_stat_database WHERE datname = %s",
            (database, database),
        )
        connections, transactions, size = rows[0]
        return {"connections": int(connections), "transactions": int(transactions), "size_bytes": int(size or 0)}

    async def client_connections(self, instance_id: str) -> int:
        """Client sessions the server has now (over the socket or TCP), not counting this query's."""
        rows = await admin.query(
            self._sock(self._state(instance_id)),
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        return int(rows[0][0])

    async def streaming_replicas(self, instance_id: str) -> list[str]:
        """The `application_name`s (`files.replica_name`) of the replicas streaming from
        the running server now."""
        rows = await admin.query(self._sock(self._state(instance_id)), "SELECT application_name FROM pg_stat_replication")
        return sorted(str(row[0]) for row in rows)

    def upstream_host(self, instance_id: str) -> str:
        """The host a replica on another node than its primary's streams from ("" for
        one over its primary's socket, or a primary)."""
        return self._state(instance_id).primary_host

    async def replication_lag(self, instance_id: str) -> float | None:
        rows = await admin.query(self._sock(self._state(instance_id)), "SELECT EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())")
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    async def resize(self, instance_id: str, limits: Limits) -> InstanceInfo:
        """New limits; a running server's cgroups take them at once, its configuration at the next start."""
        state = self._state(instance_id)
        state = ServerState(**{**state.to_json(), "vcpus": limits.vcpus, "memory_mb": limits.memory_mb, "pids_max": limits.pids_max})
        self.layout.save(state)
        data = self.layout.data(instance_id)
        conninfo, slot = self._primary_conninfo(data), self._primary_slot(data)
        (data / "corral.conf").write_text(
            files.conf(self.layout.run(instance_id), state.memory_mb, conninfo, state.port, state.listen, slot)
        )
        if self.cgroups is not None and files.postmaster_pid(data) is not None:
            await trio.to_thread.run_sync(self._cgroup, state)
        return self._info(state)

    def _listen_on(self, state: ServerState, listen: str) -> ServerState:
        """The stopped server listens on `listen` from its next start."""
        state = dataclasses.replace(state, listen=listen)
        data = self.layout.data(state.id)
        conninfo, slot = self._primary_conninfo(data), self._primary_slot(data)
        (data / "corral.conf").write_text(files.conf(self.layout.run(state.id), state.memory_mb, conninfo, state.port, listen, slot))
        self.layout.save(state)
        return state

    @staticmethod
    def _corral_setting(data: Path, name: str) -> str | None:
        """A quoted setting of the server's `corral.conf` (`files.conf`), or None."""
        start = f"{name} = '"
        try:
            for line in (data / "corral.conf").read_text().splitlines():
                if line.startswith(start):
                    return line[len(start):-1].replace("''", "'")
        except OSError:
            pass
        return None

    @classmethod
    def _primary_conninfo(cls, data: Path) -> str | None:
        return cls._corral_setting(data, "primary_conninfo")

    @classmethod
    def _primary_slot(cls, data: Path) -> str | None:
        """A replica's slot on its primary (`replica_<id>`, or `remote_<id>` for one on another node)."""
        return cls._corral_setting(data, "primary_slot_name")

    async def info(self, instance_id: str) -> InstanceInfo:
        return self._info(self._state(instance_id))

    async def instances(self) -> list[InstanceInfo]:
        return [self._info(state) for server_id in self.layout.server_ids() if (state := self.layout.load(server_id))]

    async def adopt(self) -> list[InstanceInfo]:
        for server_id in self.layout.server_ids():
            await self.disks.settle(self.layout.server_dir(server_id))
        running = [info for info in await self.instances() if info.state is InstanceState.RUNNING]
        for info in running:  # a control plane that stopped between a fresh start and its end
            with contextlib.suppress(Exception):
                await self._end_fresh_start(self._state(info.id))
        return running

    async def metrics(self, instance_id: str) -> dict[str, int]:
        self._state(instance_id)
        if self.cgroups is None:
            return {}
        return await trio.to_thread.run_sync(self.cgroups.usage, instance_id)

    async def aclose(self) -> None:
        """Servers keep running (on their disks): the next start re-adopts them."""
        if self._disks is not None:
            await self._disks.aclose()

    # -- what a server has not -------------------------------------------------------------------

    async def pause(self, instance_id: str) -> InstanceInfo:
        raise InvalidInstanceState("a database server cannot be paused")

    async def archive(self, instance_id: str, dest: Path) -> Path:
        raise InvalidInstanceState("a database server is archived by a backup")

    async def snapshot(self, instance_id: str, snapshot_id: str) -> int:
        raise InvalidInstanceState("a database server is copied by a backup")

    async def restore(self, instance_id: str, snapshot_id: str) -> InstanceInfo:
        raise InvalidInstanceState("a database server is restored from a backup")

    async def create_from_snapshot(self, snapshot_id: str, spec: InstanceSpec) -> InstanceInfo:
        raise InvalidInstanceState("a database server is made from a backup by a restore")

    async def delete_snapshot(self, snapshot_id: str) -> None:
        return None

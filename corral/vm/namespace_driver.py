"""The Linux-namespace runtime driver.

On disk, per instance, under `<data_dir>/instances/<id>/`:

- `state.json`: everything needed to find the instance again after the control
  plane restarts (status, init pid and its start time, address, agent token,
  limits, template); written atomically, mode 0600 (it holds the token).
- `disk.img`, mounted on `disk/`: the instance's own file system, of the size of
  its disk (`disk.py`), holding `disk/upper/` and `disk/work/`, the overlayfs
  writable layer over the template's rootfs. Stop/start keeps it; destroy deletes
  it. `merged/` is only a mount point, and the overlay is mounted in the
  instance's private mount namespace. (An instance made before disks has
  `upper/` and `work/` here, without a limit.)
- `console.log`: the agent's and init's stderr.

Snapshots (copies of `upper/`) live beside the instances, under
`<data_dir>/snapshots/<snapshot id>/` (see `snapshots.py`). A restore copies the
snapshot onto a new disk (`disk.next/upper/`), which then replaces the old one
(`DiskStore.replacing`); `adopt()` finishes or undoes a swap a dead control plane
left half-done.

An instance is started by the zygote (see `agent/zygote.py` and `agent/launcher.py`)
and is not a child of the control plane: it keeps running when the control plane is
killed, and `adopt()` finds it again by its init pid and that pid's start time.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

from .cgroups import CgroupLimits, CgroupV1
from .disk import IMAGE as DISK_IMAGE
from .disk import DiskStore
from .driver import InstanceInfo, InstanceSpec, InstanceState, Limits, RuntimeDriver
from .egress import EgressTrust
from .errors import (
    InstanceExists,
    InstanceNotFound,
    InvalidInstanceState,
    LaunchFailed,
)
from .network import InstanceNetwork, NetworkAttachment
from .proc import process_start_time
from .seccomp_profile import instance_filter
from .snapshots import SnapshotStore, copy_tree
from .templates import UID_COUNT, TemplateStore
from .uid_ranges import UidRanges
from .zygote import Zygote

logger = logging.getLogger(__name__)

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
STOP_GRACE = 3.0


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class NamespaceDriver(RuntimeDriver):
    def __init__(
        self,
        data_dir: Path,
        templates: TemplateStore,
        network: InstanceNetwork,
        cgroups: CgroupV1 | None = None,
        python: str = sys.executable,
        launch_timeout: float = 15.0,
        egress: EgressTrust | None = None,
        uid_ranges: UidRanges | None = None,
        disk_mb: int | None = None,
        disk_reserve_bytes: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.instances_dir = self.data_dir / "instances"
        self.templates = templates
        self.network = network
        self.cgroups = cgroups or CgroupV1()
        self.uid_base = templates.uid_base
        self.agent_port = network.agent_port
        self.launch_timeout = launch_timeout
        self.launches = 0
        """Instances launched (created, started, restored) since this driver was made."""
        self.launch_failures: collections.Counter[str] = collections.Counter()
        """Launches that failed, by the stage they failed at (`disk`, `network`, `cgroups`,
        `zygote`, `not_ready`): plain counters the node's metrics read."""
        self.egress = egress
        """The node's egress proxy and CA, which every instance uses from boot (None: no proxy)."""
        self.zygote = Zygote(python, respawn_dir=self.data_dir / "zygote")
        """Its respawn directory is the data directory's: a later control plane's zygote
        restarts the agents of the instances it adopts (`agent/launcher.py`)."""
        self.uid_ranges = uid_ranges or UidRanges()
        self.seccomp_filter = instance_filter().hex()
        """The BPF program every instance process runs under (`seccomp_profile`)."""
        self.snapshots = SnapshotStore(self.data_dir / "snapshots")
        self.disks = DiskStore(
            self.data_dir / "disks", owner=self.cgroups.parent, size_mb=disk_mb, reserve_bytes=disk_reserve_bytes
        )
        """Every instance's writable layer is on a disk of its own (`disk.py`); `disk_mb`
        is the size spares are made of ahead (the sandboxes' default), and no new disk is
        made while the node has less than `disk_reserve_bytes` free."""
        self._locks: dict[str, trio.Lock] = {}

    # -- state files ----------------------------------------------------------

    def instance_dir(self, instance_id: str) -> Path:
        if not ID_PATTERN.fullmatch(instance_id):
            raise InstanceNotFound(f"invalid instance id: {instance_id!r}")
        return self.instances_dir / instance_id

    def _lock(self, instance_id: str) -> trio.Lock:
        return self._locks.setdefault(instance_id, trio.Lock())

    def layer_dir(self, instance_id: str) -> Path:
        """The directory holding the instance's `upper/` and `work/` (its disk's root)."""
        return self.disks.layer(self.instance_dir(instance_id))

    def _load(self, instance_id: str) -> dict[str, Any]:
        path = self.instance_dir(instance_id) / "state.json"
        try:
            return dict(json.loads(path.read_text()))
        except FileNotFoundError:
            raise InstanceNotFound(f"instance not found: {instance_id}") from None
        except ValueError as exc:
            raise InstanceNotFound(f"instance state unreadable: {instance_id}") from exc

    def _save(self, state: dict[str, Any]) -> None:
        directory = self.instance_dir(state["id"])
        tmp = directory / "state.json.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, directory / "state.json")

    def _alive(self, state: dict[str, Any]) -> bool:
        pid = state.get("init_pid")
        if not pid:
            return False
        return process_start_time(int(pid)) == state.get("init_start_time")

    def _info(self, state: dict[str, Any]) -> InstanceInfo:
        running = state.get("status") == "running" and self._alive(state)
        network = state.get("network") or {}
        if not running:
            instance_state = InstanceState.STOPPED
        elif self.cgroups.frozen(state["id"]):
            instance_state = InstanceState.PAUSED
        else:
            instance_state = InstanceState.RUNNING
        return InstanceInfo(
            id=state["id"],
            state=instance_state,
            template=state["template"],
            limits=Limits.from_json(state["limits"]),
            hostname=state["hostname"],
            address=network.get("address") if running else None,
            agent_port=self.agent_port,
            agent_token=state["token"],
            init_pid=state.get("init_pid") if running else None,
            created_at=state["created_at"],
        )

    # -- lifecycle ------------------------------------------------------------

    async def create(self, spec: InstanceSpec) -> InstanceInfo:
        directory = self.instance_dir(spec.instance_id)
        async with self._lock(spec.instance_id):
            if directory.exists():
                raise InstanceExists(f"instance already exists: {spec.instance_id}")
            lower = await self.templates.lower(spec.template)
            state = self._new_state(spec, lower)
            self._make_dirs(state)
            try:
                await self._make_layer(state)
                await self._boot(state, spec.boot_env)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self._remove(state)
                raise
            return self._info(state)

    async def clone(self, source_id: str, spec: InstanceSpec) -> InstanceInfo:
        source = self._load(source_id)
        upper = self.layer_dir(source_id) / "upper"
        return await self._create_with_files(spec, source["template"], Path(source["lower"]), upper, still=source)

    async def create_from_snapshot(self, snapshot_id: str, spec: InstanceSpec) -> InstanceInfo:
        async with self._snapshot_lock(snapshot_id):
            manifest = self.snapshots.manifest(snapshot_id)
            files = self.snapshots.files(snapshot_id)
            return await self._create_with_files(spec, manifest["template"], Path(manifest["lower"]), files)

    async def _create_with_files(
        self, spec: InstanceSpec, template: str, lower: Path, files: Path, still: dict[str, Any] | None = None
    ) -> InstanceInfo:
        """A new instance over `lower` whose writable layer starts as a copy of `files`
        (of the instance `still`, frozen while it is copied)."""
        directory = self.instance_dir(spec.instance_id)
        async with self._lock(spec.instance_id):
            if directory.exists():
                raise InstanceExists(f"instance already exists: {spec.instance_id}")
            state = self._new_state(spec, lower)
            state["template"] = template
            self._make_dirs(state)
            try:
                layer = await self._make_layer(state)
                async with self._still(still):
                    await copy_tree(files, layer / "upper")
                await self._boot(state, spec.boot_env)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self._remove(state)
                raise
            return self._info(state)

    async def start(self, instance_id: str, boot_env: dict[str, str] | None = None) -> InstanceInfo:
        async with self._lock(instance_id):
            state = self._load(instance_id)
            if state.get("status") == "running" and self._alive(state):
                if not await trio.to_thread.run_sync(self.cgroups.thaw, instance_id):
                    raise LaunchFailed(f"instance {instance_id} could not be thawed")
                return self._info(state)
            await self._halt(state)
            await self._boot(state, boot_env)
            return self._info(state)

    async def thaw(self, instance_id: str) -> InstanceInfo:
        async with self._lock(instance_id):
            state = self._load(instance_id)
            if not (state.get("status") == "running" and self._alive(state)):
                raise InvalidInstanceState("only a live instance can be thawed")
            if not await trio.to_thread.run_sync(self.cgroups.thaw, instance_id):
                raise LaunchFailed(f"instance {instance_id} could not be thawed")
            return self._info(state)

    async def pause(self, instance_id: str) -> InstanceInfo:
        async with self._lock(instance_id):
            state = self._load(instance_id)
            if not (state.get("status") == "running" and self._alive(state)):
                raise InvalidInstanceState("only a running instance can be paused")
            if not await trio.to_thread.run_sync(self.cgroups.freeze, instance_id):
                await trio.to_thread.run_sync(self.cgroups.thaw, instance_id)
                raise InvalidInstanceState(f"instance {instance_id} did not freeze in time")
            return self._info(state)

    async def stop(self, instance_id: str) -> InstanceInfo:
        async with self._lock(instance_id):
            state = self._load(instance_id)
            await self._halt(state)
            return self._info(state)

    async def destroy(self, instance_id: str) -> None:
        async with self._lock(instance_id):
            try:
                state = self._load(instance_id)
            except InstanceNotFound:
                if not self.instance_dir(instance_id).exists():
                    raise
                state = {"id": instance_id}
            state["status"] = "destroying"
            if self.instance_dir(instance_id).exists() and "token" in state:
                self._save(state)
            await self._remove(state)
        self._locks.pop(instance_id, None)

    async def resize(self, instance_id: str, limits: Limits) -> InstanceInfo:
        async with self._lock(instance_id):
            state = self._load(instance_id)
            if state.get("status") == "running" and self._alive(state):
                raise InvalidInstanceState("an instance can be resized only while stopped")
            await self.disks.resize(self.instance_dir(instance_id), limits.disk_mb)
            state["limits"] = asdict(limits)
            self._save(state)
            return self._info(state)

    async def archive(self, instance_id: str, dest: Path) -> Path:
        state = self._load(instance_id)
        upper = self.layer_dir(instance_id) / "upper"
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        async with self._still(state):
            result = await trio.run_process(
                ["tar", "--xattrs", "--xattrs-include=*", "--sparse", "-C", str(upper), "-czf", str(dest), "."],
                capture_stderr=True,
                check=False,
            )
        if result.returncode != 0:
            raise LaunchFailed(f"archive failed: {result.stderr.decode().strip()}")
        return dest

    # -- snapshots ------------------------------------------------------------

    def _snapshot_lock(self, snapshot_id: str) -> trio.Lock:
        return self._lock(f"snapshot:{snapshot_id}")

    async def snapshot(self, instance_id: str, snapshot_id: str) -> int:
        async with self._lock(instance_id), self._snapshot_lock(snapshot_id):
            state = self._load(instance_id)
            upper = self.layer_dir(instance_id) / "upper"
            self.disks.check_reserve(self.disks.used_bytes(self.instance_dir(instance_id)))  # the copy goes on the node's disk
            about = {"instance_id": instance_id, "template": state["template"], "lower": state["lower"]}
            async with self._still(state):
                return await self.snapshots.take(snapshot_id, upper, about)

    @contextlib.asynccontextmanager
    async def _still(self, state: dict[str, Any] | None) -> AsyncIterator[None]:
        """Nothing of the instance moves inside: a running instance is frozen (and thawed
        after), a stopped or paused one is left as it is. The host copies a tenant's
        writable layer only like this: a copy of a tree that changes under it could be
        led out of it by a directory swapped for a link mid-copy. None: no instance."""
        if state is None:
            yield
            return
        instance_id = state["id"]
        running = state.get("status") == "running" and self._alive(state)
        if not running or self.cgroups.frozen(instance_id):  # stopped, or paused: nothing moves
            yield
            return
        if not await trio.to_thread.run_sync(self.cgroups.freeze, instance_id):
            await trio.to_thread.run_sync(self.cgroups.thaw, instance_id)
            raise InvalidInstanceState(f"instance {instance_id} did not freeze in time")
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.cgroups.thaw, instance_id)

    async def restore(self, instance_id: str, snapshot_id: str) -> InstanceInfo:
        async with self._lock(instance_id), self._snapshot_lock(snapshot_id):
            state = self._load(instance_id)
            if state.get("status") == "running" and self._alive(state):
                raise InvalidInstanceState("an instance can be restored only while stopped")
            manifest = self.snapshots.manifest(snapshot_id)
            if manifest["lower"] != state["lower"]:
                raise InvalidInstanceState("the snapshot was taken over another template")
            directory = self.instance_dir(instance_id)
            # A new disk with the snapshot's files replaces the old one: no room is
            # needed on the old one, and a restore cut short leaves it as it was.
            async with self.disks.replacing(directory, Limits.from_json(state["limits"]).disk_mb) as layer:
                await self.snapshots.copy_files(snapshot_id, layer / "upper")
            for legacy in ("upper", "work"):  # the layer of an instance made before disks
                await trio.to_thread.run_sync(shutil.rmtree, directory / legacy, True)
            return self._info(state)

    def has_snapshot(self, snapshot_id: str) -> bool:
        return self.snapshots.exists(snapshot_id)

    async def export_snapshot(self, snapshot_id: str, dest: Path) -> None:
        async with self._snapshot_lock(snapshot_id):
            await self.snapshots.pack(snapshot_id, dest)

    async def import_snapshot(self, snapshot_id: str, archive: Path) -> None:
        """The snapshot's files go over this node's root file system of its template: the
        one it was taken over when this node has that path (nodes that share a template
        directory), else this node's current one of the same template."""
        async with self._snapshot_lock(snapshot_id):
            if self.snapshots.exists(snapshot_id):
                return
            self.disks.check_reserve(archive.stat().st_size)  # the files go on the node's disk
            read = await trio.run_process(["tar", "-xOf", str(archive), "manifest.json"], capture_stdout=True, capture_stderr=True, check=False)
            try:
                about = dict(json.loads(read.stdout)) if read.returncode == 0 else None
            except ValueError:
                about = None
            if about is None:
                raise LaunchFailed(f"the archive of snapshot {snapshot_id} has no readable manifest")
            lower = str(about.get("lower") or "")
            if not lower or not all(Path(part).is_dir() for part in lower.split(":")):
                lower = await self.templates.lower(str(about.get("template") or "default"))
            await self.snapshots.unpack(snapshot_id, archive, lower)

    async def delete_snapshot(self, snapshot_id: str) -> None:
        async with self._snapshot_lock(snapshot_id):
            await self.snapshots.delete(snapshot_id)
        self._locks.pop(f"snapshot:{snapshot_id}", None)

    @staticmethod
    def _settle_restore(directory: Path) -> None:
        """Settle a restore's swap cut short: the old layer comes back unless the new one is in place."""
        upper, staging, old = directory / "upper", directory / "upper.restoring", directory / "upper.old"
        if not upper.exists() and old.exists():
            os.replace(old, upper)
        for leftover in (staging, old):
            shutil.rmtree(leftover, ignore_errors=True)

    # -- template layers ------------------------------------------------------

    async def save_template_layer(self, instance_id: str, template: str, layer_id: str) -> int:
        async with self._lock(instance_id):
            state = self._load(instance_id)
            if state.get("status") == "running" and self._alive(state):
                raise InvalidInstanceState("a template layer is kept only from a stopped instance")
            upper = self.layer_dir(instance_id) / "upper"
            return await trio.to_thread.run_sync(self.templates.add_layer_sync, template, state["template"], layer_id, upper)

    async def remove_template(self, template: str) -> None:
        await trio.to_thread.run_sync(self.templates.remove_sync, template)

    def has_template_layer(self, template: str, layer_id: str) -> bool:
        return self.templates.has_layer(template, layer_id)

    def template_built(self, template: str) -> bool:
        return self.templates.is_built(template)

    async def export_template_layer(self, template: str, dest: Path) -> None:
        await self.templates.pack_layer(template, dest)

    async def import_template_layer(self, template: str, archive: Path) -> None:
        self.disks.check_reserve(archive.stat().st_size)  # the files go on the node's disk
        await self.templates.unpack_layer(template, archive)

    # -- queries --------------------------------------------------------------

    async def info(self, instance_id: str) -> InstanceInfo:
        return self._info(self._load(instance_id))

    async def instances(self) -> list[InstanceInfo]:
        infos = []
        for directory in sorted(self.instances_dir.glob("*")) if self.instances_dir.exists() else []:
            try:
                infos.append(self._info(self._load(directory.name)))
            except (InstanceNotFound, KeyError):
                continue
        return infos

    async def metrics(self, instance_id: str) -> dict[str, int]:
        """The cgroups' figures, and the disk: what its image holds on the node's file
        system (`disk_bytes`) of its size (`disk_limit_bytes`); 0 for an instance without one."""
        self._load(instance_id)
        usage = self.cgroups.usage(instance_id)
        try:
            image = os.stat(self.instance_dir(instance_id) / DISK_IMAGE)
            usage["disk_bytes"], usage["disk_limit_bytes"] = image.st_blocks * 512, image.st_size
        except OSError:
            usage["disk_bytes"] = usage["disk_limit_bytes"] = 0
        return usage

    async def adopt(self) -> list[InstanceInfo]:
        """Take over what a previous control plane left: running instances stay running.

        Instances caught half-created (or half-destroyed) are removed; instances whose
        init died are marked stopped; network pieces and cgroups that belong to no
        instance are removed.
        """
        adopted: list[InstanceInfo] = []
        keep: set[str] = set()
        directories = sorted(self.instances_dir.glob("*")) if self.instances_dir.exists() else []
        for directory in directories:
            if not ID_PATTERN.fullmatch(directory.name):
                continue
            try:
                state = self._load(directory.name)
                state["id"], state["token"], state["template"]
            except (InstanceNotFound, KeyError):
                await self._remove({"id": directory.name})
                continue
            if state.get("status") in ("creating", "destroying"):
                await self._remove(state)
                continue
            await trio.to_thread.run_sync(self._settle_restore, directory)
            await self.disks.settle(directory)
            if state.get("status") == "running" and not self._alive(state):
                await self._halt(state)
            keep.add(state["id"])
            adopted.append(self._info(state))
        await self.network.cleanup_stale(keep)
        await self.snapshots.cleanup_partial()
        for stale in self.cgroups.instance_ids() - keep:
            await trio.to_thread.run_sync(self.cgroups.kill_all, stale)
            await trio.to_thread.run_sync(self.cgroups.remove, stale)
        self.disks.warm()
        if any(info.state is InstanceState.RUNNING for info in adopted):
            # Their native PID 1 asks this zygote for a new agent when theirs dies.
            with contextlib.suppress(LaunchFailed):
                await self.zygote.warm()
        return adopted

    def host_root(self, info: InstanceInfo) -> Path | None:
        """`/proc/<init>/root`: the instance's merged overlay root, seen from the host
        through its PID 1 (the overlay is mounted in the instance's own mount namespace)."""
        if info.state is not InstanceState.RUNNING or not info.init_pid:
            return None
        return Path(f"/proc/{info.init_pid}/root")

    async def aclose(self) -> None:
        await self.zygote.aclose()
        await self.disks.aclose()

    # -- internals ------------------------------------------------------------

    def _new_state(self, spec: InstanceSpec, lower: Path | str) -> dict[str, Any]:
        return {
            "id": spec.instance_id,
            "status": "creating",
            "template": spec.template,
            "lower": str(lower),
            "limits": asdict(spec.limits),
            "env": dict(spec.env),
            "hostname": spec.hostname or f"sbx-{spec.instance_id[:8]}",
            "token": secrets.token_urlsafe(32),
            "created_at": now_iso(),
            "network": None,
            "init_pid": None,
            "init_start_time": None,
        }

    def _make_dirs(self, state: dict[str, Any]) -> None:
        directory = self.instance_dir(state["id"])
        directory.mkdir(parents=True, mode=0o700)
        (directory / "merged").mkdir()
        self._save(state)

    async def _make_layer(self, state: dict[str, Any]) -> Path:
        """The instance's disk, of the size in its limits, with an empty writable layer."""
        layer = await self.disks.create(self.instance_dir(state["id"]), Limits.from_json(state["limits"]).disk_mb)
        os.chown(layer / "upper", self.uid_base, self.uid_base)
        (layer / "upper").chmod(0o755)
        return layer

    def _launch_request(
        self, state: dict[str, Any], attachment: NetworkAttachment, procs: list[str], boot_env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        directory = self.instance_dir(state["id"])
        hostname = state["hostname"]
        dns = attachment.dns_servers or (attachment.gateway,)
        egress_env = self.egress.env(attachment.gateway) if self.egress is not None else {}
        return {
            "op": "launch",
            "timeout": self.launch_timeout,
            "instance_id": state["id"],
            "lower": state["lower"],
            "upper": str(self.layer_dir(state["id"]) / "upper"),
            "work": str(self.layer_dir(state["id"]) / "work"),
            "merged": str(directory / "merged"),
            "log_path": str(directory / "console.log"),
            "netns": None,  # handed over once made (`_boot`)
            "cgroup_procs": procs,
            "hostname": hostname,
            "uid_base": self.uid_base,
            "host_uid_base": state["host_uid_base"],
            "uid_count": UID_COUNT,
            "address": attachment.address,
            "agent_port": self.agent_port,
            "token": state["token"],
            "env": {**egress_env, **(state.get("env") or {}), **(boot_env or {})},  # boot_env stays off the disk
            "resolv_conf": "".join(f"nameserver {s}\n" for s in dns),
            "hosts": f"127.0.0.1\tlocalhost\n{attachment.address}\t{hostname}\n",
            "seccomp": self.seccomp_filter,
            **(self.egress.launch_fields() if self.egress is not None else {}),
        }

    async def _boot(self, state: dict[str, Any], boot_env: dict[str, str] | None = None) -> None:
        """Cgroups (with the limits in the state, so a resize applies here), launch, and
        the network, made while the launch starts (it waits for the namespace only once
        it has joined its cgroups, the slowest step of its own)."""
        stage = ["disk"]  # where a failure happened, for `launch_failures`
        try:
            await self._launch(state, boot_env, stage)
        except Exception:
            self.launch_failures[stage[0]] += 1
            raise
        self.launches += 1

    async def _launch(self, state: dict[str, Any], boot_env: dict[str, str] | None, stage: list[str]) -> None:
        instance_id = state["id"]
        await self.disks.ensure(self.instance_dir(instance_id), verify=False)  # mounted again after a reboot
        stage[0] = "network"
        attachment = await self.network.plan(instance_id)
        state["network"] = attachment.to_json()

        async def join_network() -> int:
            await self.network.attach(instance_id)
            return os.open(attachment.netns_path, os.O_RDONLY | os.O_CLOEXEC)

        limits = Limits.from_json(state["limits"])
        stage[0] = "cgroups"
        try:
            procs = self.cgroups.create(instance_id, CgroupLimits(limits.vcpus, limits.memory_mb, limits.pids_max))
        except OSError as exc:
            raise LaunchFailed(f"instance {instance_id} did not start: cannot set up its cgroups: {exc}") from exc
        self._release_uids(state)
        state["host_uid_base"] = self.uid_ranges.claim(instance_id)
        stage[0] = "zygote"
        try:
            reply = await self.zygote.request(self._launch_request(state, attachment, procs, boot_env), join_network)
        except BaseException:
            # Cancelled, or the zygote failed: the launch may still be on its way in.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.cgroups.remove, instance_id)
                self._release_uids(state)
            raise
        stage[0] = "not_ready"
        if "error" in reply or not reply.get("ready") or not reply.get("init_pid"):
            # A launch that timed out may still be on its way in: its groups go, so it
            # has nothing to join, and whatever joined already is killed.
            await trio.to_thread.run_sync(self.cgroups.remove, instance_id)
            self._release_uids(state)
            log = self.instance_dir(instance_id) / "console.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise LaunchFailed(f"instance {instance_id} did not start: {reply.get('error')}\n{reply.get('traceback', '')}{tail}")
        stages = reply.get("stages") or {}
        if stages.get("ready", 0) > self.launch_timeout / 3:
            logger.warning("instance %s took %.1f s to start (stages: %s)", instance_id, stages["ready"], stages)
        state["init_pid"] = int(reply["init_pid"])
        state["init_start_time"] = process_start_time(state["init_pid"])
        self.uid_ranges.running(state["host_uid_base"], instance_id, state["init_pid"], state["init_start_time"])
        state["status"] = "running"
        state["started_at"] = now_iso()
        self._save(state)

    async def _halt(self, state: dict[str, Any]) -> None:
        """Stop every process of the instance; keep files, network and address."""
        instance_id = state["id"]
        if self._alive(state):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(state["init_pid"]), signal.SIGTERM)
            deadline = trio.current_time() + STOP_GRACE + 1
            while self._alive(state) and trio.current_time() < deadline:
                await trio.sleep(0.01)
        await trio.to_thread.run_sync(self.cgroups.kill_all, instance_id)
        await trio.to_thread.run_sync(self.cgroups.remove, instance_id)
        self._release_uids(state)
        if "token" in state:
            state["status"] = "stopped"
            state["init_pid"] = None
            state["init_start_time"] = None
            self._save(state)

    def _release_uids(self, state: dict[str, Any]) -> None:
        """The instance's host uid range goes back (it runs no more)."""
        base = state.pop("host_uid_base", None)
        if base is not None:
            self.uid_ranges.release(int(base), state["id"])

    async def _remove(self, state: dict[str, Any]) -> None:
        """Everything goes: processes, cgroups, network, files."""
        instance_id = state["id"]
        if state.get("init_pid") and self._alive(state):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(state["init_pid"]), signal.SIGKILL)
        await trio.to_thread.run_sync(self.cgroups.kill_all, instance_id)
        await trio.to_thread.run_sync(self.cgroups.remove, instance_id)
        self._release_uids(state)
        await self.network.detach(instance_id)
        directory = self.instance_dir(instance_id)
        if directory.exists():
            await self.disks.remove(directory)
            await trio.to_thread.run_sync(shutil.rmtree, directory)

"""Snapshots of instances' files: the copy (frozen while running), restore, create from one, delete."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from corral.actors.runtime_errors import answer_for
from corral.vm import (
    AgentClient,
    InstanceInfo,
    InstanceState,
    InvalidInstanceState,
    LaunchFailed,
    NamespaceDriver,
    SnapshotNotFound,
    SnapshotStore,
)

from .conftest import new_spec

DATA = bytes(range(256)) * 400


async def test_snapshot_restore_round_trip(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    async with AgentClient.for_instance(instance) as agent:
        await agent.write_file("/workspace/keep.bin", DATA)
        await agent.exec("rm /etc/motd && mkdir -p /opt/tree && echo leaf > /opt/tree/leaf")  # a whiteout, a new tree
    frozen_during_copy: list[bool] = []
    take = driver.snapshots.take

    async def watched_take(snapshot_id: str, upper: Path, about: dict[str, Any]) -> int:
        frozen_during_copy.append(driver.cgroups.frozen(instance.id))
        return await take(snapshot_id, upper, about)

    driver.snapshots.take = watched_take  # type: ignore[method-assign]
    size = await driver.snapshot(instance.id, "snap-1")
    assert frozen_during_copy == [True]  # consistent: nothing ran during the copy
    assert not driver.cgroups.frozen(instance.id)
    assert (await driver.info(instance.id)).state is InstanceState.RUNNING
    assert size >= len(DATA)
    manifest = json.loads((driver.data_dir / "snapshots" / "snap-1" / "manifest.json").read_text())
    assert manifest["instance_id"] == instance.id and manifest["size_bytes"] == size
    assert manifest["template"] == "default"

    async with AgentClient.for_instance(instance) as agent:
        await agent.exec("rm /workspace/keep.bin && echo back > /etc/motd && rm -r /opt/tree && touch /workspace/later")
    with pytest.raises(InvalidInstanceState):
        await driver.restore(instance.id, "snap-1")  # running
    await driver.stop(instance.id)
    await driver.restore(instance.id, "snap-1")
    work = driver.layer_dir(instance.id) / "work"
    assert work.is_dir() and not any(work.iterdir())
    started = await driver.start(instance.id)
    async with AgentClient.for_instance(started) as agent:
        assert (await agent.read_file("/workspace/keep.bin")).data == DATA
        assert (await agent.exec("test -e /etc/motd")).exit_code == 1
        assert (await agent.exec("cat /opt/tree/leaf")).stdout == "leaf\n"
        assert (await agent.exec("test -e /workspace/later")).exit_code == 1
    upper = driver.layer_dir(instance.id) / "upper"
    assert upper.stat().st_uid == driver.uid_base
    assert sorted(os.listdir(driver.instance_dir(instance.id))) == ["console.log", "disk", "disk.img", "merged", "state.json"]


async def test_snapshot_of_a_paused_and_a_stopped_instance(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    async with AgentClient.for_instance(instance) as agent:
        await agent.write_file("/workspace/a.txt", b"paused")
    await driver.pause(instance.id)
    await driver.snapshot(instance.id, "snap-paused")
    assert (await driver.info(instance.id)).state is InstanceState.PAUSED  # not thawed by the copy
    await driver.stop(instance.id)
    (driver.layer_dir(instance.id) / "upper" / "workspace" / "a.txt").write_text("stopped")
    await driver.snapshot(instance.id, "snap-stopped")
    assert (await driver.info(instance.id)).state is InstanceState.STOPPED
    files = driver.data_dir / "snapshots"
    assert (files / "snap-paused" / "files" / "workspace" / "a.txt").read_text() == "paused"
    assert (files / "snap-stopped" / "files" / "workspace" / "a.txt").read_text() == "stopped"


async def test_create_from_snapshot_then_delete_it(driver: NamespaceDriver, instance: InstanceInfo) -> None:
    async with AgentClient.for_instance(instance) as agent:
        await agent.write_file("/workspace/from-snapshot.txt", b"copied")
    await driver.snapshot(instance.id, "snap-new")
    copy = await driver.create_from_snapshot("snap-new", new_spec())
    async with AgentClient.for_instance(copy) as agent:
        assert (await agent.read_file("/workspace/from-snapshot.txt")).data == b"copied"
        await agent.write_file("/workspace/from-snapshot.txt", b"changed in the copy")
    assert (driver.data_dir / "snapshots" / "snap-new" / "files" / "workspace" / "from-snapshot.txt").read_bytes() == b"copied"

    await driver.delete_snapshot("snap-new")
    assert not (driver.data_dir / "snapshots" / "snap-new").exists()
    await driver.delete_snapshot("snap-new")  # nothing left to remove: no error
    with pytest.raises(SnapshotNotFound) as caught:
        await driver.create_from_snapshot("snap-new", new_spec())
    assert answer_for(caught.value) == (404, "SNAPSHOT_NOT_FOUND")
    await driver.stop(instance.id)
    with pytest.raises(SnapshotNotFound):
        await driver.restore(instance.id, "snap-new")
    with pytest.raises(SnapshotNotFound):
        await driver.restore(instance.id, "../escape")


async def test_the_store_keeps_only_whole_snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path / "snapshots")
    layer = tmp_path / "upper"
    (layer / "dir").mkdir(parents=True)
    (layer / "dir" / "file").write_bytes(b"12345")
    (layer / "link").symlink_to("dir/file")
    os.mkfifo(layer / "fifo")
    size = await store.take("one", layer, {"instance_id": "i", "template": "t", "lower": "/l"})
    assert size == 5 + len("dir/file")
    assert store.ids() == ["one"] and store.manifest("one")["size_bytes"] == size
    assert os.readlink(store.files("one") / "link") == "dir/file"
    with pytest.raises(LaunchFailed, match="exists already"):
        await store.take("one", layer, {})

    (store.root / "two.partial").mkdir()  # a copy cut short by a restart
    assert store.ids() == ["one"]
    assert await store.cleanup_partial() == 1 and not (store.root / "two.partial").exists()
    with pytest.raises(SnapshotNotFound):
        store.manifest("two")

    async def failing_copy(source: Path, dest: Path) -> None:
        dest.mkdir(parents=True)
        raise trio.TooSlowError

    monkeypatch.setattr("corral.vm.snapshots.copy_tree", failing_copy)
    with pytest.raises(trio.TooSlowError):
        await store.take("three", layer, {})
    assert not (store.root / "three.partial").exists() and not store.exists("three")
    await store.delete("one")
    assert store.ids() == []


def test_a_restore_cut_short_is_settled(tmp_path: Path) -> None:
    half = tmp_path / "half"  # upper moved away, the copy not yet in place
    (half / "upper.old").mkdir(parents=True)
    (half / "upper.old" / "mine").write_text("old")
    (half / "upper.restoring").mkdir()
    NamespaceDriver._settle_restore(half)
    assert (half / "upper" / "mine").read_text() == "old" and sorted(os.listdir(half)) == ["upper"]
    done = tmp_path / "done"  # swapped, the old layer not yet removed
    (done / "upper").mkdir(parents=True)
    (done / "upper.old").mkdir()
    NamespaceDriver._settle_restore(done)
    assert sorted(os.listdir(done)) == ["upper"]


def _tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything `cp -a` keeps, per path: type and mode, owners, device, size, xattrs."""
    seen: dict[str, tuple[object, ...]] = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            xattrs = {key: os.getxattr(path, key, follow_symlinks=False) for key in os.listxattr(path, follow_symlinks=False)}
            size = info.st_size if not os.path.isdir(path) or os.path.islink(path) else 0
            seen[os.path.relpath(path, root)] = (info.st_mode, info.st_uid, info.st_gid, info.st_rdev, size, sorted(xattrs.items()))
    return seen


async def test_a_snapshot_exported_to_an_archive_comes_back_whole_on_a_node_that_lacks_it(
    driver: NamespaceDriver, instance: InstanceInfo, tmp_path: Path
) -> None:
    """What another node does with a snapshot it lacks (issue 30): the archive carries
    the files with their owners, whiteouts and overlay attributes, and the files go over
    this node's root file system of the template when the one named is not here."""
    async with AgentClient.for_instance(instance) as agent:
        await agent.write_file("/workspace/keep.bin", DATA)
        ran = await agent.exec("rm /etc/motd && mkdir -p /opt/tree && echo leaf > /opt/tree/leaf"
                               " && touch /workspace/owned && chown 1000:1000 /workspace/owned && rm -r /usr/share/doc")
        assert ran.exit_code == 0, ran
    await driver.snapshot(instance.id, "snap-away")
    files = driver.snapshots.files("snap-away")
    before = _tree(files)
    assert any(stat_info[3] == 0 and (stat_info[0] & 0o170000) == 0o020000 for stat_info in before.values())  # a whiteout
    manifest_path = driver.snapshots.path("snap-away") / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    lower_here = manifest["lower"]
    manifest_path.write_text(json.dumps({**manifest, "lower": "/another/node/templates/default/rootfs"}))
    archive = tmp_path / "snap-away.tar"
    await driver.export_snapshot("snap-away", archive)
    await driver.delete_snapshot("snap-away")
    assert not driver.has_snapshot("snap-away")

    await driver.import_snapshot("snap-away", archive)
    assert driver.has_snapshot("snap-away")
    assert _tree(files) == before
    assert driver.snapshots.manifest("snap-away")["lower"] == lower_here
    await driver.import_snapshot("snap-away", archive)  # here already: nothing happens
    copy = await driver.create_from_snapshot("snap-away", new_spec())
    async with AgentClient.for_instance(copy) as agent:
        assert (await agent.read_file("/workspace/keep.bin")).data == DATA
        assert (await agent.exec("test -e /etc/motd || test -e /usr/share/doc")).exit_code == 1
        assert (await agent.exec("cat /opt/tree/leaf; stat -c %u:%g /workspace/owned")).stdout == "leaf\n1000:1000\n"

    junk = tmp_path / "junk.tar"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(LaunchFailed):
        await driver.import_snapshot("snap-junk", junk)
    assert not driver.has_snapshot("snap-junk")
    assert not [p.name for p in driver.snapshots.root.iterdir() if p.name.startswith("snap-junk")]
    with pytest.raises(SnapshotNotFound):
        await driver.export_snapshot("snap-missing", tmp_path / "none.tar")


async def test_a_sparse_file_travels_sparse(driver: NamespaceDriver, instance: InstanceInfo, tmp_path: Path) -> None:
    """A tenant's 64 GiB sparse file (no disk of its own) is kilobytes in the archive
    another node fetches, and sparse again where it is unpacked: not 64 GiB of zeros
    read, written to the node's disk and sent."""
    size = 64 << 30
    async with AgentClient.for_instance(instance) as agent:
        ran = await agent.exec(f"truncate -s {size} /workspace/sparse && echo tail >> /workspace/sparse")
        assert ran.exit_code == 0, ran
    await driver.snapshot(instance.id, "snap-sparse")
    archive = tmp_path / "snap-sparse.tar"
    await driver.export_snapshot("snap-sparse", archive)
    assert archive.stat().st_size < 1 << 20
    await driver.delete_snapshot("snap-sparse")
    await driver.import_snapshot("snap-sparse", archive)
    unpacked = os.stat(driver.snapshots.files("snap-sparse") / "workspace" / "sparse")
    assert unpacked.st_size == size + 5 and unpacked.st_blocks * 512 < 1 << 20
    copy = await driver.create_from_snapshot("snap-sparse", new_spec())
    async with AgentClient.for_instance(copy) as agent:
        assert (await agent.exec("tail -c 5 /workspace/sparse")).stdout == "tail\n"

"""The database servers' runtime (`corral.vm.postgres.PostgresDriver`) with real servers:
own uid and modes, identity adoption, SCRAM verifiers, the restore's rollback."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
import trio

from corral.vm import InstanceSpec, InstanceState, Limits, release_mounts
from corral.vm.postgres import BackupFailed, PostgresDriver
from tests.support import TEST_SLOT


@pytest.fixture
async def servers() -> AsyncIterator[PostgresDriver]:
    if os.geteuid() != 0:
        pytest.skip("database servers need root (they run as users of their own)")
    root = Path(f"/var/lib/corral/test-servers-{TEST_SLOT}")
    release_mounts(f"corral-test-db{TEST_SLOT}")  # servers' disks a crashed run left mounted
    shutil.rmtree(root, ignore_errors=True)
    driver = PostgresDriver(root, f"corral-test-db{TEST_SLOT}")
    try:
        yield driver
    finally:
        for info in await driver.instances():
            await driver.destroy(info.id)
        shutil.rmtree(root, ignore_errors=True)


def spec(server_id: str, role: str, database: str, password: str | None = "pw") -> InstanceSpec:
    return InstanceSpec(
        instance_id=server_id, limits=Limits(1, 512, 256), env={"role": role, "database": database},
        boot_env={"password": password} if password else {},
    )


def connect(driver: PostgresDriver, server_id: str, user: str, password: str, dbname: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(host=str(driver.socket_dir(server_id)), port=driver.port(server_id), user=user, password=password,
                           dbname=dbname, autocommit=True)


async def test_each_server_is_its_own_user_with_private_files(servers: PostgresDriver) -> None:
    a = await servers.create(spec("a", "alice", "shop"))
    b = await servers.create(spec("b", "bob", "blog"))
    assert a.state is InstanceState.RUNNING and b.state is InstanceState.RUNNING
    uid_a, uid_b = servers.layout.load("a").uid, servers.layout.load("b").uid  # type: ignore[union-attr]
    assert uid_a != uid_b and uid_a >= 700_000
    data = servers.layout.data("a")
    assert data.stat().st_uid == uid_a and stat.S_IMODE(data.stat().st_mode) == 0o700
    with connect(servers, "a", "alice", "pw", "shop") as conn:
        assert conn.execute("SELECT current_user, current_database()").fetchone() == ("alice", "shop")
        verifier = conn.execute("SELECT 1").fetchone()
        assert verifier == (1,)
    with pytest.raises(psycopg.OperationalError):
        await trio.to_thread.run_sync(lambda: connect(servers, "a", "bob", "pw", "shop"))
    log = servers.log_path("a").read_text()
    assert "pw" not in log.replace("pw_", "")


async def test_a_broken_archive_puts_the_old_data_back(servers: PostgresDriver, tmp_path: Path) -> None:
    await servers.create(spec("c", "carol", "main"))
    with connect(servers, "c", "carol", "pw", "main") as conn:
        conn.execute("CREATE TABLE t (v int)")
        conn.execute("INSERT INTO t VALUES (5)")
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(b"not an archive")
    with pytest.raises(BackupFailed):
        await servers.restore_archive("c", archive, {"password": "pw"})
    info = await servers.info("c")
    assert info.state is InstanceState.RUNNING
    with connect(servers, "c", "carol", "pw", "main") as conn:
        assert conn.execute("SELECT v FROM t").fetchall() == [(5,)]
    assert "the data from before it is back" in servers.log_path("c").read_text()


async def test_backup_restored_into_another_server_takes_its_identity(servers: PostgresDriver, tmp_path: Path) -> None:
    await servers.create(spec("d", "dave", "src"))
    with connect(servers, "d", "dave", "pw", "src") as conn:
        conn.execute("CREATE TABLE t AS SELECT 1 AS v")
    archive = tmp_path / "b.tar.gz"
    assert await servers.backup("d", archive) > 0
    await servers.create(spec("e", "erin", "dst", "pw2"))
    await servers.restore_archive("e", archive, {"password": "pw2"})
    with connect(servers, "e", "erin", "pw2", "dst") as conn:
        assert conn.execute("SELECT v FROM t").fetchall() == [(1,)]
    await servers.stop("e")
    assert (await servers.info("e")).state is InstanceState.STOPPED
    await servers.destroy("e")
    assert not servers.layout.server_dir("e").exists()


async def test_creates_take_ready_copies_of_the_template(servers: PostgresDriver) -> None:
    """Once a create asked for a disk size, copies of the template wait on disks of that
    size (unmounted); the next create renames one to its server and works like any."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(servers.keep_ready)
        await servers.create(spec("first", "ann", "one"))
        size = spec("x", "x", "x").limits.disk_mb
        with trio.fail_after(30):
            while len(servers.ready.ready(size)) < 2:
                await trio.sleep(0.05)
        copies = servers.ready.ready(size)
        assert not any(os.path.ismount(copy / "disk") for copy in copies)
        await servers.create(spec("second", "ben", "two"))
        assert sum(1 for copy in copies if copy.exists()) == 1  # one was taken
        data = servers.layout.data("second")
        assert os.path.ismount(data.parent) and data.stat().st_uid == servers.layout.load("second").uid  # type: ignore[union-attr]
        with connect(servers, "second", "ben", "pw", "two") as conn:
            assert conn.execute("SELECT current_user, current_database()").fetchone() == ("ben", "two")
            conn.execute("CREATE TABLE t (v int)")
        nursery.cancel_scope.cancel()
    assert not servers.ready.running


async def test_a_branch_of_a_running_server_has_its_committed_data_and_fsync_on(servers: PostgresDriver) -> None:
    """A branch starts without fsync (its copy is written out afterwards) but has it on
    before the create returns; it holds exactly what the source had committed."""
    await servers.create(spec("src", "dora", "main"))
    with connect(servers, "src", "dora", "pw", "main") as conn:
        conn.execute("CREATE TABLE t AS SELECT g AS v FROM generate_series(1, 50000) g")
        open_tx = psycopg.connect(host=str(servers.socket_dir("src")), port=servers.port("src"), user="dora", password="pw", dbname="main")
        open_tx.execute("INSERT INTO t VALUES (-1)")  # not committed at the branch moment
        await servers.clone("src", spec("br", "erin", "copy"))
        open_tx.commit()
        open_tx.close()
    assert "fsync = off" not in (servers.layout.data("br") / "corral.conf").read_text()
    with connect(servers, "br", "erin", "pw", "copy") as conn:
        assert conn.execute("SELECT count(*), min(v), max(v) FROM t").fetchone() == (50000, 1, 50000)
        assert conn.execute("SELECT current_setting('fsync')").fetchone() == ("on",)
    assert "fsync" in servers.log_path("br").read_text()  # the reload that put it back

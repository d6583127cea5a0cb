"""The database servers' runtime (`corral.vm.postgres.PostgresDriver`) with real servers:
own uid and modes, identity adoption, SCRAM verifiers, the restore's rollback."""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
import trio

from corral.vm import InstanceSpec, InstanceState, InvalidInstanceState, Limits, release_mounts
from corral.vm.postgres import BackupFailed, PostgresDriver
from tests.support import TEST_SLOT, free_port


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


async def test_a_stopped_servers_data_makes_the_same_server_elsewhere_and_a_bad_archive_leaves_nothing(
    servers: PostgresDriver, tmp_path: Path
) -> None:
    """A drain's move of a database (issue 30): the stopped server's data directory packed
    (`archive_data`) makes a new server of the same id, stopped (`create_from_archive`),
    with its rows, role and password; a running server is not packed, and an archive that
    does not unpack leaves no server behind."""
    await servers.create(spec("m", "mona", "shop"))
    with connect(servers, "m", "mona", "pw", "shop") as conn:
        conn.execute("CREATE TABLE t AS SELECT 7 AS v")
    archive = tmp_path / "m.tar.gz"
    with pytest.raises(InvalidInstanceState):
        await servers.archive_data("m", archive)
    await servers.stop("m")
    await servers.archive_data("m", archive)
    assert archive.stat().st_size > 0
    await servers.destroy("m")  # the old node's copy goes once the new node holds the archive
    made = await servers.create_from_archive(spec("m", "mona", "shop"), archive)
    assert made.state is InstanceState.STOPPED
    assert servers.layout.data("m").stat().st_uid == servers.layout.load("m").uid  # type: ignore[union-attr]
    await servers.start("m", {"password": "pw"})
    with connect(servers, "m", "mona", "pw", "shop") as conn:
        assert conn.execute("SELECT v FROM t").fetchall() == [(7,)]
    assert "made from a data archive" in servers.log_path("m").read_text()

    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    with pytest.raises(BackupFailed):
        await servers.create_from_archive(spec("n", "nora", "shop"), junk)
    assert servers.layout.load("n") is None and not servers.layout.server_dir("n").exists()


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


@pytest.fixture
async def other_node_servers(servers: PostgresDriver) -> AsyncIterator[PostgresDriver]:
    """A second node's servers (a root, disks and cgroups of their own), with the same
    replication secret as `servers`, which this fixture sets (a cluster's, issue 30)."""
    root = Path(f"/var/lib/corral/test-servers-{TEST_SLOT}-b")
    release_mounts(f"corral-test-db{TEST_SLOT}b")
    shutil.rmtree(root, ignore_errors=True)
    servers.replication_secret = b"cluster secret"
    driver = PostgresDriver(root, f"corral-test-db{TEST_SLOT}b")
    driver.replication_secret = b"cluster secret"
    try:
        yield driver
    finally:
        for info in await driver.instances():
            await driver.destroy(info.id)
        shutil.rmtree(root, ignore_errors=True)


def tcp_spec(server_id: str, role: str, database: str, port: int, **env: str) -> InstanceSpec:
    made = spec(server_id, role, database)
    return InstanceSpec(
        instance_id=made.instance_id, limits=made.limits, boot_env=made.boot_env,
        env={**made.env, "port": str(port), "listen": "127.0.0.1", **env},
    )


def tcp(port: int, user: str = "dora", dbname: str = "ledger") -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(host="127.0.0.1", port=port, user=user, password="pw", dbname=dbname, autocommit=True)


def slots(port: int) -> list[str]:
    with psycopg.connect(
        host="127.0.0.1", port=port, user="corral_replicator", password=hmac_password("p"), dbname="postgres", autocommit=True
    ) as conn:
        return [str(row[0]) for row in conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall()]


def hmac_password(primary_id: str) -> str:
    return hmac.new(b"cluster secret", primary_id.encode(), hashlib.sha256).hexdigest()


async def until_replayed(port: int, want: list[tuple[object, ...]]) -> None:
    with trio.fail_after(30):
        while True:
            try:
                rows = await trio.to_thread.run_sync(lambda: tcp(port).execute("SELECT v FROM t ORDER BY v").fetchall())
            except psycopg.Error:
                rows = []
            if rows == want:
                return
            await trio.sleep(0.05)


async def test_a_replica_on_another_node_streams_over_tcp_and_is_promoted_into_its_primary(
    servers: PostgresDriver, other_node_servers: PostgresDriver
) -> None:
    primary_port, replica_port, spare_port = free_port(), free_port(), free_port()
    await servers.create(tcp_spec("p", "dora", "ledger", primary_port))
    with tcp(primary_port) as conn:
        conn.execute("CREATE TABLE t (v int)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
    source = {"replica_of": "p", "primary_host": "127.0.0.1", "primary_port": str(primary_port)}
    await other_node_servers.create_replica("p", tcp_spec("r", "dora", "ledger", replica_port, **source))
    await other_node_servers.create_replica("p", tcp_spec("r2", "dora", "ledger", spare_port, **source))
    await until_replayed(replica_port, [(1,), (2,)])
    with tcp(primary_port) as conn:
        conn.execute("INSERT INTO t VALUES (3)")
    await until_replayed(replica_port, [(1,), (2,), (3,)])
    with tcp(replica_port) as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute("INSERT INTO t VALUES (4)")
    assert sorted(slots(primary_port)) == ["remote_r", "remote_r2"]  # the primary's clean-up leaves them alone
    await servers.stop("p")
    await servers.start("p", {"password": "pw"})
    assert sorted(slots(primary_port)) == ["remote_r", "remote_r2"]

    await other_node_servers.destroy("r2")  # a replica that goes drops its slot on the other node
    assert slots(primary_port) == ["remote_r"]

    await servers.destroy("p")  # the primary's node is gone
    promoted_port = free_port()
    info = await other_node_servers.promote_into("r", tcp_spec("p", "dora", "ledger", promoted_port))
    assert info.id == "p" and info.state is InstanceState.RUNNING
    assert other_node_servers.layout.load("r") is None and not other_node_servers.layout.server_dir("r").exists()
    with tcp(promoted_port) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        conn.execute("INSERT INTO t VALUES (4)")
        assert conn.execute("SELECT v FROM t ORDER BY v").fetchall() == [(1,), (2,), (3,), (4,)]
    assert "promoted: this server was replica r" in other_node_servers.log_path("p").read_text()
    await other_node_servers.stop("p")  # and it starts again as itself
    await other_node_servers.start("p", {"password": "pw"})
    with tcp(promoted_port) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (4,)


def waiting_sessions(port: int) -> int:
    """Sessions of the primary waiting for a replica to confirm their commit."""
    with tcp(port) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchone()
        return int(row[0]) if row else 0


async def test_a_primary_waits_for_its_replicas_on_other_nodes_to_flush_each_commit(
    servers: PostgresDriver, other_node_servers: PostgresDriver
) -> None:
    primary_port, replica_port = free_port(), free_port()
    await servers.create(tcp_spec("p", "dora", "ledger", primary_port))
    with tcp(primary_port) as conn:
        conn.execute("CREATE TABLE t (v int)")
    source = {"replica_of": "p", "primary_host": "127.0.0.1", "primary_port": str(primary_port)}
    await other_node_servers.create_replica("p", tcp_spec("r", "dora", "ledger", replica_port, **source))
    assert servers.waited_replicas("p") == []
    assert await servers.wait_for_replicas("p", ["r"]) is True
    assert await servers.wait_for_replicas("p", ["r"]) is False  # nothing to change
    assert servers.waited_replicas("p") == ["rr"]
    with trio.fail_after(10):
        while await trio.to_thread.run_sync(lambda: tcp(primary_port).execute("SHOW synchronous_standby_names").fetchone()) != ('ANY 1 ("rr")',):
            await trio.sleep(0.05)
    with tcp(primary_port) as conn:  # the replica confirms: the commit is acknowledged
        conn.execute("INSERT INTO t VALUES (1)")
    await until_replayed(replica_port, [(1,)])

    # A branch of the primary (its data copied) waits for nobody.
    await servers.clone("p", tcp_spec("br", "erin", "copy", free_port()))
    assert servers.waited_replicas("br") == []
    with connect(servers, "br", "erin", "pw", "copy") as conn:
        assert conn.execute("SHOW synchronous_standby_names").fetchone() == ("",)
        conn.execute("INSERT INTO t VALUES (9)")

    # The replica gone quiet: a commit is not acknowledged until the primary stops waiting for it.
    await other_node_servers.stop("r")
    done = trio.Event()

    def insert() -> None:
        with tcp(primary_port) as conn:
            conn.execute("INSERT INTO t VALUES (2)")

    async with trio.open_nursery() as nursery:

        async def write() -> None:
            await trio.to_thread.run_sync(insert)
            done.set()

        nursery.start_soon(write)
        with trio.fail_after(10):
            while await trio.to_thread.run_sync(waiting_sessions, primary_port) != 1:
                await trio.sleep(0.05)
        await trio.sleep(0.5)
        assert not done.is_set()
        assert await servers.wait_for_replicas("p", []) is True
        with trio.fail_after(10):
            await done.wait()
    with tcp(primary_port) as conn:
        assert conn.execute("SELECT v FROM t ORDER BY v").fetchall() == [(1,), (2,)]
        assert conn.execute("SHOW synchronous_standby_names").fetchone() == ("",)
    await servers.stop("p")  # the setting is kept by the server across restarts
    await servers.wait_for_replicas("p", ["r"])
    await servers.start("p", {"password": "pw"})
    with tcp(primary_port) as conn:
        assert conn.execute("SHOW synchronous_standby_names").fetchone() == ('ANY 1 ("rr")',)


async def test_a_stopped_server_starts_on_the_addresses_its_node_has_now(servers: PostgresDriver) -> None:
    port = free_port()
    await servers.create(tcp_spec("moved", "dora", "ledger", port))  # 127.0.0.1

    def reach(host: str) -> bool:
        try:
            with psycopg.connect(host=host, port=port, user="dora", password="pw", dbname="ledger", connect_timeout=3) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    assert await trio.to_thread.run_sync(reach, "127.0.0.1") and not await trio.to_thread.run_sync(reach, "127.0.0.2")
    await servers.start("moved", {"password": "pw", "listen": "127.0.0.2"})  # running: left as it is
    assert not await trio.to_thread.run_sync(reach, "127.0.0.2")
    await servers.stop("moved")
    await servers.start("moved", {"password": "pw", "listen": "127.0.0.2"})
    assert await trio.to_thread.run_sync(reach, "127.0.0.2") and not await trio.to_thread.run_sync(reach, "127.0.0.1")
    assert servers.layout.load("moved").listen == "127.0.0.2"  # type: ignore[union-attr]

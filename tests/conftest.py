"""Fixtures shared by the whole suite."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from corral.storage import Database, migrate, open_database
from tests.actors.webhooks.receiver import Receiver, https_receiver
from tests.dns_server import DnsServer, dns_server
from tests.pg_server import create_database, postgres_server
from tests.support import (
    RUNTIME_SETTINGS,
    TEMPLATE_CACHE,
    Api,
    Tenant,
    cleanup_runtime_host,
    destroy_instances_and_databases,
    running_server,
)

_db_names = itertools.count()

# `corral serve` processes the tests start would otherwise build the default template
# into their empty data directories in the background (tests share a prebuilt cache).
os.environ.setdefault("CORRAL_PREPARE_TEMPLATES", "0")


@pytest.fixture(autouse=True)
def quick_argon2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Still argon2id, at the minimum cost: the default (64 MiB, 3 passes) takes ~0.25 s a hash.

    Servers the tests start as separate processes keep the production cost."""
    from argon2 import PasswordHasher

    from corral.actors.tenancy import passwords

    monkeypatch.setattr(passwords, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh empty database URL, once for each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'corral.db'}"
    server = request.getfixturevalue("postgres_url")
    return create_database(server, f"test_{next(_db_names)}")


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """A migrated store on each backend."""
    database = open_database(database_url)
    await migrate(database)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def api(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Api]:
    """A real server (SQLite store) on a free port, and a client for it."""
    async with running_server(tmp_path_factory.mktemp("corral")) as client:
        yield client


@pytest.fixture
async def tenant(api: Api) -> Tenant:
    return await api.create_tenant()


@pytest.fixture
async def other_tenant(api: Api) -> Tenant:
    return await api.create_tenant("Other")


@pytest.fixture(scope="session")
def runtime_host() -> Iterator[None]:
    """Root, the default and desktop templates built (once per machine), and a clean host afterwards."""
    import os

    from corral.vm import TemplateStore

    if os.geteuid() != 0:
        pytest.fail("instance tests need root (tools/test runs as root in CI)")
    cleanup_runtime_host()
    TemplateStore(TEMPLATE_CACHE).ensure_sync("default", progress=lambda line: None)
    TemplateStore(TEMPLATE_CACHE).ensure_sync("desktop", progress=lambda line: None)
    yield
    cleanup_runtime_host()


@pytest.fixture
async def runtime_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Api]:
    """A real server that runs real instances; its instances and databases are destroyed afterwards."""
    async with running_server(tmp_path_factory.mktemp("corral"), **RUNTIME_SETTINGS) as client:
        try:
            yield client
        finally:
            await destroy_instances_and_databases(client.platform)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a test marked `slow` go first, so that parallel workers start the long
    ones (a five-minute exec timeout) early instead of ending the run with them."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: order kept within each group


@pytest.fixture
async def dns() -> AsyncIterator[DnsServer]:
    """A name server on loopback whose answers the test sets (`tests/dns_server.py`)."""
    async with dns_server() as server:
        yield server


@pytest.fixture
async def receiver(tmp_path: Path) -> AsyncIterator[Receiver]:
    """A real HTTPS webhook receiver on loopback, with a CA of its own (`tests/actors/webhooks/receiver.py`)."""
    async with https_receiver(tmp_path / "receiver") as running:
        yield running

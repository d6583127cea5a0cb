"""Fixtures for the actor kernel tests: the test table and a running system."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from corral.actors import ActorConfig, ActorSystem, open_actor_system
from corral.storage import Database
from tests.actors.machine import TABLE, Probe


@pytest.fixture
async def machines_db(db: Database) -> Database:
    await db.execute(TABLE)
    return db


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def config() -> ActorConfig:
    return ActorConfig(idle_timeout=60.0, restart_backoff=0.01, shutdown_grace=1.0)


@pytest.fixture
async def system(
    machines_db: Database, probe: Probe, config: ActorConfig
) -> AsyncIterator[ActorSystem]:
    async with open_actor_system(
        machines_db, services=SimpleNamespace(probe=probe), config=config
    ) as running:
        yield running

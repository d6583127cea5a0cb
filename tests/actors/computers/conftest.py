"""A real node on each database, running real instances, for the computer actor's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support import RUNTIME_SETTINGS, Api, Tenant, running_server


@pytest.fixture
async def api(database_url: str, tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> AsyncIterator[Api]:
    async with running_server(tmp_path_factory.mktemp("corral"), database_url, **RUNTIME_SETTINGS) as server:
        try:
            yield server
        finally:
            driver = await server.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


@pytest.fixture
async def owner(api: Api) -> Tenant:
    return await api.create_tenant()

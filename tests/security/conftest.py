"""Fixtures of the hostile-tenant tests: a real server running real instances."""

from __future__ import annotations

import pytest

from tests.support import Api, Tenant


@pytest.fixture
async def owner(runtime_api: Api) -> Tenant:
    """A fresh tenant on a server that runs real instances."""
    return await runtime_api.create_tenant()

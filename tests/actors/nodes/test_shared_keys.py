"""API keys on a store several nodes share (issue 30): each node keeps the keys it read
for at most `FRESH_SECONDS` (`tenancy.store.api_keys`); a key revoked through one node
is refused at once there and, through the notice it sends, on the other; one revoked
behind the API (an operator's SQL, no notice) within `FRESH_SECONDS`. Two real nodes
on one real PostgreSQL, in this process."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest
import trio

from corral.actors.tenancy.store import api_keys as key_store
from tests.pg_server import create_database
from tests.support import API, assert_error, running_server

_databases = itertools.count()


async def refused_within(node: object, key: str, seconds: float) -> None:
    with trio.fail_after(seconds):
        while (await node.request("GET", f"{API}/tenant", key=key)).status_code != 401:  # type: ignore[attr-defined]
            await trio.sleep(0.02)


async def test_a_key_revoked_through_one_node_is_refused_at_once_there_and_on_the_other_once_told(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(key_store, "FRESH_SECONDS", 600.0)  # only a notice can make a node forget a key now
    url = create_database(postgres_url, f"shared_keys_{os.getpid()}_{next(_databases)}")
    async with running_server(tmp_path / "a", database_url=url, node_name="node-a") as a, running_server(
        tmp_path / "b", database_url=url, node_name="node-b"
    ) as b:
        tenant = await a.create_tenant()
        for node in (a, b):  # read, and kept, on both nodes
            assert (await node.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200

        # Behind the API (no notice), the nodes go on with what they read...
        await a.platform.db.execute("UPDATE api_keys SET scopes = '[]' WHERE id = ?", (tenant.key_id,))
        assert (await b.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200

        # ...but a revocation through node A is refused by A on the next request, and by B once it hears.
        revoked = await a.request("DELETE", f"{API}/api-keys/{tenant.key_id}", key=tenant.key)
        assert revoked.status_code == 200, revoked.text
        assert_error(await a.request("GET", f"{API}/tenant", key=tenant.key), 401, "invalid_token")
        await refused_within(b, tenant.key, 10)
        assert_error(await b.request("GET", f"{API}/tenant", key=tenant.key), 401, "invalid_token")


async def test_a_key_revoked_behind_the_api_is_refused_on_every_node_within_fresh_seconds(
    tmp_path: Path, postgres_url: str
) -> None:
    url = create_database(postgres_url, f"shared_keys_{os.getpid()}_{next(_databases)}")
    async with running_server(tmp_path / "a", database_url=url, node_name="node-a") as a, running_server(
        tmp_path / "b", database_url=url, node_name="node-b"
    ) as b:
        tenant = await a.create_tenant()
        for node in (a, b):
            assert (await node.request("GET", f"{API}/tenant", key=tenant.key)).status_code == 200
        await a.platform.db.execute("UPDATE api_keys SET status = 'revoked' WHERE id = ?", (tenant.key_id,))
        for node in (a, b):  # (the margin: the polling, on a busy machine)
            await refused_within(node, tenant.key, key_store.FRESH_SECONDS + 3)


def test_a_read_begun_before_the_cache_was_emptied_is_not_kept() -> None:
    """A revocation empties the cache while another request is reading the key: what
    that read brings back is the key as it was, and is not kept."""
    cache = key_store.KeyCache()
    key = key_store.KeyWithMember(
        id="k", tenant_id="t", user_id=None, name="n", key_type="platform", key_purpose="api", key_prefix="msk_p_",
        key_digest="d", scopes=[], allowed_ips=None, workspace_id=None, rate_limit_rpm=1, status="active",
        created_at="", revoked_at=None, last_used_at=None, member_role=None, member_email=None,
    )
    epoch = cache.epoch
    cache.forget_all()  # the revocation, while the read was under way
    cache.keep_fresh(key, 0.0, epoch)
    assert cache.get_fresh("d") is None
    cache.keep_fresh(key, time.monotonic(), cache.epoch)  # a read begun after it is kept
    assert cache.get_fresh("d") == key
    cache.keep_fresh(key, time.monotonic() - key_store.FRESH_SECONDS, cache.epoch)  # and stands FRESH_SECONDS
    assert cache.get_fresh("d") is None

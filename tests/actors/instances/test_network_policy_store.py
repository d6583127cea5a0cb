"""The network policy store on both backends: insert, replace (upsert), delete."""

from __future__ import annotations

from corral.actors.instances.network_policy import NetworkPolicyRecord, store
from corral.net import NetworkPolicy, PolicyRule
from corral.storage import Database


async def test_save_replaces_and_delete_removes(db: Database) -> None:
    first = NetworkPolicyRecord("r1", "sandbox", "t1", "allowlist", [{"host": "a.example", "port": 443, "protocol": "tcp"}], "2026-01-01T00:00:00.000000Z")
    await store.save(db, first)
    assert await store.load(db, "r1") == first
    assert first.policy == NetworkPolicy("allowlist", (PolicyRule("a.example", 443, "tcp"),))
    second = NetworkPolicyRecord("r1", "sandbox", "t1", "isolated", [], "2026-01-02T00:00:00.000000Z")
    await store.save(db, second)
    assert await store.load(db, "r1") == second
    await store.delete(db, "r1")
    assert await store.load(db, "r1") is None

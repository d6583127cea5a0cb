"""The domain map of a node catches up with what another node's actors wrote to the
shared store (`reload`), without bringing back a domain it removed itself."""

from __future__ import annotations

from corral.actors import tenancy
from corral.actors.domains import DomainMap, DomainRoute
from corral.actors.domains import store as domain_store
from corral.storage import Database, utc_now_iso
from tests.actors.domains.test_store import _record


async def test_reload_follows_the_store(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Map", "map-owner@example.test", "password123")
    ids = (created.tenant.id, created.workspace.id, created.project.id)
    heard: list[tuple[str, DomainRoute | None]] = []
    node = DomainMap()
    await node.load(db)
    node.listen(lambda fqdn, route: heard.append((fqdn, route)))

    record = _record(*ids, "other-node.example.com")
    await db.transaction(lambda tx: domain_store.insert(tx, record))
    await node.reload(db)
    assert node.get("other-node.example.com") is not None and node.routable("other-node.example.com") is None

    await domain_store.DOMAINS.update(db, record.id, {"status": "verified", "updated_at": utc_now_iso()})
    await node.reload(db)
    routed = node.routable("other-node.example.com")
    assert routed is not None and routed.target == "slug.corral.localhost"
    assert heard[-1] == ("other-node.example.com", routed)

    await domain_store.DOMAINS.update(db, record.id, {"status": "removed", "updated_at": utc_now_iso()})
    await node.reload(db)
    assert node.get("other-node.example.com") is None and heard[-1] == ("other-node.example.com", None)


async def test_a_stale_reload_does_not_bring_back_a_removed_domain(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Stale", "stale-owner@example.test", "password123")
    record = _record(created.tenant.id, created.workspace.id, created.project.id, "stale.example.com", status="verified")
    await db.transaction(lambda tx: domain_store.insert(tx, record))
    node = DomainMap()
    await node.load(db)
    assert node.routable("stale.example.com") is not None
    node.drop("stale.example.com", record.id)  # this node's actor removed it; the row is read before it was written
    await node.reload(db)
    assert node.get("stale.example.com") is None

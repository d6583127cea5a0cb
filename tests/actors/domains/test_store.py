"""The custom-domain store on SQLite and PostgreSQL: the record matches its table, an FQDN
is held once among live domains (the partial unique index), removed rows free it, and
deployments are read from their table only when the store has one."""

from __future__ import annotations

import dataclasses

import pytest

from corral.actors import tenancy
from corral.actors.domains import store
from corral.actors.domains.store import CustomDomainRecord
from corral.ids import new_uuid
from corral.storage import Database, utc_now_iso


def _record(tenant_id: str, workspace_id: str, project_id: str, fqdn: str, status: str = "pending") -> CustomDomainRecord:
    now = utc_now_iso()
    return CustomDomainRecord(
        id=new_uuid(), tenant_id=tenant_id, workspace_id=workspace_id, project_id=project_id, computer_id=new_uuid(),
        deployment_id=None, fqdn=fqdn, status=status, verification_target="slug.corral.localhost", verified_at=None,
        tls_issued_at=None, dns_error=None, external_workspace_id="ext-ws", external_user_id=None, external_project_id=None,
        created_at=now, updated_at=now,
    )


async def test_fqdn_held_once_among_live_domains(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Domains", "domains-owner@example.test", "password123")
    ids = (created.tenant.id, created.workspace.id, created.project.id)
    first = _record(*ids, "app.example.com")
    await db.transaction(lambda tx: store.insert(tx, first))
    row = await db.fetch_one("SELECT * FROM custom_domains")
    assert row is not None and set(row) == {f.name for f in dataclasses.fields(CustomDomainRecord)}
    assert await store.find(db, created.tenant.id, first.id) == first
    assert await store.find(db, new_uuid(), first.id) is None
    assert await db.transaction(lambda tx: store.fqdn_taken(tx, "app.example.com"))

    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        await db.transaction(lambda tx: store.insert(tx, _record(*ids, "app.example.com")))

    await store.DOMAINS.update(db, first.id, {"status": "removed"})
    assert not await db.transaction(lambda tx: store.fqdn_taken(tx, "app.example.com"))
    again = _record(*ids, "app.example.com")
    await db.transaction(lambda tx: store.insert(tx, again))
    assert [r.id for r in await store.live(db)] == [again.id]
    assert await store.find(db, created.tenant.id, first.id) is None  # removed answers 404

    with pytest.raises(Exception, match=r"(?i)check|constraint"):
        both = dataclasses.replace(_record(*ids, "both.example.com"), deployment_id="dep_x")
        await db.transaction(lambda tx: store.insert(tx, both))


async def test_deployments_only_when_their_table_exists(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Deploys", "deploys-owner@example.test", "password123")
    has_table = await db.fetch_value(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'deployments'"
        if db.dialect == "sqlite" else "SELECT count(*) FROM information_schema.tables WHERE table_name = 'deployments'"
    )
    found = await store.deployment_row(db, created.tenant.id, "dep_missing")
    assert found is None
    if not has_table:
        return
    now = utc_now_iso()
    await db.insert("deployments", {
        "id": "dep_test", "tenant_id": created.tenant.id, "name": "Site", "slug": "site-abc", "state": "running",
        "workspace_id": created.workspace.id, "project_id": created.project.id, "source_type": "sandbox",
        "metadata": "{}", "created_at": now, "updated_at": now,
    })
    row = await store.deployment_row(db, created.tenant.id, "dep_test")
    assert row is not None and row["slug"] == "site-abc"
    assert await store.deployment_row(db, new_uuid(), "dep_test") is None

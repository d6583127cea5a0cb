"""Tenancy's records match their tables, on SQLite and PostgreSQL: every column is a
field of the table's record, and a record reads back equal to the one written (JSON
columns decoded, unrestricted ticket scopes kept as null)."""

from __future__ import annotations

import dataclasses

from corral.actors import tenancy
from corral.actors.record import RowStore
from corral.actors.tenancy import api_keys, audit, outbox, store, tickets
from corral.ids import prefixed
from corral.storage import Database, iso_in, utc_now_iso


async def _columns(db: Database, table: str) -> set[str]:
    row = await db.fetch_one(f"SELECT * FROM {table}")
    assert row is not None, f"no {table} row to compare with"
    return set(row)


async def test_records_match_their_tables(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Store", "store-owner@example.test", "password123")
    tenant, owner, workspace, project = created.tenant, created.owner, created.workspace, created.project
    key, _ = await api_keys.create_api_key(
        db, tenant_id=tenant.id, user_id=owner.id, name="k", key_type="user", scopes=["org:read"], allowed_ips=["10.0.0.0/8"]
    )
    await tickets.mint_ticket(db, tenant_id=tenant.id, user_id=owner.id, api_key_id=None, scopes=None, ttl_seconds=60)
    await audit.record(
        db, audit.AuditEntry(tenant.id, "user_key", "workspaces.create", "POST", "/api/v1/workspaces", 201, "success", "req")
    )
    await outbox.queue_mail(db, "someone@example.test", "Hello", "body")
    invite = store.InviteRecord(
        id=prefixed("inv"), kind="workspace", tenant_id=tenant.id, workspace_id=workspace.id, email="New@example.test",
        email_lower="new@example.test", role="member", token_digest="0" * 64, invited_by=owner.id,
        expires_at=iso_in(60), accepted_at=None, accepted_by=None, revoked_at=None, inserted_at=utc_now_iso(),
    )
    await db.transaction(lambda tx: store.invites.create(tx, invite))

    stores: list[RowStore[object]] = [
        store.tenants.TENANTS, store.users.USERS, store.workspaces.WORKSPACES, store.projects.PROJECTS,
        store.api_keys.API_KEYS, store.invites.INVITES, store.tickets.TICKETS, store.audit.AUDIT_EVENTS,
        store.outbox.OUTBOX,
    ]
    for rows in stores:
        assert await _columns(db, rows.table) == set(rows.columns), rows.table
    member_fields = {field.name for field in dataclasses.fields(store.TenantMemberRecord)}
    assert await _columns(db, "tenant_members") == member_fields

    assert await store.tenants.load(db, tenant.id) == tenant
    assert await store.users.load(db, owner.id) == owner
    assert await store.workspaces.load(db, workspace.id) == workspace
    assert await store.projects.find(db, tenant.id, project.id) == project
    assert await store.api_keys.find(db, tenant.id, key.id) == key
    assert await db.transaction(lambda tx: store.invites.load(tx, invite.id)) == invite
    [ticket] = await store.tickets.TICKETS.where(db, [("tenant_id", tenant.id)], order_by="digest")
    assert ticket.scopes is None
    [member] = await store.workspace_members.list_for(db, workspace.id)
    assert (member.user_id, member.role, member.email) == (owner.id, "owner", owner.email)

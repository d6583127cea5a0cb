"""A tenant's caps hold when creates race, on SQLite and on PostgreSQL, where several
nodes (or several connections of one) insert at once: the count under the cap and the
insert it allows are one step (`tenancy.store.tenants.lock`)."""

from __future__ import annotations

import trio

from corral.actors import tenancy
from corral.actors.sandboxes import store as sandbox_store
from corral.actors.tenancy.attribution import Attribution
from corral.actors.webhooks import store as webhook_store
from corral.errors import ApiError
from corral.ids import new_uuid
from corral.storage import Database, utc_now_iso


async def race(attempts: int, create: object) -> tuple[int, list[str]]:
    """`attempts` creates at once; how many went in, and the refusals' codes."""
    made, refused = 0, []

    async def one() -> None:
        nonlocal made
        try:
            await create()  # type: ignore[operator]
        except ApiError as exc:
            refused.append(exc.code)
        else:
            made += 1

    async with trio.open_nursery() as nursery:
        for _ in range(attempts):
            nursery.start_soon(one)
    return made, refused


async def test_twelve_sandbox_creates_at_once_make_exactly_the_tenants_limit(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Caps", "caps@example.test", "password123")
    tenant = created.tenant
    await db.execute("UPDATE tenants SET sandbox_limit = 3 WHERE id = ?", (tenant.id,))
    attribution = Attribution(tenant.id, created.workspace.id, created.project.id)
    draft = sandbox_store.SandboxDraft(attribution, None, name="racer", template_id="default", size="small", auto_stop=None, metadata={})

    async def create() -> None:
        await db.transaction(lambda tx: sandbox_store.create(tx, new_uuid(), draft, "node-a"))

    for _ in range(3):  # each round from an empty tenant: a race may land at any moment
        made, refused = await race(12, create)
        assert (made, refused) == (3, ["SANDBOX_LIMIT_REACHED"] * 9)
        assert await db.fetch_value("SELECT COUNT(*) FROM sandboxes WHERE tenant_id = ?", (tenant.id,)) == 3
        await db.execute("DELETE FROM sandboxes WHERE tenant_id = ?", (tenant.id,))


async def test_webhook_creates_at_once_stop_at_the_limit(db: Database) -> None:
    created = await tenancy.create_tenant(db, "Hooks", "hooks@example.test", "password123")

    async def create() -> None:
        now = utc_now_iso()
        record = webhook_store.WebhookRecord(
            id=new_uuid(), tenant_id=created.tenant.id, name=None, url="https://hooks.example.test/in", events=["*"],
            headers={}, retry_count=3, metadata={}, secret=b"sealed", secret_preview="whsec_...", created_by=None,
            created_at=now, updated_at=now,
        )
        await webhook_store.create_webhook(db, record, limit=5)

    made, refused = await race(12, create)
    assert (made, refused) == (5, ["WEBHOOK_LIMIT_REACHED"] * 7)
    assert await db.fetch_value("SELECT COUNT(*) FROM webhooks WHERE tenant_id = ?", (created.tenant.id,)) == 5

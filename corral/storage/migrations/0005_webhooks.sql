-- Webhooks (issue 5): endpoints, and their deliveries as a durable queue.
--
-- One `webhook_deliveries` row is one attempt. A `pending` row is an attempt that is
-- queued (due at `scheduled_at`), and a node claims it by writing `lease_owner` and
-- `lease_until`, sends it, and in one transaction records the outcome
-- (`delivered` or `failed`) and, when a retry is due, inserts the next attempt's
-- `pending` row. The unique index keeps each (webhook, event, attempt) once, so
-- replaying the event log after a restart cannot queue an event twice.

CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    headers TEXT NOT NULL,
    retry_count BIGINT NOT NULL,
    metadata TEXT NOT NULL,
    secret {blob} NOT NULL,
    secret_preview TEXT NOT NULL,
    created_by TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at);

CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    status TEXT NOT NULL,
    scheduled_at TEXT NOT NULL,
    lease_owner TEXT,
    lease_until TEXT,
    status_code BIGINT,
    duration_ms BIGINT,
    error TEXT,
    attempted_at TEXT,
    delivered_at TEXT,
    next_attempt_at TEXT,
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX webhook_deliveries_attempt ON webhook_deliveries (webhook_id, event_id, attempt);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, scheduled_at);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, id);

-- Idempotency-Key (contract §12): the stored reply of a POST of deployments and
-- databases, per tenant and key, for 24 hours. `state` is `in_progress` while the
-- first request runs (owned by the node process `owner`), then `done` with its reply.

CREATE TABLE idempotency_keys (
    tenant_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,
    owner TEXT NOT NULL,
    response_status BIGINT,
    response_body TEXT,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

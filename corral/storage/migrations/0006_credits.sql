-- Credits ledger, metering and per-end-user quotas (issue 5).
-- credit_accounts: one row per tenant with a ledger. Every ledger write locks it
-- (SELECT ... FOR UPDATE on PostgreSQL; SQLite writes are serialised) and updates
-- balance_credits in the same transaction as the rows it adds, so the balance always
-- equals the sum of the tenant's credit_transactions.
CREATE TABLE credit_accounts (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    balance_credits BIGINT NOT NULL DEFAULT 0,
    lifetime_earned BIGINT NOT NULL DEFAULT 0,
    lifetime_spent BIGINT NOT NULL DEFAULT 0,
    debt_credits BIGINT NOT NULL DEFAULT 0,
    ai_carry_micro BIGINT NOT NULL DEFAULT 0,
    last_seq BIGINT NOT NULL DEFAULT 0,
    low_notified INTEGER NOT NULL DEFAULT 0,
    exhausted_notified INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE credit_transactions (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    type TEXT NOT NULL,
    amount_credits BIGINT NOT NULL,
    description TEXT NOT NULL,
    user_id TEXT,
    computer_id TEXT,
    resource_type TEXT,
    resource_id TEXT,
    external_user_id TEXT,
    size TEXT,
    provider TEXT,
    model TEXT,
    input_tokens BIGINT,
    output_tokens BIGINT,
    cost_usd_micros BIGINT NOT NULL DEFAULT 0,
    grant_id TEXT,
    expires_at TEXT,
    remaining_credits BIGINT,
    inserted_at TEXT NOT NULL,
    UNIQUE (tenant_id, seq)
);
CREATE INDEX credit_transactions_time ON credit_transactions (tenant_id, inserted_at);
CREATE INDEX credit_transactions_grants ON credit_transactions (tenant_id, type, expires_at);
CREATE INDEX credit_transactions_due ON credit_transactions (expires_at, remaining_credits);
CREATE INDEX credit_transactions_user ON credit_transactions (tenant_id, external_user_id, type);
-- credit_meters: one per instance that has run; `carry` is the part of a credit
-- accrued but not yet posted (credit-microseconds per hour), kept across stops and
-- restarts, so time is never rounded away or charged twice.
CREATE TABLE credit_meters (
    resource_type TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    size TEXT NOT NULL,
    credits_per_hour BIGINT NOT NULL,
    user_id TEXT,
    external_user_id TEXT,
    running INTEGER NOT NULL,
    accrued_until TEXT,
    carry BIGINT NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (resource_type, resource_id)
);
CREATE INDEX credit_meters_running ON credit_meters (running, tenant_id);
CREATE TABLE external_user_quotas (
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    external_user_id TEXT NOT NULL,
    max_sandboxes BIGINT,
    max_concurrent BIGINT,
    max_storage_gb BIGINT,
    max_credit_cents BIGINT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, external_user_id)
);

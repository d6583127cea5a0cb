CREATE TABLE sandbox_previews (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    port BIGINT NOT NULL,
    ready_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (sandbox_id, port)
);

CREATE TABLE sandbox_shares (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    token_digest TEXT NOT NULL UNIQUE,
    token_prefix TEXT NOT NULL,
    port BIGINT,
    expires_at TEXT,
    created_by TEXT,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
CREATE INDEX sandbox_shares_sandbox ON sandbox_shares (sandbox_id, created_at);

CREATE TABLE preview_domains (
    scope_type TEXT NOT NULL,
    scope_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    domain TEXT NOT NULL,
    status TEXT NOT NULL,
    dns_status TEXT NOT NULL,
    dns_error TEXT,
    verified_at TEXT,
    last_checked_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (scope_type, scope_id)
);
CREATE INDEX preview_domains_domain ON preview_domains (domain);
CREATE INDEX preview_domains_tenant ON preview_domains (tenant_id);

CREATE TABLE sandboxes (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    owner_user_id TEXT,
    name TEXT NOT NULL,
    slug TEXT NOT NULL UNIQUE,
    template_id TEXT NOT NULL,
    size TEXT NOT NULL,
    status TEXT NOT NULL,
    region TEXT NOT NULL,
    auto_stop BIGINT,
    workspace_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    external_workspace_id TEXT,
    external_user_id TEXT,
    external_project_id TEXT,
    metadata TEXT NOT NULL,
    error TEXT,
    forked_from TEXT,
    last_activity_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX sandboxes_tenant ON sandboxes (tenant_id, status);

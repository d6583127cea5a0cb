CREATE TABLE databases (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    owner_user_id TEXT,
    name TEXT NOT NULL,
    engine TEXT NOT NULL,
    engine_version TEXT NOT NULL,
    status TEXT NOT NULL,
    size TEXT NOT NULL,
    region TEXT NOT NULL,
    role TEXT NOT NULL,
    parent_id TEXT,
    primary_id TEXT,
    auto_suspend_seconds BIGINT NOT NULL,
    port BIGINT NOT NULL,
    pg_user TEXT NOT NULL,
    pg_database TEXT NOT NULL,
    password_sealed {blob},
    server_restarts BIGINT NOT NULL,
    workspace_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    external_workspace_id TEXT,
    external_user_id TEXT,
    external_project_id TEXT,
    error TEXT,
    last_activity_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX databases_tenant ON databases (tenant_id, status);
CREATE INDEX databases_project_name ON databases (project_id, name);

CREATE TABLE database_backups (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    database_id TEXT NOT NULL,
    status TEXT NOT NULL,
    method TEXT NOT NULL,
    size_bytes BIGINT,
    blob_sha256 TEXT,
    source_user TEXT NOT NULL,
    source_database TEXT NOT NULL,
    error TEXT,
    started_at TEXT NOT NULL,
    completed_at TEXT
);
CREATE INDEX database_backups_database ON database_backups (database_id, started_at);

CREATE TABLE database_restores (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    database_id TEXT NOT NULL,
    backup_id TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    started_at TEXT NOT NULL,
    completed_at TEXT
);
CREATE INDEX database_restores_database ON database_restores (database_id, started_at);

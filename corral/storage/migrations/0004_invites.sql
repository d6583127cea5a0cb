-- Workspace and org (tenant) invites. `kind` is 'workspace' or 'tenant'; a workspace
-- invite names its workspace. Only the SHA-256 digest of the token is kept.
CREATE TABLE invites (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    workspace_id TEXT REFERENCES workspaces(id) ON DELETE CASCADE,
    email TEXT NOT NULL,
    email_lower TEXT NOT NULL,
    role TEXT NOT NULL,
    token_digest TEXT NOT NULL UNIQUE,
    invited_by TEXT,
    expires_at TEXT NOT NULL,
    accepted_at TEXT,
    accepted_by TEXT,
    revoked_at TEXT,
    inserted_at TEXT NOT NULL
);
CREATE INDEX invites_tenant ON invites (tenant_id, kind, inserted_at);
CREATE INDEX invites_workspace ON invites (workspace_id, inserted_at);
CREATE INDEX invites_email ON invites (tenant_id, email_lower);

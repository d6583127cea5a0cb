-- Issue 18 items 5-7 (contract §14 profiles, §15, §16).
--
-- Browser tokens (`mbt_`): a bearer credential for one sandbox's routes. Only the
-- SHA-256 digest of the token is kept; `scopes` are the minting credential's sandbox
-- scopes (JSON list); `api_key_id` is the minting key, checked again on every use.
CREATE TABLE browser_tokens (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    token_digest TEXT NOT NULL UNIQUE,
    user_id TEXT,
    api_key_id TEXT,
    workspace_id TEXT,
    scopes TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX browser_tokens_expiry ON browser_tokens (expires_at);
-- A tenant's branding; its custom domain stays in tenants.custom_domain.
CREATE TABLE tenant_branding (
    tenant_id TEXT PRIMARY KEY,
    display_name TEXT,
    logo_url TEXT,
    primary_color TEXT,
    support_email TEXT,
    updated_at TEXT NOT NULL
);
-- Agent runtime profiles. `env_sealed` is the env object as JSON sealed with the
-- tenant and profile id as associated data; `env_keys` the names only (JSON).
-- `default_kinds` (JSON list of sandbox/computer) are the kinds this profile is the
-- default for in its workspace (workspace_id) or, with workspace_id NULL, the tenant.
CREATE TABLE agent_runtime_profiles (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    workspace_id TEXT,
    name TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT,
    command TEXT,
    applies_to TEXT NOT NULL,
    env_keys TEXT NOT NULL,
    env_sealed {blob},
    secret_ids TEXT NOT NULL,
    default_kinds TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX agent_runtime_profiles_name ON agent_runtime_profiles (tenant_id, name);
-- Sandbox templates a tenant builds (the built-ins are not rows). The layer a
-- ready build made lives under the runtime's template directory, named by the id.
CREATE TABLE sandbox_templates (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    name TEXT NOT NULL,
    base TEXT NOT NULL,
    packages TEXT NOT NULL,
    setup TEXT NOT NULL,
    env_keys TEXT NOT NULL,
    env_sealed {blob},
    default_preview_port BIGINT,
    status TEXT NOT NULL,
    size_bytes BIGINT,
    layer_build_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX sandbox_templates_name ON sandbox_templates (workspace_id, name);
-- One build of a template: an instance of its base that runs packages and setup.
-- The instance-base columns (size, slug, owner, attribution) make it a kind of
-- instance actor like sandboxes and computers.
CREATE TABLE sandbox_template_builds (
    id TEXT PRIMARY KEY,
    template_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    project_id TEXT,
    external_workspace_id TEXT,
    external_user_id TEXT,
    external_project_id TEXT,
    owner_user_id TEXT,
    base TEXT NOT NULL,
    size TEXT NOT NULL,
    slug TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    size_bytes BIGINT,
    started_at TEXT,
    finished_at TEXT,
    last_activity_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX sandbox_template_builds_template ON sandbox_template_builds (template_id, created_at);
CREATE INDEX sandbox_template_builds_status ON sandbox_template_builds (status);
CREATE TABLE sandbox_template_build_logs (
    build_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    line TEXT NOT NULL,
    ts TEXT NOT NULL,
    PRIMARY KEY (build_id, seq)
);

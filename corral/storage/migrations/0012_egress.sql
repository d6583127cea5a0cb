-- Egress security (issue 15): the vault's secrets and bindings, policies with their
-- allowlist rules, and the audit log of requests through the egress proxy.
--
-- `scope_key` is the identity value of a secret's scope ('' for `tenant`), so that a
-- name is unique within one scope with a plain unique index on both backends.
-- `resource_key` is a policy's or binding's resource id, '' for the tenant default
-- policy and for scope-wide bindings (NULLs are never equal in a unique index).

CREATE TABLE egress_secrets (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    scope TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    workspace_id TEXT,
    owner_user_id TEXT,
    external_user_id TEXT,
    external_workspace_id TEXT,
    allowed_hosts TEXT NOT NULL,
    value {blob} NOT NULL,
    preview TEXT NOT NULL,
    expires_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX egress_secrets_name ON egress_secrets (tenant_id, scope, scope_key, name);

CREATE TABLE egress_bindings (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    secret_id TEXT NOT NULL REFERENCES egress_secrets(id) ON DELETE CASCADE,
    resource_id TEXT,
    resource_type TEXT,
    resource_key TEXT NOT NULL,
    exposure TEXT NOT NULL,
    expose_as_env TEXT NOT NULL,
    placeholder_token TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX egress_bindings_placeholder ON egress_bindings (placeholder_token);
CREATE UNIQUE INDEX egress_bindings_env ON egress_bindings (secret_id, resource_key, expose_as_env);
CREATE INDEX egress_bindings_resource ON egress_bindings (tenant_id, resource_key);

CREATE TABLE egress_policies (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT,
    resource_id TEXT,
    resource_type TEXT,
    resource_key TEXT NOT NULL,
    mode TEXT NOT NULL,
    default_action TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX egress_policies_resource ON egress_policies (tenant_id, resource_key);

CREATE TABLE egress_rules (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    policy_id TEXT NOT NULL REFERENCES egress_policies(id) ON DELETE CASCADE,
    pattern TEXT NOT NULL,
    kind TEXT NOT NULL,
    method TEXT,
    path_glob TEXT,
    action TEXT NOT NULL,
    warn_only BIGINT NOT NULL,
    priority BIGINT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX egress_rules_policy ON egress_rules (policy_id);

CREATE TABLE egress_audit (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    workspace_id TEXT,
    owner_user_id TEXT,
    external_user_id TEXT,
    external_workspace_id TEXT,
    resource_id TEXT,
    resource_type TEXT,
    host TEXT NOT NULL,
    method TEXT,
    path TEXT,
    sni TEXT,
    mode TEXT,
    remote_addr TEXT,
    action TEXT NOT NULL,
    rejected_by TEXT,
    status_code BIGINT,
    duration_ms BIGINT,
    bytes_in BIGINT,
    bytes_out BIGINT,
    error_message TEXT,
    request_transforms TEXT NOT NULL,
    response_transforms TEXT NOT NULL,
    mcp TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX egress_audit_tenant ON egress_audit (tenant_id, created_at, id);
CREATE INDEX egress_audit_resource ON egress_audit (tenant_id, resource_id, created_at);
CREATE INDEX egress_audit_created ON egress_audit (created_at);

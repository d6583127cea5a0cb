-- Custom domains of computers and deployments (spec "Custom domain", contract §12).
-- Exactly one of computer_id / deployment_id is set. An FQDN is unique among the
-- domains not removed (a removed row is kept for its history and frees the name).
-- deployment_id has no foreign key: deployments live in their own part's table.

CREATE TABLE custom_domains (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    workspace_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    computer_id TEXT,
    deployment_id TEXT,
    fqdn TEXT NOT NULL,
    status TEXT NOT NULL,
    verification_target TEXT NOT NULL,
    verified_at TEXT,
    tls_issued_at TEXT,
    dns_error TEXT,
    external_workspace_id TEXT,
    external_user_id TEXT,
    external_project_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    CHECK ((computer_id IS NULL) <> (deployment_id IS NULL))
);
CREATE UNIQUE INDEX custom_domains_fqdn ON custom_domains (fqdn) WHERE status <> 'removed';
CREATE INDEX custom_domains_tenant ON custom_domains (tenant_id, status);
CREATE INDEX custom_domains_computer ON custom_domains (computer_id);
CREATE INDEX custom_domains_deployment ON custom_domains (deployment_id);

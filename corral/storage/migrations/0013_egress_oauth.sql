-- OAuth connect (issue 15, contract §11): providers a tenant's admin registered over
-- the operator's (`CORRAL_OAUTH_PROVIDERS`), and the flows started against them.
--
-- A provider's `client_secret` and a flow's refresh token are sealed with the node's
-- SecretBox (bound to tenant and row id). A flow row is found by its `state`.

CREATE TABLE egress_oauth_providers (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    name TEXT NOT NULL,
    client_id TEXT NOT NULL,
    client_secret {blob} NOT NULL,
    authorize_url TEXT NOT NULL,
    token_url TEXT NOT NULL,
    scopes TEXT NOT NULL,
    allowed_hosts TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX egress_oauth_providers_key ON egress_oauth_providers (tenant_id, provider);

CREATE TABLE egress_oauth_flows (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    state TEXT NOT NULL,
    provider TEXT NOT NULL,
    user_id TEXT,
    is_admin BIGINT NOT NULL,
    scope TEXT NOT NULL,
    owner_user_id TEXT,
    expose_as_env TEXT,
    redirect_uri TEXT NOT NULL,
    code_verifier TEXT NOT NULL,
    status TEXT NOT NULL,
    secret_id TEXT,
    error TEXT,
    refresh_token {blob},
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX egress_oauth_flows_state ON egress_oauth_flows (state);
CREATE INDEX egress_oauth_flows_secret ON egress_oauth_flows (tenant_id, secret_id);

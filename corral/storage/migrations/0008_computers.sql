CREATE TABLE computers (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    owner_user_id TEXT,
    name TEXT NOT NULL,
    slug TEXT NOT NULL UNIQUE,
    template_type TEXT NOT NULL,
    size TEXT NOT NULL,
    status TEXT NOT NULL,
    instance_id TEXT NOT NULL UNIQUE,
    vm_id TEXT,
    region TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    external_workspace_id TEXT,
    external_user_id TEXT,
    external_project_id TEXT,
    selected_apps TEXT NOT NULL,
    settings TEXT NOT NULL,
    ai_config TEXT NOT NULL,
    agent_session_id TEXT,
    agent_status TEXT,
    agent_runtime_profile_id TEXT,
    resolution TEXT NOT NULL,
    auto_stop BIGINT NOT NULL,
    error TEXT,
    cloned_from TEXT,
    last_activity_at TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX computers_tenant ON computers (tenant_id, status);
CREATE INDEX computers_status ON computers (status);
CREATE TABLE computer_env (
    computer_id TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value {blob} NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (computer_id, name)
);
CREATE TABLE computer_metrics (
    computer_id TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    ts TEXT NOT NULL,
    cpu_percent DOUBLE PRECISION NOT NULL,
    memory_percent DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (computer_id, ts)
);

-- Agent runs (contract §14): the run record, its durable events (kept as long as the
-- run, unlike the 15-minute event log) and its artifacts, whose bytes live in the
-- blob store under their SHA-256.

CREATE TABLE agent_runs (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT,
    workspace_id TEXT,
    agent_run_group_id TEXT,
    parent_agent_run_id TEXT,
    orchestration_role TEXT,
    target_kind TEXT NOT NULL,
    target_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT,
    prompt TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL,
    timeout_seconds BIGINT NOT NULL,
    agent_runtime_profile_id TEXT,
    status TEXT NOT NULL,
    exit_code BIGINT,
    output TEXT NOT NULL,
    stderr TEXT NOT NULL,
    output_truncated BIGINT NOT NULL DEFAULT 0,
    stderr_truncated BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    metadata TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX agent_runs_tenant ON agent_runs (tenant_id, created_at, id);
CREATE INDEX agent_runs_target ON agent_runs (target_id, status);
CREATE INDEX agent_runs_status ON agent_runs (status);

CREATE TABLE agent_run_events (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES agent_runs(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    target_id TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX agent_run_events_run ON agent_run_events (run_id, id);
CREATE INDEX agent_run_events_target ON agent_run_events (target_id, id);

CREATE TABLE agent_run_artifacts (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES agent_runs(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    path TEXT NOT NULL,
    name TEXT NOT NULL,
    size_bytes BIGINT,
    content_type TEXT,
    status TEXT NOT NULL,
    sha256 TEXT,
    persisted BIGINT NOT NULL DEFAULT 0,
    storage_backend TEXT,
    persisted_at TEXT,
    error TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX agent_run_artifacts_run ON agent_run_artifacts (run_id, created_at);

CREATE TABLE sandbox_env (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value {blob} NOT NULL,
    encrypted INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, key)
);
CREATE TABLE sandbox_processes (
    id TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    cmd TEXT NOT NULL,
    cwd TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    error TEXT,
    final_logs TEXT,
    log_seq BIGINT NOT NULL DEFAULT 0,
    started_at TEXT NOT NULL,
    exited_at TEXT,
    updated_at TEXT NOT NULL
);
CREATE INDEX sandbox_processes_sandbox ON sandbox_processes (sandbox_id, started_at);
CREATE INDEX sandbox_processes_status ON sandbox_processes (status);
CREATE INDEX sandboxes_idle ON sandboxes (status, last_activity_at)

-- CUA sessions (contract §10): a computer-use agent's run on one computer's desktop.
-- Owned by the computer: deleting it deletes them. Their actions are events
-- (cua.action, cua.screenshot, cua.ended) in the event log, not rows here.
CREATE TABLE computer_cua_sessions (
    id TEXT PRIMARY KEY,
    computer_id TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    status TEXT NOT NULL,
    task TEXT,
    metadata TEXT NOT NULL,
    action_count BIGINT NOT NULL,
    created_at TEXT NOT NULL,
    ended_at TEXT
);
CREATE INDEX computer_cua_sessions_computer ON computer_cua_sessions (computer_id, created_at)

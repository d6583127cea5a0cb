-- Snapshots of computers' files (contract section 10). A row stays after its
-- snapshot is deleted (status `deleted`, so that a second delete is 409) and goes
-- with its computer. `size_bytes` and `ready_at` are null until the copy is made.
CREATE TABLE computer_snapshots (
    id TEXT PRIMARY KEY,
    computer_id TEXT NOT NULL REFERENCES computers(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    size_bytes BIGINT,
    created_at TEXT NOT NULL,
    ready_at TEXT,
    error TEXT
);
CREATE INDEX computer_snapshots_computer ON computer_snapshots (computer_id, created_at);
CREATE INDEX computer_snapshots_status ON computer_snapshots (status);
-- The snapshot a computer was created from, so that a provisioning cut short by a
-- restart copies its files again.
ALTER TABLE computers ADD COLUMN from_snapshot_id TEXT;

-- Placement (issue 30, `corral.actors.nodes.placement`): what each node lets be placed
-- on it, written with its heartbeat, and the claims that hold room for a resource
-- being created until its row exists.
-- A node's limits: instance-backed resources it hosts (0: no limit), the sum of their
-- sizes' memory (0: no limit), and the free disk below which it takes nothing new.
ALTER TABLE nodes ADD COLUMN max_instances BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN max_memory_mb BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN disk_reserve_mb BIGINT NOT NULL DEFAULT 0;
-- One row per resource being created on `node` (`kind`: its table): written with the
-- room check in one transaction (under an advisory lock), given the resource's id
-- before its row is written (from then on the row counts instead), deleted when the
-- create ends, and ignored after `expires_at` (a node that died mid-create).
CREATE TABLE node_claims (
    id TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    memory_mb BIGINT NOT NULL,
    resource_id TEXT,
    expires_at TEXT NOT NULL
);
CREATE INDEX node_claims_node ON node_claims (node)

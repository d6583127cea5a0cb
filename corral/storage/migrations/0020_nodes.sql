-- The nodes of a cluster (contract §20): one row per node name, written by that node's
-- actor (its heartbeat) and by an operator's drain. `lost` is not stored: a node is
-- lost when its heartbeat is older than the registry's limit, whoever looks.
CREATE TABLE nodes (
    name TEXT PRIMARY KEY,
    advertise_url TEXT NOT NULL,
    region TEXT NOT NULL,
    state TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    started_at TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    cores BIGINT NOT NULL,
    memory_mb BIGINT NOT NULL,
    disk_free_mb BIGINT NOT NULL,
    instances BIGINT NOT NULL,
    pooled BIGINT NOT NULL,
    memory_mb_used BIGINT NOT NULL,
    templates TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX nodes_heartbeat ON nodes (heartbeat_at)

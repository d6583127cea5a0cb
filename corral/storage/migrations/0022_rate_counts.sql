-- Rate-limit counts the nodes of a cluster share (issue 30, `corral.storage.rate_counts`).
-- One row per bucket (a key, a session, a client IP) and fixed one-minute window: the
-- hits every node let through, added in batches every ~200 ms, and the bucket's limit
-- (so that a node can learn of a bucket near its limit before serving it). Rows of
-- windows that ended are deleted. A SQLite store (one node) never writes here.
CREATE TABLE rate_counts (
    bucket TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    hits BIGINT NOT NULL,
    limit_rpm BIGINT NOT NULL,
    PRIMARY KEY (bucket, window_start)
);
CREATE INDEX rate_counts_window ON rate_counts (window_start);
-- The nodes that shared counts lately: how many ways the rest of a window is split.
CREATE TABLE rate_count_nodes (
    node TEXT PRIMARY KEY,
    seen_ms BIGINT NOT NULL
)

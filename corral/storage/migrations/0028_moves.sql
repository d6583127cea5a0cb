-- Resources moving off a draining node (issue 30): the node that had a stopped sandbox
-- or computer packed its files into the blob store and made `to_node` its home; that
-- node makes its instance from the archive, then deletes the row. `nodes.moving` says
-- what a drain moves: `stopped`, `all` (running ones too), or null (nothing).
CREATE TABLE moves (
    resource_type TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    from_node TEXT NOT NULL,
    to_node TEXT NOT NULL,
    archive_sha256 TEXT NOT NULL,
    start_after BIGINT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (resource_type, resource_id)
);
CREATE INDEX moves_to_node ON moves (to_node);
ALTER TABLE nodes ADD COLUMN moving TEXT

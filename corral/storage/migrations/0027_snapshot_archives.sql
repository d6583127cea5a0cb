-- A computer snapshot kept on more than one node (issue 30): the SHA-256 of its archive
-- (the snapshot's manifest and files as one tar) in the blob store, which another node
-- holds a copy of, so that the snapshot outlives its node. Null: only its node has it.
ALTER TABLE computer_snapshots ADD COLUMN archive_sha256 TEXT

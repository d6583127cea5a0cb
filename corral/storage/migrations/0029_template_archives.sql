-- A tenant's template layer kept for every node (issue 30): the SHA-256 of the build's
-- layer as one archive in the blob store, which another node holds a copy of, so that a
-- sandbox of the template can start on any node. Null: only the node that built it has it.
ALTER TABLE sandbox_template_builds ADD COLUMN archive_sha256 TEXT

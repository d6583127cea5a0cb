-- A tenant's template on every node (issue 30): the SHA-256 of the build's layer as one
-- archive in the blob store, which another node holds a copy of, so that a sandbox of
-- the template can start on any node (null: only the node that built it has it); and
-- the node that runs the build (its actor and its instance), which requests for the
-- build are forwarded to and which a lost node's build is taken over from. A version's
-- `node` runs its publish: only that node's restart (or its loss) cuts the publish off.
ALTER TABLE sandbox_template_builds ADD COLUMN archive_sha256 TEXT;
ALTER TABLE sandbox_template_builds ADD COLUMN node TEXT;
ALTER TABLE deployment_versions ADD COLUMN node TEXT

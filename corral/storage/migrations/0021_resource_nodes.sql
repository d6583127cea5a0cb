-- Each instance-backed resource names the node that hosts it (contract §20: `node`).
-- Rows made before this are null until their node claims them (a SQLite store's one
-- node does when it joins).
ALTER TABLE sandboxes ADD COLUMN node TEXT;
ALTER TABLE computers ADD COLUMN node TEXT;
ALTER TABLE databases ADD COLUMN node TEXT;
CREATE INDEX sandboxes_node ON sandboxes (node);
CREATE INDEX computers_node ON computers (node);
CREATE INDEX databases_node ON databases (node)

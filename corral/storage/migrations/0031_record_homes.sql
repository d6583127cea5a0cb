-- The home of a resource that has no instance (issue 30): the one node whose actor
-- owns the row. A deployment's and a custom domain's actor runs only there; another
-- node that needs it moves the home first (`corral.actors.nodes.homed`). Null until a
-- node first activates it.
ALTER TABLE deployments ADD COLUMN node TEXT;
ALTER TABLE custom_domains ADD COLUMN node TEXT

-- Cluster-wide leases (issue 30, `corral.actors.nodes.leases`): work that must run on one
-- node at a time (taking over a lost node's resources, the egress audit prune). A row
-- per lease: the node holding it and until when (ISO 8601, the holder's clock, as
-- heartbeats are). A node takes a lease that is free or expired, and renews its own.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- Instances a lost node still runs that are no longer its own (`corral.actors.nodes.lost`):
-- written when a surviving node takes a resource over, read by the lost node when it
-- returns, which destroys each one (its record may be gone by then) and the row.
CREATE TABLE lost_instances (
    node TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    lost_at TEXT NOT NULL,
    PRIMARY KEY (node, instance_id)
)

-- Network policies of computers and sandboxes (contract §11): one row per resource
-- whose policy is not the default `unrestricted`. `rules` is a JSON array of
-- {host, port, protocol}. Written by the resource's actor; removed with the resource.
CREATE TABLE instance_network_policies (
    resource_id TEXT PRIMARY KEY,
    resource_type TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    mode TEXT NOT NULL,
    rules TEXT NOT NULL,
    updated_at TEXT NOT NULL
)

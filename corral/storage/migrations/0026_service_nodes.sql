-- Deployment services have a home too (issue 30): the node that booted the service's
-- instance, where its actor runs and its preview requests are relayed. Rows made
-- before this are null until their node claims them (a SQLite store's one node does
-- when it joins); on PostgreSQL a null one is served wherever it is asked, as before.
ALTER TABLE deployment_services ADD COLUMN node TEXT;
CREATE INDEX deployment_services_node ON deployment_services (node)

-- A promote that wakes a deployment service another node runs (issue 30): the node that
-- serves the promote asks for the wake here, and the service's node starts it.
ALTER TABLE deployment_services ADD COLUMN wake_requested_at TEXT

-- Where each node's preview router takes requests relayed by the other nodes' routers
-- (issue 30, `corral.actors.previews.remote`): `--advertise-preview`, written when the
-- node joins. Empty: the node's instances are previewed only through its own router.
ALTER TABLE nodes ADD COLUMN advertise_preview_url TEXT NOT NULL DEFAULT ''

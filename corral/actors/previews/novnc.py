"""noVNC's files, served by the preview router itself on every computer host.

The files are Debian's noVNC package as the desktop template installed it
(`<templates>/desktop/rootfs/usr/share/novnc`), so page and RFB server always come
from the same build and nothing is fetched from a CDN. Serving them here rather than
from each instance's websockify keeps a page load (about 60 small files, many at
once) off the instance and off websockify's one-request-per-connection web server;
only the RFB WebSocket goes to the instance. Files are read once and kept in memory
(the whole package is about 1 MB).
"""

from __future__ import annotations

from pathlib import Path

from corral.net.preview import Reply, page
from corral.static_files import StaticFiles


class NoVncFiles:
    def __init__(self, root: Path) -> None:
        self.files = StaticFiles(root)

    async def reply(self, path: str) -> Reply:
        """The file at URL path `path`, or a 404 page."""
        found = await self.files.get(path)
        if found is None:
            return page(404, "not_found", "Not found", f"The desktop page has no file {path}.")
        headers = (("Cache-Control", "public, max-age=3600"), ("X-Content-Type-Options", "nosniff"), ("ETag", found.etag))
        return Reply(200, found.body, headers, found.content_type)  # the router leaves the body out for HEAD

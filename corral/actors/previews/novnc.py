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

import mimetypes
import posixpath
from pathlib import Path

import trio

from corral.net.preview import Reply, page

CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}
"""ES modules load only with a JavaScript type; the rest as the platform's mimetypes say."""
MAX_FILE = 4 * 1024 * 1024


class NoVncFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, tuple[bytes, str] | None] = {}

    async def reply(self, path: str) -> Reply:
        """The file at URL path `path`, or a 404 page."""
        found = self._cache.get(path)
        if path not in self._cache:
            found = await trio.to_thread.run_sync(self._read, path)
            if len(self._cache) < 1000:
                self._cache[path] = found
        if found is None:
            return page(404, "not_found", "Not found", f"The desktop page has no file {path}.")
        body, content_type = found
        headers = (("Cache-Control", "public, max-age=3600"), ("X-Content-Type-Options", "nosniff"))
        return Reply(200, body, headers, content_type)  # the router leaves the body out for HEAD

    def _read(self, path: str) -> tuple[bytes, str] | None:
        relative = posixpath.normpath(path).lstrip("/")
        if relative.startswith("..") or not relative or relative == ".":
            return None
        try:
            root = self.root.resolve(strict=True)
            target = (root / relative).resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        if root not in target.parents or not target.is_file() or target.stat().st_size > MAX_FILE:
            return None
        suffix = target.suffix.lower()
        content_type = CONTENT_TYPES.get(suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return target.read_bytes(), content_type

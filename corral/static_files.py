"""Files served as they are on disk: the web console's page, modules and vendored
libraries (`corral/http/console/`, by the API) and noVNC's files (by the preview router).

Files are read once and kept in memory (the whole console is about 1.2 MB), each with
an ETag (a digest of its bytes) so that a browser revalidates with one cheap 304
instead of downloading again. Paths are resolved inside the root: `..`, absolute
paths and symbolic links leading outside are not found.
"""

from __future__ import annotations

import hashlib
import mimetypes
import posixpath
from dataclasses import dataclass
from pathlib import Path

import trio

CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
    ".md": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    "": "text/plain; charset=utf-8",
}
"""ES modules load only with a JavaScript type; licence files (no suffix) are text."""
MAX_FILE = 4 * 1024 * 1024
MAX_CACHED = 1000


@dataclass(frozen=True, slots=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


class StaticFiles:
    """The files under `root`, by URL path relative to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, StaticFile | None] = {}

    async def get(self, path: str) -> StaticFile | None:
        """The file at `path` (relative, `/`-separated), or None when there is none."""
        if path in self._cache:
            return self._cache[path]
        found = await trio.to_thread.run_sync(self._read, path)
        if len(self._cache) < MAX_CACHED:
            self._cache[path] = found
        return found

    def _read(self, path: str) -> StaticFile | None:
        relative = posixpath.normpath("/" + path).lstrip("/")
        if not relative or relative == "." or "\\" in relative:
            return None
        try:
            root = self.root.resolve(strict=True)
            target = (root / relative).resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        if root not in target.parents or not target.is_file() or target.stat().st_size > MAX_FILE:
            return None
        body = target.read_bytes()
        suffix = target.suffix.lower()
        content_type = CONTENT_TYPES.get(suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return StaticFile(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')

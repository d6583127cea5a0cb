"""One static version as the router serves it: files of an unpacked artifact.

The artifact is unpacked once into `<data>/sites/<sha256>/` (shared by every
version with the same content); the manifest gives each file's size and content
hash, so the router answers with an `ETag` of the content hash and `304` to a
matching `If-None-Match` without touching the disk. Small files are kept in memory
after their first read (a bounded cache shared by every site of the node); larger
ones are streamed from the disk by the router, never read whole.
"""

from __future__ import annotations

import mimetypes
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import trio

from corral.net.preview import Reply, page

CACHE_FILE_LIMIT = 512 * 1024
CACHE_TOTAL_LIMIT = 256 * 1024 * 1024
EXTRA_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm", ".svg": "image/svg+xml", ".webp": "image/webp", ".woff2": "font/woff2", ".json": "application/json", ".map": "application/json"}
TEXT_TYPES = ("text/", "application/javascript", "application/json", "image/svg+xml")


def content_type(path: str) -> str:
    suffix = posixpath.splitext(path)[1].lower()
    kind = EXTRA_TYPES.get(suffix) or mimetypes.guess_type(path)[0] or "application/octet-stream"
    return f"{kind}; charset=utf-8" if kind.startswith(TEXT_TYPES) else kind


@dataclass(frozen=True, slots=True)
class StaticFile:
    size: int
    etag: str
    content_type: str


class FileCache:
    """Bytes of small files by (artifact, path), first in first out within a byte budget."""

    def __init__(self, limit: int = CACHE_TOTAL_LIMIT) -> None:
        self.limit = limit
        self.size = 0
        self._data: dict[tuple[str, str], bytes] = {}

    def get(self, key: tuple[str, str]) -> bytes | None:
        return self._data.get(key)

    def put(self, key: tuple[str, str], data: bytes) -> None:
        while self._data and self.size + len(data) > self.limit:
            _, old = self._data.popitem()
            self.size -= len(old)
        self._data[key] = data
        self.size += len(data)


def _read(path: Path) -> bytes:
    return path.read_bytes()


class StaticSite:
    def __init__(self, sha256: str, root: Path, manifest: dict[str, Any], cache: FileCache) -> None:
        self.sha256 = sha256
        self.root = root
        self.cache = cache
        self.files: dict[str, StaticFile] = {
            entry["path"]: StaticFile(int(entry["size_bytes"]), f'"{entry["sha256"]}"', content_type(entry["path"]))
            for entry in manifest.get("files", [])
        }

    def _lookup(self, path: str) -> tuple[str, StaticFile] | None:
        if path in ("", "."):
            candidates = ["index.html"]
        elif path.endswith("/"):
            candidates = [path + "index.html"]
        else:
            candidates = [path, path + "/index.html", path + ".html"]
        for candidate in candidates:
            found = self.files.get(candidate.lstrip("/"))
            if found is not None:
                return candidate.lstrip("/"), found
        return None

    async def reply(self, method: str, target: str, if_none_match: str | None) -> Reply:
        if method not in ("GET", "HEAD"):
            return Reply(405, b"method not allowed\n", (("Allow", "GET, HEAD"),), "text/plain; charset=utf-8")
        raw = unquote(target.partition("?")[0].partition("#")[0])
        trailing = raw.endswith("/")
        path = posixpath.normpath("/" + raw).lstrip("/")
        if trailing and path:
            path += "/"
        found = self._lookup(path)
        if found is None:
            missing = self.files.get("404.html")
            if missing is not None:
                body = await self._body("404.html", missing)
                return Reply(404, body, (("Cache-Control", "no-cache"),), missing.content_type)
            return page(404, "not_found", "Not found", f"This site has no page at {raw or '/'}.")
        name, info = found
        headers = (("ETag", info.etag), ("Cache-Control", "public, max-age=0, must-revalidate"))
        if if_none_match is not None and (if_none_match.strip() == "*" or info.etag in _tags(if_none_match)):
            return Reply(304, b"", headers, info.content_type)
        if info.size > CACHE_FILE_LIMIT:  # streamed from the disk by the router
            return Reply(200, b"", headers, info.content_type, file=str(self.root / name))
        body = await self._body(name, info)
        return Reply(200, body, headers, info.content_type)

    async def _body(self, name: str, info: StaticFile) -> bytes:
        key = (self.sha256, name)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        data = await trio.to_thread.run_sync(_read, self.root / name)
        if info.size <= CACHE_FILE_LIMIT:
            self.cache.put(key, data)
        return data


def _tags(header: str) -> list[str]:
    return [tag.strip().removeprefix("W/") for tag in header.split(",")]

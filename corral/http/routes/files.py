"""The files API of the specification's "Files (computer)" section, for any instance.

One implementation serves sandboxes and computers: `mount_file_routes` registers the
eleven routes below a resource path with a function that turns the path parameters
into the `InstanceFiles` handle its actor hands out (raising the resource's own
not-found or not-running errors). Path rules (allowed prefixes, `..`, `~`, symlinks) are enforced
by the guest agent, inside the instance, where symlinks resolve as they really are.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import posixpath
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any, Literal
from urllib.parse import quote

from quart import Response
from werkzeug.exceptions import RequestEntityTooLarge

from corral.actors.instances import InstanceFiles
from corral.errors import ApiError, invalid_body
from corral.models import Rule, anchored, model

from ..context import RequestContext
from ..replies import Reply, raw
from ..routing import Router

MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_EXPORT_BYTES = MAX_UPLOAD_BYTES
"""An export answers the file whole, in base64 inside JSON: larger files are downloaded
(streamed, of any size)."""
DEFAULT_DIR = "/workspace"

Resolver = Callable[[RequestContext, str], Awaitable[InstanceFiles]]


def missing_path() -> ApiError:
    return ApiError(400, "MISSING_PATH", "path is required")


PATH = r"[/~][^\x00]*"
"""A path from the root or the home directory, without NUL: what `require_path` takes."""
MODE = "[0-7]{1,4}"
"""A file mode: up to four octal digits."""


def require_path(value: Any, name: str = "path") -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        if name == "path":
            raise missing_path()
        raise ApiError(400, "MISSING_PARAM", f"{name} is required")
    if not isinstance(value, str):
        raise ApiError(400, "INVALID_PATH", f"{name} must be a string")
    if not re.fullmatch(PATH, value):
        problem = "must not contain NUL bytes" if value.startswith(("/", "~")) else "must be an absolute path"
        raise ApiError(400, "INVALID_PATH", f"{name} {problem}")
    return value


def missing_file_field(names: list[str]) -> ApiError:
    """The files section's own codes for an absent field: `MISSING_PATH`, `MISSING_MODE`."""
    name = names[0]
    if name == "path":
        return missing_path()
    if name == "mode":
        return ApiError(400, "MISSING_MODE", "mode is required")
    return ApiError(400, "MISSING_PARAM", f"{name} is required")


def _path(name: str = "path") -> Rule:
    """A path field: absolute, no NUL; anything else is `400 INVALID_PATH` (`require_path`)."""
    return Rule(strip=False, parse=lambda value: require_path(value, name), schema={"type": "string", "pattern": anchored(PATH)})


Path = Annotated[Any, _path()]


@model(missing=missing_file_field)
class WriteFile:
    path: Path
    content: Annotated[str, Rule(strip=False, allow_empty=True)]
    encoding: Annotated[Literal["utf8", "utf-8", "base64"], Rule(message="must be utf8 or base64")] = "utf8"


@model(missing=missing_file_field)
class OnePath:
    path: Path


@model(missing=missing_file_field)
class DeletePath:
    """The path may come in the body or, for clients that send no DELETE body, the query."""

    path: Path = None


@model(missing=missing_file_field)
class MakeDirectory:
    path: Path
    recursive: bool = False


@model(missing=missing_file_field)
class TwoPaths:
    source: Annotated[Any, _path("source")]
    destination: Annotated[Any, _path("destination")]


@model(missing=missing_file_field)
class ChangeMode:
    path: Path
    mode: Annotated[Any, Rule(schema={"type": "string", "pattern": anchored(MODE), "description": "octal, such as 755 or 0644"})]


def too_large() -> ApiError:
    return ApiError(413, "FILE_TOO_LARGE", f"file exceeds the {MAX_UPLOAD_BYTES // (1024 * 1024)} MB upload limit")


def content_type_for(path: str) -> str:
    guessed, _ = mimetypes.guess_type(path)
    return guessed or "application/octet-stream"


def attachment(filename: str) -> str:
    """`Content-Disposition` for any name a tenant's file may have: an ASCII fallback
    without quotes or control characters (a newline would end the header), and the
    exact name in `filename*` (its bytes, whatever they are, percent-encoded; curl -J and
    older clients take the stand-in, where `_` replaces what ASCII cannot say)."""
    ascii_name = re.sub(r'[^\x20-\x7e]|["\\]', "_", filename)
    exact = quote(filename.encode("utf-8", "surrogateescape"))
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{exact}"


def mount_file_routes(router: Router, base: str, resolve: Resolver, *, read_scope: str, write_scope: str, noun: str) -> None:
    """Register the files API below `base` (e.g. `/sandboxes/{id}`)."""
    prefix = f"{base}/files"
    action = f"{noun}s.files"

    @router.post(
        f"{prefix}/upload",
        summary=f"Upload a file into the {noun} (multipart: file, path; 10 MB)",
        scope=write_scope,
        action=f"{action}.upload",
        status=201,
    )
    async def upload(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        try:
            parts = await ctx.request.files
            form = await ctx.request.form
        except RequestEntityTooLarge:
            raise too_large() from None
        storage = parts.get("file")
        if storage is None:
            raise ApiError(400, "MISSING_FILE", "multipart part 'file' is required")
        data = storage.read(MAX_UPLOAD_BYTES + 1)
        if len(data) > MAX_UPLOAD_BYTES:
            raise too_large()
        filename = posixpath.basename(storage.filename or "upload") or "upload"
        target = form.get("path") or f"{DEFAULT_DIR}/"
        target = require_path(target)
        if target.endswith("/"):
            target = target + filename
        written = await files.write(target, data)
        path = written.get("path", target)
        return raw({"success": True, "file": {"path": path, "filename": posixpath.basename(path), "size_bytes": len(data)}}, 201)

    @router.post(
        f"{prefix}/write",
        summary="Write a file from a string (encoding utf8 or base64)",
        scope=write_scope,
        action=f"{action}.write",
        status=201,
        request=WriteFile,
    )
    async def write(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        body = await ctx.body(WriteFile)
        path, content = body.path, body.content
        if body.encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                raise invalid_body("content is not valid base64") from None
        else:
            data = content.encode()
        if len(data) > MAX_UPLOAD_BYTES:
            raise too_large()
        written = await files.write(path, data)
        return raw({"success": True, "file": {"path": written.get("path", path), "size_bytes": len(data)}}, 201)

    @router.get(f"{prefix}", summary="List a directory (default /workspace)", scope=read_scope, query={"path": "directory"})
    async def list_dir(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        path = require_path(ctx.query("path") or DEFAULT_DIR)
        listing = await files.list(path)
        return raw({"files": listing["files"], "path": listing.get("path", path)})

    @router.get(
        f"{prefix}/download",
        summary="Download a file (Content-Disposition set, Content-Type by extension)",
        scope=read_scope,
        query={"path": "file to download (required)"},
        content_type="application/octet-stream",
    )
    async def download(ctx: RequestContext, id: str) -> Response:
        files = await resolve(ctx, id)
        path = require_path(ctx.query("path"))
        stream = await files.open(path)
        filename = posixpath.basename(stream.path or path) or "download"

        async def body() -> AsyncIterator[bytes]:
            async with aclosing(stream.chunks):
                async for chunk in stream.chunks:
                    yield chunk

        response = Response(
            body(),
            status=200,
            headers={
                "Content-Disposition": attachment(filename),
                "Content-Type": content_type_for(filename),
                "Content-Length": str(stream.size_bytes),
            },
        )
        response.timeout = None  # quart: a large file takes what it takes
        return response

    @router.post(
        f"{prefix}/export",
        summary="A file's bytes as base64 with its metadata",
        scope=read_scope,
        action=f"{action}.export",
        request=OnePath,
    )
    async def export(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        path = (await ctx.body(OnePath)).path
        try:
            content = await files.read(path, MAX_EXPORT_BYTES)
        except ApiError as exc:
            if exc.code != "FILE_TOO_LARGE":
                raise
            raise ApiError(413, "FILE_TOO_LARGE", f"{exc.message} by export (download streams a file of any size)") from None
        if content.size_bytes == 0:
            raise ApiError(404, "FILE_NOT_FOUND", "file is empty")
        filename = posixpath.basename(content.path or path)
        return raw(
            {
                "success": True,
                "file": {
                    "path": content.path or path,
                    "filename": filename,
                    "size_bytes": content.size_bytes,
                    "content_type": content_type_for(filename),
                    "modified_at": content.modified_at,
                },
                "content_base64": base64.b64encode(content.data).decode(),
            }
        )

    @router.delete(
        f"{prefix}",
        summary="Delete a file or directory",
        scope=write_scope,
        action=f"{action}.delete",
        request=DeletePath,
    )
    async def delete(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        path = require_path((await ctx.body(DeletePath)).path or ctx.query("path"))
        result = await files.delete(path)
        return raw({"success": True, "path": result.get("path", path)})

    @router.get(f"{prefix}/stat", summary="A file's metadata", scope=read_scope, query={"path": "file (required)"})
    async def stat(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        return raw(await files.stat(require_path(ctx.query("path"))))

    @router.post(
        f"{prefix}/mkdir",
        summary="Create a directory",
        scope=write_scope,
        action=f"{action}.mkdir",
        status=201,
        request=MakeDirectory,
    )
    async def mkdir(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        body = await ctx.body(MakeDirectory)
        path = body.path
        result = await files.mkdir(path, recursive=body.recursive)
        return raw({"success": True, "path": result.get("path", path)}, 201)

    async def _two_paths(ctx: RequestContext) -> tuple[str, str]:
        body = await ctx.body(TwoPaths)
        return body.source, body.destination

    @router.post(f"{prefix}/rename", summary="Rename or move a file", scope=write_scope, action=f"{action}.rename", request=TwoPaths)
    async def rename(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        source, destination = await _two_paths(ctx)
        result = await files.rename(source, destination)
        return raw({"success": True, "source": result.get("source", source), "destination": result.get("destination", destination)})

    @router.post(
        f"{prefix}/copy",
        summary="Copy a single file (no directories)",
        scope=write_scope,
        action=f"{action}.copy",
        status=201,
        request=TwoPaths,
    )
    async def copy(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        source, destination = await _two_paths(ctx)
        result = await files.copy(source, destination)
        return raw({"success": True, "source": result.get("source", source), "destination": result.get("destination", destination)}, 201)

    @router.post(
        f"{prefix}/chmod",
        summary="Change a file's mode (octal string)",
        scope=write_scope,
        action=f"{action}.chmod",
        request=ChangeMode,
    )
    async def chmod(ctx: RequestContext, id: str) -> Reply:
        files = await resolve(ctx, id)
        body = await ctx.body(ChangeMode)
        path, mode = body.path, body.mode
        if isinstance(mode, int) and not isinstance(mode, bool):
            mode = f"{mode:o}" if mode > 0o777 else str(mode)
        if not isinstance(mode, str) or not re.fullmatch(MODE, mode):
            raise ApiError(400, "INVALID_MODE", "mode must be an octal string such as 755 or 0644")
        result = await files.chmod(path, mode)
        return raw({"success": True, "path": result.get("path", path), "mode": result.get("mode", mode)})

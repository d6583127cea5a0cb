"""A database server's log (`server.log`: PostgreSQL's own lines and the control plane's
notes on restarts and restores) as `{line, ts}` records, recent or followed."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from .store import DatabaseRecord

if TYPE_CHECKING:
    from .services import DatabaseServices

DEFAULT_TAIL = 200
MAX_TAIL = 5000
FOLLOW_POLL = 0.25
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?) UTC ")


def _ts(line: str, previous: str | None) -> str | None:
    match = _STAMP.match(line)
    if match is None:
        return previous
    day, clock = match.groups()
    if "." not in clock:
        clock += ".000"
    return f"{day}T{clock}Z"


def _records(lines: list[str], previous: str | None = None) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        previous = _ts(line, previous)
        out.append({"line": line, "ts": previous})
    return out


def _path(platform: DatabaseServices, row: DatabaseRecord) -> Path:
    return platform.databases.driver.log_path(row.id)


def _read_tail(path: Path, tail: int) -> tuple[list[str], int]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return [], 0
    lines = data.decode(errors="replace").splitlines()
    return (lines[-tail:] if tail else []), len(data)


async def recent_lines(platform: DatabaseServices, row: DatabaseRecord, tail: int) -> list[dict[str, Any]]:
    lines, _ = await trio.to_thread.run_sync(_read_tail, _path(platform, row), tail)
    return _records(lines)


async def follow_log(
    platform: DatabaseServices, row: DatabaseRecord, tail: int, *, idle: float = 15.0
) -> AsyncIterator[dict[str, Any] | None]:
    """The last `tail` lines, then each new line as it is written (until the file goes);
    None after each `idle` seconds without a line (a stream's heartbeat)."""
    path = _path(platform, row)
    lines, offset = await trio.to_thread.run_sync(_read_tail, path, tail)
    previous = None
    for record in _records(lines):
        previous = record["ts"]
        yield record
    pending = b""
    quiet = 0.0
    while True:
        await trio.sleep(FOLLOW_POLL)
        quiet += FOLLOW_POLL
        if quiet >= idle:
            quiet = 0.0
            yield None
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        if size < offset:
            offset = 0  # replaced (a restore keeps the file; a delete removes it)
        if size == offset:
            continue
        with open(path, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read(size - offset)
        offset += len(chunk)
        pending += chunk
        *complete, pending = pending.split(b"\n")
        quiet = 0.0
        for raw in complete:
            line = raw.decode(errors="replace")
            previous = _ts(line, previous)
            yield {"line": line, "ts": previous}

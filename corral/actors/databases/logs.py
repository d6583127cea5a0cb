"""A database server's log (`server.log`: PostgreSQL's own lines and the control plane's
notes on restarts and restores) as `{line, ts}` records, recent or followed."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from corral.vm.postgres import LOG_KEEP_BYTES, PostgresDriver, log_tail_bytes

from ..periodic import run_periodically
from .store import DatabaseRecord

if TYPE_CHECKING:
    from .services import DatabaseServices

log = logging.getLogger("corral.databases")

DEFAULT_TAIL = 200
MAX_TAIL = 5000
FOLLOW_POLL = 0.25
FOLLOW_READ = 1 << 20
"""A log written faster than it is followed is read a megabyte a poll."""
TRIM_SECONDS = 10.0
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
    """The last `tail` lines (of at most the log's last `LOG_KEEP_BYTES`), and the size."""
    try:
        data, size = log_tail_bytes(path, LOG_KEEP_BYTES)
    except FileNotFoundError:
        return [], 0
    lines = data.decode(errors="replace").splitlines()
    return (lines[-tail:] if tail else []), size


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
            offset = size  # cut to its last lines (`PostgresDriver.trim_logs`), which were sent already
        if size == offset:
            continue
        with open(path, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read(min(size - offset, FOLLOW_READ))
        offset += len(chunk)
        pending += chunk
        *complete, pending = pending.split(b"\n")
        quiet = 0.0
        for raw in complete:
            line = raw.decode(errors="replace")
            previous = _ts(line, previous)
            yield {"line": line, "ts": previous}


async def trim_logs_forever(
    servers: PostgresDriver, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """This node's servers' logs kept to a bounded size (`PostgresDriver.trim_logs`), every
    `TRIM_SECONDS`: a tenant's failing statements are each logged, and the log is on
    the node's disk."""

    async def round_() -> None:
        if cut := await trio.to_thread.run_sync(servers.trim_logs):
            log.info("cut %d database server log(s) to their last %d bytes", cut, LOG_KEEP_BYTES)

    await run_periodically(round_, lambda: TRIM_SECONDS, "trimming database server logs", task_status=task_status)

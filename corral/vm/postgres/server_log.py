"""A database server's `server.log`, kept to a bounded size and read from its end.

The server appends to it (its stderr, opened with `O_APPEND`), and so does every
client of the tenant's: each failed statement is logged with its text, and so is each
`RAISE WARNING` or `RAISE LOG`. The file is on the node's disk, beside the server's
own (which has a size; this file has none), so a loop of failing statements would
fill the node. `trim` keeps the file under `MAX_BYTES`: past it, the file is cut to
its last `KEEP_BYTES`, at a line's start, with a line that says so. Truncating in place
keeps the server's descriptor valid, and its appends land after the kept lines.
Readers take the end (`tail_bytes`), never the whole file.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

MAX_BYTES = 64 << 20
KEEP_BYTES = 16 << 20


def note_line(text: str) -> str:
    """A line of the control plane's own, stamped as PostgreSQL stamps its lines
    (`log_line_prefix`), so readers date it the same way."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{stamp} UTC [corral] LOG:  {text}\n"


def tail_bytes(path: Path, limit: int) -> tuple[bytes, int]:
    """At most the last `limit` bytes of the file, from a line's start (unless one line
    is longer), and the file's size then."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = max(0, size - limit)
        handle.seek(start)
        data = handle.read(size - start)
    if start > 0 and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]
    return data, size


def trim(path: Path, limit: int = MAX_BYTES, keep: int = KEEP_BYTES) -> int:
    """Cut the log to its last `keep` bytes when it is past `limit`; the bytes removed
    (0 when it was within the limit or is gone)."""
    try:
        if os.stat(path, follow_symlinks=False).st_size <= limit:
            return 0
        kept, size = tail_bytes(path, keep)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        os.ftruncate(fd, 0)
        removed = size - len(kept)
        note = note_line(f"the log passed {limit} bytes: its first {removed} bytes were removed")
        data = memoryview(note.encode() + kept)
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    return removed

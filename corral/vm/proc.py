"""What the host's /proc says of a process, for telling a live one from a reused pid."""

from __future__ import annotations


def process_start_time(pid: int) -> int | None:
    """The start time of `pid` (clock ticks since boot), None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])

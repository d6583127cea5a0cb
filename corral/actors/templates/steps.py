"""What a template build runs in its instance, and how its output becomes log lines.

Packages are installed with apt-get from Debian's archive (the instance reaches it
through its network like any sandbox), then the apt lists and caches are removed so
that the layer keeps only what was installed. Each setup command then runs as root
under `/bin/sh -c` in `/root`, with the template's env. The first step that exits
non-zero fails the build.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Awaitable, Callable

from corral.storage import utc_now_iso

PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{0,99}$")
STEP_TIMEOUT = 1800.0
"""Seconds one step (the install, or one setup command) may take."""
MAX_LINE = 4000
MAX_LINES = 20_000
"""Log lines a build keeps; past it a last line says the rest was dropped."""


def install_command(packages: list[str]) -> str:
    quoted = " ".join(shlex.quote(p) for p in packages)
    return (
        "export DEBIAN_FRONTEND=noninteractive; "
        "apt-get update -q -o Acquire::Retries=3 && "
        f"apt-get install -y -q --no-install-recommends -o Acquire::Retries=3 {quoted} && "
        "apt-get clean && rm -rf /var/lib/apt/lists/*"
    )


def steps(packages: list[str], setup: list[str]) -> list[tuple[str, str]]:
    """(what the log calls it, command) for each step, in order."""
    planned = [(f"apt-get install {' '.join(packages)}", install_command(packages))] if packages else []
    return planned + [(command, command) for command in setup]


Sink = Callable[[list[tuple[str, str]]], Awaitable[None]]


class LogWriter:
    """Output chunks in, whole lines out to `sink` as `(line, ts)` pairs."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.partial = ""
        self.written = 0

    async def line(self, text: str) -> None:
        await self._write([text])

    async def feed(self, chunk: str) -> None:
        text = self.partial + chunk
        *lines, self.partial = text.split("\n")
        if lines:
            await self._write(lines)

    async def flush(self) -> None:
        if self.partial:
            rest, self.partial = self.partial, ""
            await self._write([rest])

    async def _write(self, lines: list[str]) -> None:
        if self.written > MAX_LINES:
            return
        now = utc_now_iso()
        room = MAX_LINES - self.written
        batch = [(line.rstrip("\r")[:MAX_LINE], now) for line in lines[:room]]
        if len(lines) > room:
            batch.append(("... (log truncated)", now))
        self.written += len(batch)
        await self.sink(batch)

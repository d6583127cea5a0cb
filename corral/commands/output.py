"""How the CLI prints: tables for people, `--json` for scripts, one line per error.

Every command writes through a `Console`, so tests capture output without touching
`sys.stdout`, and `--json` switches every command at once."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["Console", "StatusProgress"]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


@dataclass
class Console:
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    as_json: bool = False

    def json(self, value: Any) -> None:
        self.out.write(json.dumps(value, indent=2, default=str) + "\n")
        self.out.flush()

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """Human-only information: on stderr, and not at all with --json."""
        if not self.as_json:
            self.err.write(text + "\n")
            self.err.flush()

    def error(self, text: str) -> None:
        self.err.write(f"error: {text}\n")
        self.err.flush()

    def table(self, rows: Iterable[Mapping[str, Any]], columns: Sequence[str], *, raw: Any = None) -> None:
        """Rows as an aligned table, or the server's JSON (`raw`, else the rows) with --json."""
        rows = list(rows)
        if self.as_json:
            self.json(raw if raw is not None else rows)
            return
        cells = [[_cell(row.get(column)) for column in columns] for row in rows]
        widths = [max([len(column), *(len(line[i]) for line in cells)]) for i, column in enumerate(columns)]
        self.line("  ".join(column.upper().ljust(widths[i]) for i, column in enumerate(columns)).rstrip())
        for line in cells:
            self.line("  ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip())

    def record(self, record: Mapping[str, Any], *, raw: Any = None) -> None:
        """One resource as `field  value` lines, or its JSON."""
        if self.as_json:
            self.json(raw if raw is not None else record)
            return
        width = max((len(key) for key in record), default=0)
        for key, value in record.items():
            self.line(f"{key.ljust(width)}  {_cell(value)}")


class StatusProgress:
    """A one-line display of a resource's status while the CLI waits for it: redrawn in
    place on a terminal, one line per change otherwise (logs, CI)."""

    FRAMES = "|/-\\"

    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.title = title
        self.started = time.monotonic()
        self.interactive = console.err.isatty() and not console.as_json
        self.last: str | None = None
        self.latest = ""
        self.ticks = 0

    def __call__(self, status: str | None) -> None:
        self.update(status or "?")

    def update(self, status: str) -> None:
        elapsed = time.monotonic() - self.started
        if self.interactive:
            self._draw(status, elapsed)
        elif status != self.last:
            self.console.note(f"{self.title}: {status} ({elapsed:.1f}s)")
        self.last = status

    def detail(self, line: str) -> None:
        """What the resource is doing now (a log line): beside the status on a terminal,
        as its own indented line otherwise."""
        self.latest = line
        if self.interactive:
            self._draw(self.last or "", time.monotonic() - self.started)
        else:
            self.console.note(f"  {line}")

    def _draw(self, status: str, elapsed: float) -> None:
        self.ticks += 1
        frame = self.FRAMES[self.ticks % len(self.FRAMES)]
        width = max(20, shutil.get_terminal_size().columns - len(self.title) - 30)
        text = f"{status} {self.latest}".strip()[:width]
        self.console.err.write(f"\r{frame} {self.title}: {text:<{width}} {elapsed:5.1f}s")
        self.console.err.flush()

    def finish(self, status: str | None = None) -> None:
        if status:
            self.update(status)
        if self.interactive:
            self.console.err.write("\n")
            self.console.err.flush()

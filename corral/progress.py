"""A terminal progress bar for long CLI work, fed by the lines the work prints.

Stages are recognised by substrings of those lines (mmdebstrap announces each phase
with an `I:` line), so the bar advances as the work really does. Without a terminal
it prints one line per stage instead of redrawing. The lines may come from another
thread (a publish's events): once `finish` returned, nothing more is written, so the
command's own last line (its result, or its error) stays last.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import TextIO

TEMPLATE_STAGES: tuple[tuple[str, str], ...] = (
    ("setting up", "preparing"),
    ("apt-get update", "reading package lists"),
    ("downloading packages", "downloading packages"),
    ("extracting archives", "extracting"),
    ("installing essential", "installing essential packages"),
    ("installing remaining", "installing packages"),
    ("cleaning package lists", "cleaning up"),
    ("success", "packing the template"),
    ("ready in", "done"),
)


class StageProgress:
    def __init__(self, title: str, stages: tuple[tuple[str, str], ...], stream: TextIO | None = None) -> None:
        self.title = title
        self.stages = stages
        self.stream = stream or sys.stderr
        self.index = -1
        self.label = "starting"
        self.started = time.monotonic()
        self.interactive = self.stream.isatty()
        self._lock = threading.Lock()
        self._finished = False

    def __call__(self, line: str) -> None:
        with self._lock:
            if not self._finished:
                self._advance(line)

    def _advance(self, line: str) -> None:
        lowered = line.lower()
        for position, (marker, label) in enumerate(self.stages):
            if position > self.index and marker in lowered:
                self.index, self.label = position, label
                if not self.interactive:
                    self.stream.write(f"{self.title}: [{position + 1}/{len(self.stages)}] {label}\n")
                break
        if self.interactive:
            self._draw()

    def _draw(self) -> None:
        width = max(10, min(40, shutil.get_terminal_size().columns - 50))
        done = (self.index + 1) / len(self.stages)
        filled = int(width * done)
        elapsed = time.monotonic() - self.started
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r{self.title} [{bar}] {done * 100:3.0f}% {elapsed:5.1f}s {self.label[:30]:<30}")
        self.stream.flush()

    def finish(self) -> None:
        with self._lock:
            if not self._finished:
                self._finished = True
                self._end()

    def _end(self) -> None:
        if self.interactive:
            self.index = len(self.stages) - 1
            self.label = "done"
            self._draw()
            self.stream.write("\n")
        self.stream.flush()

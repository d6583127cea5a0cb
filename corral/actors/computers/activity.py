"""Commands in flight per computer on this node (a leaf module: the node's services hold one)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator


class Activity:
    """Commands in flight per computer on this node: the idle watcher skips busy ones."""

    def __init__(self) -> None:
        self._running: Counter[str] = Counter()

    @contextlib.contextmanager
    def busy(self, computer_id: str) -> Iterator[None]:
        self._running[computer_id] += 1
        try:
            yield
        finally:
            self._running[computer_id] -= 1
            if self._running[computer_id] <= 0:
                del self._running[computer_id]

    def is_busy(self, computer_id: str) -> bool:
        return self._running.get(computer_id, 0) > 0

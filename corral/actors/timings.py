"""How long instance operations take (create, start, stop, exec, fork, wake, backup),
handed to whoever watches the node, without the actors knowing who that is.

The node's metrics register an observer on `Platform.operation_timings`; actors and
services wrap an operation in `timed(services, kind, operation)`. With no observer the
wrapper costs one attribute read: the exec path must not get slower for it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

OperationObserver = Callable[[str, str, str, float], None]
"""`(kind, operation, outcome, seconds)`; outcome is `ok` or `error`. Called on the
event loop: it must be quick and must not raise."""


class OperationTimings:
    """The observers of one node's instance operations."""

    def __init__(self) -> None:
        self.observers: list[OperationObserver] = []

    def record(self, kind: str, operation: str, outcome: str, seconds: float) -> None:
        for observer in self.observers:
            observer(kind, operation, outcome, seconds)


_NONE = OperationTimings()


@contextlib.contextmanager
def timed(services: Any, kind: str, operation: str) -> Iterator[None]:
    """Time the block for `services.operation_timings` (a node's `Platform`); an
    exception in the block is recorded as `error` and re-raised. Services without
    timings (a bare test system) record nothing."""
    timings: OperationTimings = getattr(services, "operation_timings", _NONE)
    if not timings.observers:
        yield
        return
    started = time.perf_counter()
    outcome = "error"
    try:
        yield
        outcome = "ok"
    finally:
        timings.record(kind, operation, outcome, time.perf_counter() - started)

"""Which sandbox events each stream carries.

Every sandbox event is on the bus with resource type `sandbox`. The events stream
carries the lifecycle and the structure of work (an exec started, a process
exited); the logs stream carries output lines. Exec output lines are on both, as
the specification lists them among the sandbox events.
"""

from __future__ import annotations

LOG_TYPES = (
    "sandbox.exec.stdout",
    "sandbox.exec.stderr",
    "sandbox.process.stdout",
    "sandbox.process.stderr",
)

EVENT_TYPES = (
    "sandbox.created",
    "sandbox.ready",
    "sandbox.started",
    "sandbox.stopped",
    "sandbox.idle",
    "sandbox.suspended",
    "sandbox.error",
    "sandbox.moved",
    "sandbox.destroyed",
    "sandbox.exec.*",
    "sandbox.preview.*",
    "sandbox.process.started",
    "sandbox.process.exited",
    "sandbox.process.killed",
)

"""A computer's logs (contract §10): its desktop services' output and its app installs'.

The guest agent runs the template's services (X server, window manager, the desktop
page's gateway) as background processes with the ids `svc-<name>`, and each app
install as `apps-install-…` (`apps.py`); it keeps their output line by line with a
timestamp. The logs are those lines, read from the agent, each with its `source`: the
service's name (`xserver`, `wm`, `gateway`) or `apps`. Nothing is copied to the
control plane: the lines live as long as the instance's agent (a restart starts
them afresh), bounded by the agent (10,000 lines per process).

`recent_lines` answers GET /logs. `follow` serves the stream: one task per source
follows the agent's own line stream, in the node's nursery, and hands lines to the
request through a channel. Each line carries a cursor (every source's last sequence
number), which is the stream's `Last-Event-ID`: a client that reconnects gets exactly
the lines after it. A stream ends when the computer stops, pauses or is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from corral.vm import AgentClient, ProcessNotFound, RuntimeErrorBase

from .apps import INSTALL_PROCESS_PREFIX
from .execution import agent_for
from .store import ComputerRecord

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

log = logging.getLogger("corral.computers.logs")

SERVICE_PREFIX = "svc-"
"""The guest agent's process ids of template services (`corral.vm.agent.services`)."""
APPS_SOURCE = "apps"
DEFAULT_TAIL = 200
MAX_TAIL = 10_000
RESCAN_SECONDS = 2.0
"""How often a stream looks for new sources (an app install that starts later)."""
BUFFER = 1000
ENDING_EVENTS = ("computer.stopped", "computer.deleted", "computer.error")


@dataclass(frozen=True)
class LogLine:
    process_id: str
    source: str
    seq: int
    ts: str
    line: str

    def public(self) -> dict[str, Any]:
        return {"line": self.line, "ts": self.ts, "source": self.source}


def source_of(process_id: str) -> str | None:
    """The log source of an agent process, or None for a process that is not one."""
    if process_id.startswith(SERVICE_PREFIX):
        return process_id[len(SERVICE_PREFIX) :]
    if process_id.startswith(INSTALL_PROCESS_PREFIX):
        return APPS_SOURCE
    return None


async def log_processes(agent: AgentClient) -> dict[str, str]:
    """The agent's processes that are log sources: process id -> source, oldest first."""
    found = {}
    for process in await agent.processes():
        source = source_of(str(process["pid"]))
        if source is not None:
            found[str(process["pid"])] = source
    return found


def _lines(process_id: str, source: str, raw: Iterable[dict[str, Any]]) -> list[LogLine]:
    return [LogLine(process_id, source, int(entry["id"]), str(entry["ts"]), str(entry["line"])) for entry in raw]


def _ordered(lines: list[LogLine]) -> list[LogLine]:
    """In time order (the agent's timestamps are fixed-width ISO text); a source's own
    lines keep their order."""
    return sorted(lines, key=lambda entry: (entry.ts, entry.process_id, entry.seq))


async def _tails(agent: AgentClient, processes: dict[str, str], tail: int) -> tuple[list[LogLine], dict[str, int]]:
    """The last `tail` lines of every source together, and each process's last sequence number."""
    lines: list[LogLine] = []
    last: dict[str, int] = {}
    for process_id, source in processes.items():
        try:
            batch = await agent.logs(process_id, tail=max(tail, 1))
        except ProcessNotFound:
            continue
        got = _lines(process_id, source, batch["lines"])
        last[process_id] = got[-1].seq if got else 0
        lines.extend(got)
    merged = _ordered(lines)
    return (merged[-tail:] if tail > 0 else []), last


async def recent_lines(platform: ComputerServices, row: ComputerRecord, tail: int = DEFAULT_TAIL) -> list[dict[str, Any]]:
    """The last `tail` lines of the computer's logs, oldest first (`409
    COMPUTER_NOT_RUNNING` unless running). Reading logs is not activity."""
    agent = await agent_for(platform, row, record_activity=False)
    lines, _ = await _tails(agent, await log_processes(agent), tail)
    return [line.public() for line in lines]


# -- following --------------------------------------------------------------------------


def format_cursor(positions: dict[str, int]) -> str:
    """`svc-wm=5,svc-xserver=12`: every process's last sequence number sent."""
    return ",".join(f"{process_id}={seq}" for process_id, seq in sorted(positions.items()))


def parse_cursor(text: str | None) -> dict[str, int] | None:
    """A cursor back from `Last-Event-ID`; None when there is none or it is not one."""
    if not text:
        return None
    positions = {}
    for part in text.split(","):
        process_id, sep, seq = part.partition("=")
        if not sep or not seq.isdigit() or source_of(process_id) is None:
            return None
        positions[process_id] = int(seq)
    return positions


@dataclass
class LogFollower:
    """Lines as they come (`receive`), each with the cursor after it; `close()` when done.

    The channel ends (`trio.EndOfChannel`) when the computer stops being reachable."""

    first: list[tuple[LogLine, str]]
    """The tail to send before the live lines (none when resuming from a cursor: the
    lines after it come through `receive` like live ones)."""
    receive: trio.MemoryReceiveChannel[tuple[LogLine, str]]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    def close(self) -> None:
        self.scope.cancel()
        self.receive.close()


async def follow(
    platform: ComputerServices, nursery: trio.Nursery, row: ComputerRecord, *, tail: int, cursor: dict[str, int] | None
) -> LogFollower:
    """Start following the computer's logs (`409 COMPUTER_NOT_RUNNING` unless running),
    in `nursery` (the node's: it outlives the request's body, which closes the follower).

    Without a cursor the follower starts with the last `tail` lines; with one, with
    every line after it (a process whose lines restarted, its instance having
    restarted, is read from its start)."""
    agent = await agent_for(platform, row, record_activity=False)
    processes = await log_processes(agent)
    recent, last = await _tails(agent, processes, tail if cursor is None else 0)
    first: list[tuple[LogLine, str]] = []
    if cursor is None:
        walk = _Cursor(_before(recent, last))
        first = [(line, walk.advance(line.process_id, line.seq)) for line in recent]
        positions = last
    else:
        positions = {pid: (seq if seq <= last.get(pid, 0) else 0) for pid, seq in cursor.items() if pid in processes}
    send, receive = trio.open_memory_channel[tuple[LogLine, str]](BUFFER)
    follower = LogFollower(first, receive)
    nursery.start_soon(_follow_all, platform, agent, row.id, processes, positions, send, follower.scope)
    return follower


def _before(window: list[LogLine], last: dict[str, int]) -> dict[str, int]:
    """Every process's position just before `window` (a suffix of the merged lines, so a
    suffix of each process's own): the line before its first one in the window, or its
    last line when it has none there."""
    positions = dict(last)
    for line in reversed(window):
        positions[line.process_id] = line.seq - 1
    return positions


async def _follow_all(
    platform: ComputerServices,
    agent: AgentClient,
    computer_id: str,
    processes: dict[str, str],
    positions: dict[str, int],
    send: trio.MemorySendChannel[tuple[LogLine, str]],
    scope: trio.CancelScope,
) -> None:
    """Follow every source until cancelled, the request goes away or the computer stops.
    Runs in the node's nursery: nothing may escape it."""
    cursor = _Cursor(positions)
    with scope:
        try:
            async with send, trio.open_nursery() as nursery:
                nursery.start_soon(_watch_computer, platform, computer_id, nursery.cancel_scope)
                started: set[str] = set()
                while True:
                    for process_id, source in processes.items():
                        if process_id not in started:
                            started.add(process_id)
                            everything = nursery.cancel_scope
                            nursery.start_soon(_follow_one, agent, process_id, source, cursor, send.clone(), everything)
                    await trio.sleep(RESCAN_SECONDS)
                    processes = await log_processes(agent)
        except* (RuntimeErrorBase, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the agent went away (the computer stopped), or the request did
        except* Exception:
            log.exception("following the logs of computer %s failed", computer_id)


class _Cursor:
    """Every process's last sequence number handed on, shared by a follower's tasks."""

    def __init__(self, positions: dict[str, int]) -> None:
        self.positions = dict(positions)

    def after(self, process_id: str) -> int:
        return self.positions.get(process_id, 0)

    def advance(self, process_id: str, seq: int) -> str:
        self.positions[process_id] = seq
        return format_cursor(self.positions)


async def _follow_one(
    agent: AgentClient,
    process_id: str,
    source: str,
    cursor: _Cursor,
    send: trio.MemorySendChannel[tuple[LogLine, str]],
    everything: trio.CancelScope,
) -> None:
    """One source's lines until its process ends; a lost agent ends the whole follower."""
    async with send:
        try:
            async for event in agent.stream_logs(process_id, after=cursor.after(process_id)):
                if event.get("type") != "log":
                    break
                line = LogLine(process_id, source, int(event["id"]), str(event["ts"]), str(event["line"]))
                await send.send((line, cursor.advance(process_id, line.seq)))
        except RuntimeErrorBase as exc:
            log.debug("following %s ended: %s", process_id, exc)
            everything.cancel()


async def _watch_computer(platform: ComputerServices, computer_id: str, everything: trio.CancelScope) -> None:
    """End the follower when the computer stops, pauses, fails or is deleted (a frozen
    agent would otherwise just fall silent)."""
    with platform.bus.subscribe(resource_type="computer", resource_id=computer_id, types=ENDING_EVENTS) as events:
        async for _ in events:
            everything.cancel()
            return

"""Server-sent event streams that survive a dropped connection.

`SSEParser` turns the bytes of a `text/event-stream` body into `Event`s (comments
such as heartbeats are skipped). `EventStream` and `AsyncEventStream` iterate a
stream's events and, when the connection breaks before the server ended the stream,
open it again with `Last-Event-ID` set to the last id they saw, so nothing is lost
or repeated (Corral replays from its event log after that id). A stream the server
ends on purpose (a run that finished, a process that exited) ends the iteration.

Browsers' `EventSource` cannot send an `Authorization` header, so Corral's streams
also take `?ticket=` (single use, minted by `POST /auth/sse-ticket`); with
`ticket=True` each connection mints a fresh ticket instead of sending the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "SSEParser"]


@dataclass(frozen=True)
class Event:
    """One event: `event` is its type (`message` when the frame names none), `data`
    the decoded JSON of its data lines (the text when it is not JSON)."""

    event: str
    data: Any
    id: str | None = None
    raw: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "event": self.event, "data": self.data}


@dataclass
class SSEParser:
    """Incremental: feed chunks of bytes, collect finished events."""

    _buffer: bytes = b""
    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None
    last_id: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events: list[Event] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                return events
            line, self._buffer = self._buffer[: cut[0]], self._buffer[cut[1] :]
            event = self._line(line.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)

    def _line(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> Event | None:
        if self._id is not None:
            self.last_id = self._id
        if not self._data:
            self._event, self._id = "", None
            return None
        raw = "\n".join(self._data)
        try:
            decoded: Any = json.loads(raw)
        except ValueError:
            decoded = raw
        event = Event(self._event or "message", decoded, self._id, raw)
        self._data, self._event, self._id = [], "", None
        return event


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """(end of the first line, start of the next), or None while the line is incomplete."""
    newline, carriage = buffer.find(b"\n"), buffer.find(b"\r")
    if carriage == -1 or (newline != -1 and newline < carriage):
        return None if newline == -1 else (newline, newline + 1)
    if carriage + 1 == len(buffer):
        return None  # maybe \r\n: wait for the next byte
    return (carriage, carriage + 2) if buffer[carriage + 1 : carriage + 2] == b"\n" else (carriage, carriage + 1)

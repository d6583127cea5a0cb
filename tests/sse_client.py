"""A small SSE reader for tests: frames (and comments) from a streaming httpx response."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import trio


@dataclass
class Frame:
    event: str | None
    data: Any
    id: str | None


class SseStream:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.comments: list[str] = []

    async def next_frame(self, timeout: float = 15.0) -> Frame:
        """The next frame with data; comments (heartbeats) are collected in `comments`."""
        fields: dict[str, str] = {}
        with trio.fail_after(timeout):
            async for line in self._lines:
                if line == "":
                    if "data" in fields:
                        return Frame(fields.get("event"), json.loads(fields["data"]), fields.get("id"))
                    fields = {}
                elif line.startswith(":"):
                    self.comments.append(line[1:].strip())
                else:
                    name, _, value = line.partition(":")
                    fields[name] = value[1:] if value.startswith(" ") else value
        raise EOFError("the stream ended")

    async def wait_connected(self, timeout: float = 15.0) -> None:
        """Read up to the server's `: connected` comment: from then on nothing is missed."""
        await self.wait_comment("connected", timeout)

    async def wait_comment(self, text: str, timeout: float = 15.0) -> None:
        """Read up to the comment line `: <text>`."""
        with trio.fail_after(timeout):
            async for line in self._lines:
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    if line[1:].strip() == text:
                        return
        raise EOFError(f"the stream ended before the comment {text!r}")

    async def frames_until(self, event: str, timeout: float = 15.0) -> list[Frame]:
        """Frames up to and including the first of type `event`."""
        seen = []
        while True:
            frame = await self.next_frame(timeout)
            seen.append(frame)
            if frame.event == event:
                return seen


@contextlib.asynccontextmanager
async def open_sse(client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> AsyncIterator[SseStream]:
    async with client.stream("GET", url, headers=headers or {}) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield SseStream(response)

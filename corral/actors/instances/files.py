"""`InstanceFiles`: the files of one running instance, as its actor hands them out.

HTTP never holds an agent client (DESIGN.md: HTTP reaches `vm` only through an
actor). A kind's `files_for` asks its actor to `Connect` (409 when the instance is
not running), records the activity, and hands this out: transfers then run in the
caller's task, so a 10 MB upload streams from the request without holding the
actor's mailbox, and every runtime error comes back as the kind's API answer.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from corral.vm import AgentClient, FileContent, FileStream

from .refusals import Refusals, runtime_refusals

T = TypeVar("T")


class InstanceFiles:
    def __init__(self, agent: AgentClient, refusals: Refusals) -> None:
        self._agent = agent
        self._refusals = refusals

    async def _answered(self, call: Awaitable[T]) -> T:
        with runtime_refusals(self._refusals):
            return await call

    async def read(self, path: str, max_bytes: int) -> FileContent:
        """The whole file, if it is at most `max_bytes` (else `FileTooLarge`)."""
        return await self._answered(self._agent.read_file(path, max_bytes=max_bytes))

    async def open(self, path: str) -> FileStream:
        """The file as a stream, for a download of any size (iterate its `chunks`
        under `aclosing`)."""
        return await self._answered(self._agent.open_file(path))

    async def write(self, path: str, data: bytes) -> dict[str, Any]:
        return await self._answered(self._agent.write_file(path, data))

    async def list(self, path: str) -> dict[str, Any]:
        return await self._answered(self._agent.list_files(path))

    async def stat(self, path: str) -> dict[str, Any]:
        return await self._answered(self._agent.stat(path))

    async def mkdir(self, path: str, recursive: bool = False) -> dict[str, Any]:
        return await self._answered(self._agent.mkdir(path, recursive=recursive))

    async def rename(self, source: str, destination: str) -> dict[str, Any]:
        return await self._answered(self._agent.rename(source, destination))

    async def copy(self, source: str, destination: str) -> dict[str, Any]:
        return await self._answered(self._agent.copy(source, destination))

    async def chmod(self, path: str, mode: str) -> dict[str, Any]:
        return await self._answered(self._agent.chmod(path, mode))

    async def delete(self, path: str) -> dict[str, Any]:
        return await self._answered(self._agent.delete(path))

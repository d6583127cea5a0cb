"""One agent client per running instance, reused across requests.

Keeping the HTTP connection to a guest agent alive saves a TCP handshake and a
client construction on every exec and file call (the exec round-trip goal is a few
milliseconds). A client is keyed by the instance's address and token, so a restart
that changes either gets a fresh one.
"""

from __future__ import annotations

from corral.vm import AgentClient, InstanceInfo


class AgentPool:
    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._clients: dict[str, tuple[tuple[str | None, str], AgentClient]] = {}

    def client(self, info: InstanceInfo) -> AgentClient:
        key = (info.address, info.agent_token)
        cached = self._clients.get(info.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        client = AgentClient.for_instance(info, timeout=self.timeout)
        self._clients[info.id] = (key, client)
        return client

    async def forget(self, instance_id: str) -> None:
        cached = self._clients.pop(instance_id, None)
        if cached is not None:
            await cached[1].aclose()

    async def aclose(self) -> None:
        for _, client in self._clients.values():
            await client.aclose()
        self._clients.clear()

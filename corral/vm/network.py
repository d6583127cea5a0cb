"""What the runtime needs from the host's network, and nothing more.

`vm` does not import `net` (DESIGN.md: the layers beside each other stay
independent). A driver is handed an `InstanceNetwork` by the composition root, which
plugs in `corral.net.HostNetwork`; a microVM driver could be handed a tap-device
network behind the same methods, and tests can hand in anything shaped alike.
"""

from __future__ import annotations

from typing import Any, Protocol


class NetworkAttachment(Protocol):
    """An instance's place on the network: what the launcher needs to join it."""

    @property
    def address(self) -> str: ...

    @property
    def gateway(self) -> str: ...

    @property
    def netns_path(self) -> str: ...

    @property
    def dns_servers(self) -> tuple[str, ...]: ...

    def to_json(self) -> dict[str, Any]: ...


class InstanceNetwork(Protocol):
    """Gives instances an address and a network namespace, and takes them back."""

    @property
    def agent_port(self) -> int: ...

    async def plan(self, instance_id: str) -> NetworkAttachment:
        """The attachment `attach` will make (its address allocated), before it is made,
        so that a launch can start meanwhile; idempotent."""
        ...

    async def attach(self, instance_id: str) -> NetworkAttachment:
        """Everything the instance needs on the network; idempotent."""
        ...

    async def detach(self, instance_id: str) -> None:
        """Remove what `attach` made, and release the address; idempotent."""
        ...

    async def cleanup_stale(self, keep: set[str]) -> list[str]:
        """Remove the pieces of every instance not in `keep`; say what went."""
        ...

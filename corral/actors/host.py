"""What an actor and its cell see of the kernel around them.

The system (`system.py`) builds cells (`supervisor.py`), cells build actors
(`actor.py`), and refs (`ref.py`) reach cells through the system. An actor needs only
a little of the system (its database, bus, services, and a way to name itself), and
of its cell only where to spawn children: naming those needs here, as interfaces,
rather than the classes, keeps the kernel's modules from naming each other in a
circle (the same way `ref.Registry` keeps refs apart from the system).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from corral.actors.bus import EventBus
from corral.storage import Database


class Teller(Protocol):
    """A reference an actor hands its own child tasks, to report back through the mailbox."""

    async def tell(self, message: Any) -> None: ...


class ActorHost(Protocol):
    """The system as its actors and cells see it (`system.ActorSystem`)."""

    db: Database
    bus: EventBus
    services: Any

    def ref(self, actor_class: type[Any], actor_id: str) -> Teller: ...


class CellHandle(Protocol):
    """An actor's cell as the actor sees it (`supervisor.ActorCell`)."""

    draft: Any
    children: int

    def spawn(self, function: Callable[..., Awaitable[Any]], *args: Any, name: str | None) -> None: ...

    def request_stop(self, reason: str = ...) -> None: ...

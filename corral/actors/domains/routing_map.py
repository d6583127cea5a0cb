"""The node's custom domains in memory: FQDN -> where it routes and its status.

The preview router and `GET /tls/ask` answer from this map without a store round
trip (contract §12: Caddy asks before every certificate). It is loaded at start and
kept current by the domain actors, which call `put` or `drop` after each change is
persisted. Every change also publishes a `custom_domain.*` event, which every node
hears: the edge's index (`EdgeHosts`) then re-reads that one domain (`refresh`), so
a change made through another node routes here within milliseconds; `reload` (every
minute) is the safety net. Listeners (the router's table) hear about every FQDN that
starts or stops routing. Only `verified` and `active` domains route; `pending` ones are kept
so that a new registration is seen at once but route nowhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from corral.storage import Database

from . import store
from .store import CustomDomainRecord

ROUTABLE = frozenset({"verified", "active"})


@dataclass(frozen=True, slots=True)
class DomainRoute:
    id: str
    fqdn: str
    target: str
    """The resource's own host (`verification_target`): requests are routed as if for it."""
    status: str
    updated_at: str = ""

    @property
    def routable(self) -> bool:
        return self.status in ROUTABLE


Listener = Callable[[str, "DomainRoute | None"], None]
"""Called with an FQDN and its route when it routes, or None when it stops."""


class DomainMap:
    def __init__(self) -> None:
        self._routes: dict[str, DomainRoute] = {}
        self._listeners: list[Listener] = []
        self._removed: set[str] = set()
        """Ids of domains removed here: a reload that read the store before cannot bring them back."""

    def __len__(self) -> int:
        return len(self._routes)

    async def load(self, db: Database) -> int:
        for record in await store.live(db):
            self.put(record)
        return len(self._routes)

    async def reload(self, db: Database) -> None:
        """Catch up with changes other nodes made: new and changed domains (never older
        than what this node has), and domains no longer live in the store."""
        records = await store.live(db)
        live = {record.fqdn: record for record in records}
        for fqdn, route in list(self._routes.items()):
            if fqdn not in live or live[fqdn].id != route.id:
                self.drop(fqdn, route.id)
        for record in records:
            current = self._routes.get(record.fqdn)
            if record.id in self._removed or (current is not None and current.updated_at > record.updated_at):
                continue
            if current is None or (current.status, current.target) != (record.status, record.verification_target):
                self.put(record)

    async def refresh(self, db: Database, domain_id: str) -> None:
        """Catch up with one domain as the store has it now (an event said it changed)."""
        record = await store.DOMAINS.load(db, domain_id)
        if record is None or record.status == store.REMOVED:
            for fqdn, route in list(self._routes.items()):
                if route.id == domain_id:
                    self.drop(fqdn, domain_id)
            self._removed.add(domain_id)
            return
        current = self._routes.get(record.fqdn)
        if record.id in self._removed or (current is not None and current.updated_at > record.updated_at):
            return
        if current is None or (current.id, current.status, current.target) != (record.id, record.status, record.verification_target):
            self.put(record)

    def listen(self, listener: Listener) -> None:
        """Hear every change from now on, after being told every routable domain now."""
        self._listeners.append(listener)
        for route in self._routes.values():
            if route.routable:
                listener(route.fqdn, route)

    def put(self, record: CustomDomainRecord) -> None:
        if record.status == store.REMOVED:
            self.drop(record.fqdn, record.id)
            return
        route = DomainRoute(record.id, record.fqdn, record.verification_target, record.status, record.updated_at)
        self._routes[record.fqdn] = route
        self._tell(record.fqdn, route if route.routable else None)

    def drop(self, fqdn: str, domain_id: str) -> None:
        self._removed.add(domain_id)
        current = self._routes.get(fqdn)
        if current is not None and current.id == domain_id:
            del self._routes[fqdn]
            self._tell(fqdn, None)

    def get(self, fqdn: str) -> DomainRoute | None:
        return self._routes.get(fqdn)

    def routable(self, fqdn: str) -> DomainRoute | None:
        route = self._routes.get(fqdn)
        return route if route is not None and route.routable else None

    def _tell(self, fqdn: str, route: DomainRoute | None) -> None:
        for listener in self._listeners:
            listener(fqdn, route)

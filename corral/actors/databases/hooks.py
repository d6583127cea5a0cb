"""The connection proxy's questions, answered from the databases' rows and actors.

The proxy (`corral.net.pgproxy`) may not import actors; this object is what it is
handed. A client is admitted only with the database's own role and no replication
(replicas stream over the server's socket, never through the proxy); a suspended
database is woken by its actor before the client's startup packet is sent on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.actors.errors import ActorStopped, MailboxFull
from corral.errors import ApiError
from corral.net.pgproxy import ProxyRefusal
from corral.vm import InstanceNotFound

from . import store
from .actor import DatabaseActor
from .messages import Upstream
from .replication import node_host

if TYPE_CHECKING:
    from .services import DatabaseServices

WAKE_TIMEOUT = 60.0


class ProxyHooks:
    def __init__(self, platform: DatabaseServices) -> None:
        self.platform = platform

    async def upstream(self, database_id: str, params: dict[str, str]) -> str:
        row = await store.load(self.platform.db, database_id)
        if row is None or row.status == "deleted":
            raise ProxyRefusal("3D000", "the database does not exist")
        if params.get("replication", "false").lower() not in ("false", "0", "off", "no"):
            raise ProxyRefusal("28000", "replication connections are not accepted")
        if params.get("user") != row.pg_user:
            raise ProxyRefusal("28000", f'role "{params.get("user", "")}" is not permitted on this database')
        if row.status in ("stopped", "error", "creating"):
            raise ProxyRefusal("57P03", f"the database is {row.status}; it accepts connections once running")
        try:
            ref = await self.platform.system.get(DatabaseActor, database_id)
            path: str = await ref.ask(Upstream(), timeout=WAKE_TIMEOUT)
        except ApiError as exc:
            raise ProxyRefusal("57P03", f"the database cannot accept connections now: {exc.message}") from exc
        except (ActorStopped, MailboxFull) as exc:
            raise ProxyRefusal("57P03", "the database cannot accept connections now") from exc
        return path

    async def elsewhere(self, database_id: str) -> tuple[str, int] | None:
        """Another node's database: its proxy at that node's advertised host (where its
        `url` and its replicas reach it), on the database's port."""
        row = await store.load(self.platform.db, database_id)
        if row is None or row.status == "deleted" or row.node in (None, self.platform.settings.node_name):
            return None
        host = await node_host(self.platform.db, row.node)
        return (host, row.port) if host else None

    async def cancel_upstream(self, database_id: str) -> str | None:
        driver = self.platform.databases.driver
        try:
            info = await driver.info(database_id)
        except InstanceNotFound:
            return None
        return str(driver.socket_path(database_id)) if info.init_pid is not None else None

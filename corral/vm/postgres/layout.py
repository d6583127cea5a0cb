"""Where one database server's files live, and who owns them.

`<root>/` (root, 0711) holds the prepared template cluster `template-15/` and one
directory per server, `<root>/<id>/` (the server's own uid, 0711): `disk.img`, the
server's disk (`corral.vm.disk`, of its size), mounted on `disk/` and holding
`disk/data/` (0700, the cluster: a server filling its disk gets `ENOSPC`, the node
does not fill), `run/` (0711, its Unix socket: the server listens on no TCP address;
the connection proxy and replicas reach it there) and `server.log`. (A server made
before disks has `data/` beside them, without a limit.) What the driver
keeps about a server (its uid, limits and identity) is in `<root>/<id>.json`,
root's alone, because the server's own user must not change its limits.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PG_BIN = Path(os.environ.get("CORRAL_PG_BIN", "/usr/lib/postgresql/15/bin"))
ENGINE_VERSION = "15"
ADMIN_ROLE = "corral_admin"
"""The superuser the control plane uses: admitted by `peer` auth over the socket
for the OS user root only (pg_ident maps root to it); never through the proxy."""
REPLICATION_ROLE = "corral_replicator"
TEMPLATE_ROLE = "app_user"
TEMPLATE_DATABASE = "app"
SOCKET_PORT = 5432
"""The template's port while it is prepared; each server has a port of its own (`ServerState.port`),
on which it listens on TCP (for the proxy's fast path) and names its socket."""


@dataclass(frozen=True)
class ServerState:
    """What the driver keeps about one server (`<root>/<id>.json`)."""

    id: str
    uid: int
    vcpus: float
    memory_mb: int
    pids_max: int
    role: str
    database: str
    created_at: str
    replica_of: str | None = None
    port: int = SOCKET_PORT
    listen: str = ""
    """TCP addresses the server listens on at `port` (comma-separated; empty: the socket only)."""
    primary_host: str = ""
    primary_port: int = 0
    """A replica of a primary on another node: where it streams from (empty: the primary is here)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerState:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})


class Layout:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def template(self) -> Path:
        return self.root / f"template-{ENGINE_VERSION}"

    @property
    def secret_file(self) -> Path:
        return self.root / ".replication-secret"

    def server_dir(self, server_id: str) -> Path:
        return self.root / server_id

    def data(self, server_id: str) -> Path:
        server_dir = self.server_dir(server_id)
        if (server_dir / "disk.img").exists():
            return server_dir / "disk" / "data"
        return server_dir / "data"

    def run(self, server_id: str) -> Path:
        return self.server_dir(server_id) / "run"

    def socket(self, server_id: str, port: int) -> Path:
        return self.run(server_id) / f".s.PGSQL.{port}"

    def log(self, server_id: str) -> Path:
        return self.server_dir(server_id) / "server.log"

    def state_file(self, server_id: str) -> Path:
        return self.root / f"{server_id}.json"

    def load(self, server_id: str) -> ServerState | None:
        try:
            return ServerState.from_json(json.loads(self.state_file(server_id).read_text()))
        except FileNotFoundError:
            return None

    def save(self, state: ServerState) -> None:
        path = self.state_file(state.id)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json()))
        os.chmod(tmp, 0o600)
        tmp.replace(path)

    def server_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json"))

    def used_uids(self) -> set[int]:
        uids = set()
        for server_id in self.server_ids():
            state = self.load(server_id)
            if state is not None:
                uids.add(state.uid)
        return uids


def traversable(path: Path) -> bool:
    """Whether every directory above `path` lets other users through (o+x): a server's
    own user must reach its data directory."""
    for parent in [*reversed(Path(path).absolute().parents)]:
        try:
            if not os.stat(parent).st_mode & 0o001:
                return False
        except FileNotFoundError:
            return True
    return True

"""A dedicated PostgreSQL connection in LISTEN, for what the nodes tell each other
(`remote_events`: events; `notices`: routing changes). libpq's own connection
(psycopg's `pq` layer): its socket is waited on from the trio thread, and
notifications are read without a worker thread parked on it."""

from __future__ import annotations

import contextlib
from typing import Any

import trio


def listen_connection(url: str, channel: str, application_name: str) -> Any:
    """A new libpq connection in LISTEN on `channel` (blocking: run on a worker thread)."""
    from psycopg import OperationalError, pq
    from psycopg.conninfo import make_conninfo

    conninfo = make_conninfo(
        url, connect_timeout=10, keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
        application_name=application_name,
    )
    pgconn = pq.PGconn.connect(conninfo.encode())
    if pgconn.status != pq.ConnStatus.OK:
        message = pgconn.get_error_message()
        pgconn.finish()
        raise OperationalError(message)
    result = pgconn.exec_(f"LISTEN {channel}".encode())
    if result.status != pq.ExecStatus.COMMAND_OK:
        message = pgconn.get_error_message()
        pgconn.finish()
        raise OperationalError(message)
    return pgconn


def close_connection(pgconn: Any) -> None:
    with contextlib.suppress(Exception):  # already closed: no socket any more
        trio.lowlevel.notify_closing(pgconn.socket)
    pgconn.finish()

"""A dedicated PostgreSQL connection in LISTEN, for what the nodes tell each other
(`remote_events`: events; `notices`: routing changes). libpq's own connection
(psycopg's `pq` layer): its socket is waited on from the trio thread, and
notifications are read without a worker thread parked on it."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

log = logging.getLogger("corral.storage.pg_listen")

RETRY_SECONDS = (0.1, 0.2, 0.5, 1.0, 2.0)
"""Waits between attempts to get a lost connection back, the last repeated."""
STEADY_SECONDS = 5.0
"""A connection that lasted this long restarts the backoff from its first step."""

Serve = Callable[[Any, Callable[[], None]], Awaitable[None]]
"""Uses a connection in LISTEN until it fails; calls the second argument once ready."""


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


async def listen_forever(
    url: Callable[[], str],
    channel: str,
    application_name: str,
    serve: Serve,
    *,
    what: str,
    retry_seconds: Sequence[float] = RETRY_SECONDS,
    on_loss: Callable[[], None] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep a connection in LISTEN on `channel` and hand each one to `serve`, until
    cancelled; a lost or failed connection is made again after a backoff (`on_loss` is
    called first), to `url()` as it is then. Started once `serve` is listening, or after the first failed attempt
    (which is then retried like a loss). `what` names the listener in the log."""
    failures = 0
    started = False

    def ready() -> None:
        nonlocal started
        if not started:
            started = True
            task_status.started()

    while True:
        lost: Exception
        opened = time.monotonic()
        try:
            pgconn = await trio.to_thread.run_sync(listen_connection, url(), channel, application_name)
        except Exception as exc:
            lost = exc
        else:
            try:
                await serve(pgconn, ready)
                lost = ConnectionError("the connection ended")
            except Exception as exc:
                lost = exc
            finally:
                close_connection(pgconn)
            if time.monotonic() - opened > STEADY_SECONDS:
                failures = 0  # it had worked: the first retry comes soon
        ready()
        if on_loss is not None:
            on_loss()
        level = logging.WARNING if failures == 0 else logging.DEBUG
        log.log(level, "the LISTEN connection for %s failed (%s); reconnecting", what, lost)
        await trio.sleep(retry_seconds[min(failures, len(retry_seconds) - 1)])
        failures += 1

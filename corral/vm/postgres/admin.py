"""The control plane's SQL on a server: as `corral_admin` over the server's socket.

Sync psycopg through a worker thread (DESIGN.md: its async API does not run under
trio). Every statement here is a short catalog change; nothing here keeps a connection.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

import psycopg
import trio
from psycopg import sql

from .layout import ADMIN_ROLE, REPLICATION_ROLE, TEMPLATE_DATABASE

Socket = tuple[Path, int]
"""A server's socket directory and port."""


def _connect(socket: Socket, dbname: str = "postgres") -> psycopg.Connection[Any]:
    run_dir, port = socket
    return psycopg.connect(
        host=str(run_dir), port=port, user=ADMIN_ROLE, dbname=dbname, autocommit=True, connect_timeout=10
    )


def _adopt(socket: Socket, role: str, database: str, password: str | None, replication_password: str | None = None) -> None:
    """Give the cluster this server's identity: its one login role is renamed to
    `role` and its one application database to `database` (a cluster copied from the
    template, a parent or a backup of another database carries another's names).

    One query reads both names and one transaction makes the changes, committed without
    waiting for its WAL flush: every start adopts again, so a crash that lost it loses
    nothing (a create waits for one round trip and no fsync)."""
    with _connect(socket) as conn:
        row = conn.execute(
            "SELECT ARRAY(SELECT rolname::text FROM pg_roles WHERE rolcanlogin AND rolname NOT IN (%s, %s)"
            "  AND rolname NOT LIKE 'pg\\_%%' ORDER BY oid),"
            " ARRAY(SELECT datname::text FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres' ORDER BY oid)",
            (ADMIN_ROLE, REPLICATION_ROLE),
        ).fetchone()
        roles, names = (row[0], row[1]) if row else ([], [])
        statements: list[sql.Composable] = []
        if role not in roles and roles:
            statements.append(sql.SQL("ALTER ROLE {} RENAME TO {}").format(sql.Identifier(roles[0]), sql.Identifier(role)))
        elif role not in roles:
            statements.append(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        if database not in names and names:
            statements.append(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(names[0]), sql.Identifier(database)))
            statements.append(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(database), sql.Identifier(role)))
        if password is not None:
            statements.append(_password_statement(role, password))
        if replication_password is not None:  # replicas on other nodes log in with it (issue 30)
            statements.append(_password_statement(REPLICATION_ROLE, replication_password))
        if statements:
            with conn.transaction():
                conn.execute(sql.SQL("; ").join([sql.SQL("SET LOCAL synchronous_commit = off"), *statements]))
        if database not in names and not names:  # CREATE DATABASE runs outside a transaction
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role)))


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores (RFC 7677), made here so that the
    plain password never reaches the server, where a failed statement would be logged."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def _password_statement(role: str, password: str) -> sql.Composed:
    return sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(scram_verifier(password)))


def _set_password(conn: psycopg.Connection[Any], role: str, password: str) -> None:
    conn.execute(_password_statement(role, password))


def _rotate(socket: Socket, role: str, password: str) -> None:
    with _connect(socket) as conn:
        _set_password(conn, role, password)


def _query(socket: Socket, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with _connect(socket) as conn:
        return list(conn.execute(query, params).fetchall())


def _template_roles(socket: Socket) -> None:
    with _connect(socket) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier("app_user")))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN REPLICATION").format(sql.Identifier(REPLICATION_ROLE)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER app_user").format(sql.Identifier(TEMPLATE_DATABASE)))


async def adopt(
    socket: Socket, role: str, database: str, password: str | None, replication_password: str | None = None
) -> None:
    await trio.to_thread.run_sync(_adopt, socket, role, database, password, replication_password)


async def rotate(socket: Socket, role: str, password: str) -> None:
    await trio.to_thread.run_sync(_rotate, socket, role, password)


async def query(socket: Socket, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return await trio.to_thread.run_sync(_query, socket, text, params)


async def template_roles(socket: Socket) -> None:
    await trio.to_thread.run_sync(_template_roles, socket)


def _setting(socket: Socket, name: str) -> str:
    with _connect(socket) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
        return str(row[0]) if row else ""


async def wait_setting(socket: Socket, name: str, value: str, timeout: float = 10.0) -> None:
    """Until a new session has `name` = `value` (after a reload the postmaster was sent)."""
    with trio.fail_after(timeout):
        while await trio.to_thread.run_sync(_setting, socket, name) != value:
            await trio.sleep(0.005)


async def set_replication_password(socket: Socket, password: str) -> None:
    await rotate(socket, REPLICATION_ROLE, password)


class SlotActive(Exception):
    """The slot is still in use (its replica's connection has not ended yet)."""


def _drop_remote_slot(host: str, port: int, password: str, slot: str) -> None:
    with psycopg.connect(
        host=host, port=port, user=REPLICATION_ROLE, password=password, dbname="postgres", autocommit=True, connect_timeout=5
    ) as conn:
        row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        if row is None:
            return
        if row[0]:
            raise SlotActive(slot)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


async def drop_remote_slot(host: str, port: int, password: str, slot: str) -> None:
    """Drop a replica's slot on a primary of another node, as the replication role."""
    await trio.to_thread.run_sync(_drop_remote_slot, host, port, password, slot)

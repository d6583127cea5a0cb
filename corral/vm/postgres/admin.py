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

from .layout import ADMIN_ROLE, REPLICATION_ROLE, SOCKET_PORT, TEMPLATE_DATABASE


def _connect(run_dir: Path, dbname: str = "postgres") -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=str(run_dir), port=SOCKET_PORT, user=ADMIN_ROLE, dbname=dbname, autocommit=True, connect_timeout=10
    )


def _adopt(run_dir: Path, role: str, database: str, password: str | None) -> None:
    """Give the cluster this server's identity: its one login role is renamed to
    `role` and its one application database to `database` (a cluster copied from the
    template, a parent or a backup of another database carries another's names)."""
    with _connect(run_dir) as conn:
        roles = [r for (r,) in conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolcanlogin AND rolname NOT IN (%s, %s) AND rolname NOT LIKE 'pg\\_%%'",
            (ADMIN_ROLE, REPLICATION_ROLE),
        ).fetchall()]
        if role not in roles and roles:
            conn.execute(sql.SQL("ALTER ROLE {} RENAME TO {}").format(sql.Identifier(roles[0]), sql.Identifier(role)))
        elif role not in roles:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        names = [d for (d,) in conn.execute(
            "SELECT datname FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres'"
        ).fetchall()]
        if database not in names and names:
            conn.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(names[0]), sql.Identifier(database)))
            conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(database), sql.Identifier(role)))
        elif database not in names:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role)))
        if password is not None:
            _set_password(conn, role, password)


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


def _set_password(conn: psycopg.Connection[Any], role: str, password: str) -> None:
    verifier = scram_verifier(password)
    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(verifier)))


def _rotate(run_dir: Path, role: str, password: str) -> None:
    with _connect(run_dir) as conn:
        _set_password(conn, role, password)


def _query(run_dir: Path, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with _connect(run_dir) as conn:
        return list(conn.execute(query, params).fetchall())


def _template_roles(run_dir: Path) -> None:
    with _connect(run_dir) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier("app_user")))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN REPLICATION").format(sql.Identifier(REPLICATION_ROLE)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER app_user").format(sql.Identifier(TEMPLATE_DATABASE)))


async def adopt(run_dir: Path, role: str, database: str, password: str | None) -> None:
    await trio.to_thread.run_sync(_adopt, run_dir, role, database, password)


async def rotate(run_dir: Path, role: str, password: str) -> None:
    await trio.to_thread.run_sync(_rotate, run_dir, role, password)


async def query(run_dir: Path, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return await trio.to_thread.run_sync(_query, run_dir, text, params)


async def template_roles(run_dir: Path) -> None:
    await trio.to_thread.run_sync(_template_roles, run_dir)


async def set_replication_password(run_dir: Path, password: str) -> None:
    await rotate(run_dir, REPLICATION_ROLE, password)

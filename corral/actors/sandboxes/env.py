"""Sandbox environment variables: validated, encrypted at rest, injected into every exec and process.

Every value is sealed with AES-256-GCM (`SecretBox`) whose associated data binds the
tenant, the sandbox and the key: a value copied to another row, sandbox or tenant
does not decrypt. The `encrypted` flag a caller sets is kept and reported, but
values are encrypted at rest either way and are never returned by the API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from corral.actors.platform import Platform
from corral.errors import ApiError, not_found
from corral.storage import Row, Transaction, associated_data, utc_now_iso

KEY_PATTERN = re.compile(r"[A-Z][A-Z0-9_]*")
MAX_KEY_LENGTH = 256
MAX_VALUE_BYTES = 32 * 1024
MAX_VARS = 200
"""Variables one sandbox may hold; an environment larger than this is a design smell."""


@dataclass(frozen=True)
class EnvVar:
    key: str
    value: str
    encrypted: bool = True


def invalid_vars(detail: str) -> ApiError:
    return ApiError(400, "INVALID_VARS", "invalid vars", details={"vars": detail})


def parse_vars(body: Any) -> list[EnvVar]:
    """The `vars` of a PUT body; anything malformed is `400 invalid vars` with the reason in details."""
    items = body.get("vars") if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise invalid_vars("vars must be a non-empty array of {key, value, encrypted?}")
    if len(items) > MAX_VARS:
        raise invalid_vars(f"at most {MAX_VARS} vars per request")
    parsed: dict[str, EnvVar] = {}
    for index, item in enumerate(items):
        where = f"vars[{index}]"
        if not isinstance(item, dict):
            raise invalid_vars(f"{where} must be an object")
        key, value, encrypted = item.get("key"), item.get("value"), item.get("encrypted", True)
        if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key) or len(key) > MAX_KEY_LENGTH:
            raise invalid_vars(f"{where}.key must match [A-Z][A-Z0-9_]* (at most {MAX_KEY_LENGTH} characters)")
        if not isinstance(value, str):
            raise invalid_vars(f"{where}.value is required and must be a string")
        if len(value.encode()) > MAX_VALUE_BYTES or "\x00" in value:
            raise invalid_vars(f"{where}.value must be at most {MAX_VALUE_BYTES} bytes without NUL characters")
        if not isinstance(encrypted, bool):
            raise invalid_vars(f"{where}.encrypted must be a boolean")
        parsed[key] = EnvVar(key, value, encrypted)  # a key listed twice: the last wins
    return list(parsed.values())


def _aad(tenant_id: str, sandbox_id: str, key: str) -> bytes:
    return associated_data(tenant_id, sandbox_id, f"sandbox-env:{key}")


def entry_public(row: Row) -> dict[str, Any]:
    return {"key": row["key"], "encrypted": bool(row["encrypted"])}


async def list_vars(platform: Platform, sandbox_id: str) -> list[Row]:
    return await platform.db.fetch_all(
        "SELECT key, encrypted, created_at, updated_at FROM sandbox_env WHERE sandbox_id = ? ORDER BY key", (sandbox_id,)
    )


async def put_vars(platform: Platform, sandbox: Row, variables: list[EnvVar]) -> list[Row]:
    """Upsert `variables`; keys not listed are left as they are. Answers the whole list."""
    sealed = [
        (var, platform.secrets.encrypt_text(var.value, _aad(sandbox["tenant_id"], sandbox["id"], var.key)))
        for var in variables
    ]

    def work(tx: Transaction) -> None:
        now = utc_now_iso()
        existing = {row["key"] for row in tx.fetch_all("SELECT key FROM sandbox_env WHERE sandbox_id = ?", (sandbox["id"],))}
        if len(existing | {var.key for var in variables}) > MAX_VARS:
            raise invalid_vars(f"a sandbox holds at most {MAX_VARS} vars")
        for var, blob in sealed:
            if var.key in existing:
                tx.execute(
                    "UPDATE sandbox_env SET value = ?, encrypted = ?, updated_at = ? WHERE sandbox_id = ? AND key = ?",
                    (blob, int(var.encrypted), now, sandbox["id"], var.key),
                )
            else:
                tx.insert(
                    "sandbox_env",
                    {
                        "sandbox_id": sandbox["id"],
                        "tenant_id": sandbox["tenant_id"],
                        "key": var.key,
                        "value": blob,
                        "encrypted": int(var.encrypted),
                        "created_at": now,
                        "updated_at": now,
                    },
                )

    await platform.db.transaction(work)
    return await list_vars(platform, sandbox["id"])


async def delete_var(platform: Platform, sandbox_id: str, key: str) -> None:
    deleted = await platform.db.execute("DELETE FROM sandbox_env WHERE sandbox_id = ? AND key = ?", (sandbox_id, key))
    if deleted != 1:
        raise not_found(f"env var not found: {key}")


async def resolved_env(platform: Platform, sandbox: Row) -> dict[str, str]:
    """The sandbox's variables in plaintext, for an exec or a process about to start."""
    rows = await platform.db.fetch_all("SELECT key, value FROM sandbox_env WHERE sandbox_id = ?", (sandbox["id"],))
    return {
        row["key"]: platform.secrets.decrypt_text(row["value"], _aad(sandbox["tenant_id"], sandbox["id"], row["key"]))
        for row in rows
    }


async def copy_vars(platform: Platform, source: Row, target: Row) -> None:
    """A fork's environment: the source's values, sealed anew for the new sandbox."""
    values = await resolved_env(platform, source)
    flags = {row["key"]: bool(row["encrypted"]) for row in await list_vars(platform, source["id"])}
    if values:
        await put_vars(platform, target, [EnvVar(key, value, flags.get(key, True)) for key, value in values.items()])

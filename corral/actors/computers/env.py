"""A computer's environment variables (contract §8): encrypted at rest, never returned.

Each value is sealed with AES-256-GCM (`platform.secrets`) whose associated data binds
the tenant, the computer and the variable's name, so a value copied to another row,
computer or tenant does not decrypt. Values leave the store only in plaintext toward
the instance: at boot (in memory, `InstanceSpec.boot_env`, never on disk) and with
every exec, so a variable set while the computer runs applies to the next command.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from corral.errors import ApiError, not_found, validation_error
from corral.storage import Row, Transaction, associated_data, utc_now_iso

if TYPE_CHECKING:
    from corral.actors.platform import Platform

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME_LENGTH = 256
MAX_VALUE_BYTES = 32 * 1024
MAX_VARS = 200


def _aad(tenant_id: str, computer_id: str, name: str) -> bytes:
    return associated_data(tenant_id, computer_id, f"computer-env:{name}")


def env_public(row: Row) -> dict[str, Any]:
    return {"name": row["name"], "created_at": row["created_at"], "updated_at": row["updated_at"]}


def parse_env_var(body: dict[str, Any]) -> tuple[str, str]:
    """`(name, value)` of a POST body: missing is `400 MISSING_PARAM`, malformed `422`."""
    name, value = body.get("name"), body.get("value")
    if name is None or name == "":
        raise ApiError(400, "MISSING_PARAM", "name is required")
    if value is None:
        raise ApiError(400, "MISSING_PARAM", "value is required")
    errors: dict[str, str] = {}
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        errors["name"] = f"must match [A-Za-z_][A-Za-z0-9_]* (at most {MAX_NAME_LENGTH} characters)"
    if not isinstance(value, str):
        errors["value"] = "must be a string"
    elif len(value.encode()) > MAX_VALUE_BYTES or "\x00" in value:
        errors["value"] = f"must be at most {MAX_VALUE_BYTES} bytes without NUL characters"
    if errors:
        raise validation_error(errors)
    return str(name), str(value)


async def list_env(platform: Platform, computer_id: str) -> list[Row]:
    return await platform.db.fetch_all(
        "SELECT name, created_at, updated_at FROM computer_env WHERE computer_id = ? ORDER BY name", (computer_id,)
    )


async def set_env(platform: Platform, computer: Row, values: dict[str, str]) -> list[Row]:
    """Upsert `values`; names not given are kept. Answers the rows written."""
    sealed = {
        name: platform.secrets.encrypt_text(value, _aad(computer["tenant_id"], computer["id"], name))
        for name, value in values.items()
    }

    def work(tx: Transaction) -> list[Row]:
        now = utc_now_iso()
        existing = {
            row["name"]: row
            for row in tx.fetch_all("SELECT name, created_at FROM computer_env WHERE computer_id = ?", (computer["id"],))
        }
        if len(set(existing) | set(sealed)) > MAX_VARS:
            raise validation_error({"name": f"a computer holds at most {MAX_VARS} env vars"})
        written = []
        for name, blob in sealed.items():
            if name in existing:
                tx.execute(
                    "UPDATE computer_env SET value = ?, updated_at = ? WHERE computer_id = ? AND name = ?",
                    (blob, now, computer["id"], name),
                )
                written.append({"name": name, "created_at": existing[name]["created_at"], "updated_at": now})
            else:
                row = {"computer_id": computer["id"], "tenant_id": computer["tenant_id"], "name": name,
                       "value": blob, "created_at": now, "updated_at": now}
                tx.insert("computer_env", row)
                written.append({"name": name, "created_at": now, "updated_at": now})
        return written

    return await platform.db.transaction(work)


async def delete_env(platform: Platform, computer_id: str, name: str) -> None:
    deleted = await platform.db.execute("DELETE FROM computer_env WHERE computer_id = ? AND name = ?", (computer_id, name))
    if deleted != 1:
        raise not_found(f"env var not found: {name}")


async def resolved_env(platform: Platform, computer: Row) -> dict[str, str]:
    """The computer's variables in plaintext, for a boot or an exec."""
    rows = await platform.db.fetch_all("SELECT name, value FROM computer_env WHERE computer_id = ?", (computer["id"],))
    return {
        row["name"]: platform.secrets.decrypt_text(row["value"], _aad(computer["tenant_id"], computer["id"], row["name"]))
        for row in rows
    }


async def copy_env(platform: Platform, source: Row, target: Row) -> None:
    """A clone's environment: the source's values, sealed anew for the clone."""
    values = await resolved_env(platform, source)
    if values:
        await set_env(platform, target, values)

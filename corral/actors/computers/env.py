"""A computer's environment variables (contract §8): the API's shape (`name`, `value`).

Values are kept by the instances' one sealed store (`corral.actors.instances.sealed_env`)
and leave it only in plaintext toward the instance: at boot (in memory,
`InstanceSpec.boot_env`, never on disk) and with every exec, so a variable set while
the computer runs applies to the next command.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from corral.errors import ApiError, not_found, validation_error
from corral.storage import Row

from ..instances.sealed_env import SealedEnv, SealedEnvTable

if TYPE_CHECKING:
    from corral.actors.computers.services import ComputerServices

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME_LENGTH = 256
MAX_VALUE_BYTES = 32 * 1024


COMPUTER_ENV = SealedEnvTable("computer_env", "computer_id", "name", "computer-env")


def _store(platform: ComputerServices) -> SealedEnv:
    return SealedEnv(platform.db, platform.secrets, COMPUTER_ENV)


def _too_many(limit: int) -> ApiError:
    return validation_error({"name": f"a computer holds at most {limit} env vars"})


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


async def list_env(platform: ComputerServices, computer_id: str) -> list[Row]:
    return await _store(platform).names(computer_id)


async def set_env(platform: ComputerServices, computer: Row, values: dict[str, str]) -> list[Row]:
    """Upsert `values`; names not given are kept. Answers the rows written."""
    return await _store(platform).put(computer, values, _too_many)


async def delete_env(platform: ComputerServices, computer_id: str, name: str) -> None:
    if not await _store(platform).delete(computer_id, name):
        raise not_found(f"env var not found: {name}")


async def resolved_env(platform: ComputerServices, computer: Row) -> dict[str, str]:
    """The computer's variables in plaintext, for a boot or an exec."""
    return await _store(platform).plaintext(computer)


async def copy_env(platform: ComputerServices, source: Row, target: Row) -> None:
    """A clone's environment: the source's values, sealed anew for the clone."""
    await _store(platform).copy(source, target, _too_many)

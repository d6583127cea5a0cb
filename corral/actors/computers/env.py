"""A computer's environment variables (contract §8): the API's shape (`name`, `value`).

Values are kept by the instances' one sealed store (`corral.actors.instances.sealed_env`)
and leave it only in plaintext toward the instance: at boot (in memory,
`InstanceSpec.boot_env`, never on disk) and with every exec, so a variable set while
the computer runs applies to the next command.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from corral.errors import ApiError, not_found, validation_error
from corral.models import Rule, model
from corral.storage import Row

from ..egress import placeholder_env
from ..instances.sealed_env import SealedEnv, SealedEnvTable
from .store import ComputerRecord

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


_NAME = f"must match [A-Za-z_][A-Za-z0-9_]* (at most {MAX_NAME_LENGTH} characters)"


def _value_problem(value: str) -> str | None:
    if len(value.encode()) > MAX_VALUE_BYTES or "\x00" in value:
        return f"must be at most {MAX_VALUE_BYTES} bytes without NUL characters"
    return None


@model
class SetEnvVar:
    """One variable, sealed at rest; the instance gets it at boot and in every exec."""

    name: Annotated[
        str, Rule(strip=False, max_length=MAX_NAME_LENGTH, pattern=NAME_PATTERN.pattern, message=_NAME)
    ]
    value: Annotated[str, Rule(strip=False, allow_empty=True, check=_value_problem)]


async def list_env(platform: ComputerServices, computer_id: str) -> list[Row]:
    return await _store(platform).names(computer_id)


async def set_env(platform: ComputerServices, computer: ComputerRecord, values: dict[str, str]) -> list[Row]:
    """Upsert `values`; names not given are kept. Answers the rows written."""
    return await _store(platform).put(computer, values, _too_many)


async def delete_env(platform: ComputerServices, computer_id: str, name: str) -> None:
    if not await _store(platform).delete(computer_id, name):
        raise not_found(f"env var not found: {name}")


async def resolved_env(platform: ComputerServices, computer: ComputerRecord) -> dict[str, str]:
    """The computer's variables in plaintext, for a boot or an exec, over the `svc-tok-`
    placeholders of its egress bindings (read anew each time: a binding made while the
    computer runs reaches its next exec)."""
    return {**await placeholder_env(platform.db, computer), **await _store(platform).plaintext(computer)}


async def copy_env(platform: ComputerServices, source: ComputerRecord, target: ComputerRecord) -> None:
    """A clone's environment: the source's values, sealed anew for the clone."""
    await _store(platform).copy(source, target, _too_many)

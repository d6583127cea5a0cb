"""Sandbox environment variables: the API's shape (`vars` of `{key, value, encrypted}`).

Values are kept by the instances' one sealed store (`corral.actors.instances.sealed_env`).
The `encrypted` flag a caller sets is kept and reported, but values are encrypted at
rest either way and are never returned by the API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from corral.actors.sandboxes.services import SandboxServices
from corral.errors import ApiError, not_found
from corral.models import NO_NUL, Rule, anchored, model
from corral.storage import Row

from ..egress import placeholder_env
from ..instances.sealed_env import MAX_VARS, SealedEnv, SealedEnvTable
from .store import SandboxRecord

KEY_PATTERN = re.compile(r"[A-Z][A-Z0-9_]*")
MAX_KEY_LENGTH = 256
MAX_VALUE_BYTES = 32 * 1024


@dataclass(frozen=True)
class EnvVar:
    key: str
    value: str
    encrypted: bool = True


def invalid_vars(detail: str) -> ApiError:
    return ApiError(400, "INVALID_VARS", "invalid vars", details={"vars": detail})


def parse_vars(items: Any) -> list[EnvVar]:
    """The `vars` of a PUT body; anything malformed is `400 invalid vars` with the reason in details."""
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


@model(missing=lambda names: invalid_vars("vars must be a non-empty array of {key, value, encrypted?}"))
class PutVars:
    """Upsert: keys not listed are left alone."""

    vars: Annotated[
        Any,
        Rule(parse=parse_vars, schema={
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_VARS,
            "items": {
                "type": "object",
                "required": ["key", "value"],
                "properties": {
                    "key": {"type": "string", "pattern": f"^{KEY_PATTERN.pattern}$", "maxLength": MAX_KEY_LENGTH},
                    "value": {"type": "string", "pattern": anchored(NO_NUL)},
                    "encrypted": {"type": "boolean", "default": True},
                },
            },
        }),
    ]


SANDBOX_ENV = SealedEnvTable("sandbox_env", "sandbox_id", "key", "sandbox-env", flag_column="encrypted")


def _store(platform: SandboxServices) -> SealedEnv:
    return SealedEnv(platform.db, platform.secrets, SANDBOX_ENV)


def _too_many(limit: int) -> ApiError:
    return invalid_vars(f"a sandbox holds at most {limit} vars")


def entry_public(row: Row) -> dict[str, Any]:
    return {"key": row["key"], "encrypted": bool(row["encrypted"])}


async def list_vars(platform: SandboxServices, sandbox_id: str) -> list[Row]:
    return await _store(platform).names(sandbox_id)


async def put_vars(platform: SandboxServices, sandbox: SandboxRecord, variables: list[EnvVar]) -> list[Row]:
    """Upsert `variables`; keys not listed are left as they are. Answers the whole list."""
    values = {var.key: var.value for var in variables}
    flags = {var.key: var.encrypted for var in variables}
    await _store(platform).put(sandbox, values, _too_many, flags)
    return await list_vars(platform, sandbox.id)


async def delete_var(platform: SandboxServices, sandbox_id: str, key: str) -> None:
    if not await _store(platform).delete(sandbox_id, key):
        raise not_found(f"env var not found: {key}")


async def resolved_env(platform: SandboxServices, sandbox: SandboxRecord) -> dict[str, str]:
    """The sandbox's variables in plaintext, for an exec or a process about to start,
    over the `svc-tok-` placeholders of its egress bindings (read anew each time, so a
    binding made while the sandbox runs reaches its next exec and process)."""
    return {**await placeholder_env(platform.db, sandbox), **await _store(platform).plaintext(sandbox)}


async def copy_vars(platform: SandboxServices, source: SandboxRecord, target: SandboxRecord) -> None:
    """A fork's environment: the source's values, sealed anew for the new sandbox."""
    await _store(platform).copy(source, target, _too_many)

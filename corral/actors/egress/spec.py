"""Request bodies of the egress routes, validated with the specification's codes.

Secret creation (specification "Egress"): an unknown scope and a malformed env name
are `400 INVALID_PARAM`; a scope without its identity column (or the tenant scope
with one) is `422 VALIDATION_ERROR`; other field problems are 422 as everywhere.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from corral.errors import ApiError
from corral.models import NO_NUL, UNSET, Rule, Unset, model
from corral.storage import parse_iso

from .store import IDENTITY_COLUMNS, SCOPE_COLUMN, SECRET_SCOPES

ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
HOST_PATTERN = re.compile(r"(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
MAX_VALUE_BYTES = 64 * 1024
MAX_ALLOWED_HOSTS = 100
SECRET_TYPES = ("api_key", "oauth_connect", "oauth_machine")
RESOURCE_TYPES = ("sandbox", "computer")


def invalid_param(field: str, message: str) -> ApiError:
    return ApiError(400, "INVALID_PARAM", f"invalid {field}", details={field: message})


def host_problem(pattern: str) -> str | None:
    """Why an `allowed_hosts` entry is not an exact host or a `*.` wildcard, or None."""
    if pattern.lower() != pattern or not HOST_PATTERN.fullmatch(pattern) or len(pattern) > 253:
        return f"{pattern!r} is not a lowercase host name or a *.domain wildcard"
    return None


def _value(value: str) -> str | None:
    if len(value.encode()) > MAX_VALUE_BYTES:
        return f"must be at most {MAX_VALUE_BYTES} bytes without NUL characters"
    return None




def _timestamp(value: str) -> str | None:
    try:
        parse_iso(value)
    except ValueError:
        return "must be an ISO 8601 timestamp"
    return None


EnvName = Annotated[
    str,
    Rule(
        pattern=ENV_NAME.pattern,
        max_length=256,
        error=lambda _: invalid_param("expose_as_env", "must match [A-Z][A-Z0-9_]*"),
        description="shell-safe UPPER_SNAKE_CASE",
    ),
]
Hosts = Annotated[
    list[str],
    Rule(
        max_length=MAX_ALLOWED_HOSTS,
        items=Rule(pattern=HOST_PATTERN.pattern, max_length=253, message="must be lowercase host names or *.domain wildcards"),
        description="exact or *. hosts",
    ),
]


def _scope_identities() -> dict[str, object]:
    """Each scope with the identity column it requires, and the tenant scope with none."""
    branches: list[dict[str, object]] = []
    for scope, column in SCOPE_COLUMN.items():
        if column is None:
            identities = {name: {"type": "null"} for name in IDENTITY_COLUMNS}
            branches.append({"properties": {"scope": {"const": scope}, **identities}})
        else:
            branches.append({"properties": {"scope": {"const": scope}, column: {"type": "string"}}, "required": [column]})
    return {"oneOf": branches}


@model(schema=_scope_identities())
class NewSecret:
    """A vault secret; the value is encrypted at rest and never returned."""

    name: Annotated[str, Rule(max_length=200)]
    value: Annotated[str, Rule(strip=False, pattern=NO_NUL, check=_value, message=f"must be at most {MAX_VALUE_BYTES} bytes without NUL characters")]
    type: Literal["api_key", "oauth_connect", "oauth_machine"]
    scope: Annotated[str, Rule(choices=SECRET_SCOPES, error=lambda problem: invalid_param("scope", problem))]
    expose_as_env: EnvName | None = None
    workspace_id: str | None = None
    owner_user_id: str | None = None
    external_user_id: str | None = None
    external_workspace_id: str | None = None
    allowed_hosts: Hosts | None = None
    expires_at: Annotated[str | None, Rule(check=_timestamp, format="date-time")] = None


@model
class SecretChange:
    """A new value (the placeholders stay) and/or expiry."""

    value: Annotated[
        str | Unset, Rule(strip=False, pattern=NO_NUL, check=_value, message=f"must be at most {MAX_VALUE_BYTES} bytes without NUL characters")
    ] = UNSET
    expires_at: Annotated[str | Unset | None, Rule(check=_timestamp, format="date-time")] = UNSET
    allowed_hosts: Hosts | Unset = UNSET


@model
class NewBinding:
    """Expose a secret's placeholder to a sandbox or computer as an env var."""

    secret_id: str
    resource_id: str
    resource_type: Literal["sandbox", "computer"]
    expose_as_env: EnvName
    exposure: Literal["env_var"] = "env_var"


@model(
    schema={
        "if": {"required": ["resource_id"], "properties": {"resource_id": {"type": "string"}}},
        "then": {"required": ["resource_type"], "properties": {"resource_type": {"type": "string"}}},
    }
)
class NewPolicy:
    """A resource's policy, or (without resource_id) the tenant default."""

    mode: Literal["audit_only", "enforce"]
    default_action: Literal["allow", "deny"] = "allow"
    resource_id: str | None = None
    resource_type: Literal["sandbox", "computer"] | None = None
    name: Annotated[str | None, Rule(max_length=200)] = None


@model
class PolicyChange:
    mode: Literal["audit_only", "enforce"] | Unset = UNSET
    default_action: Literal["allow", "deny"] | Unset = UNSET
    name: Annotated[str | Unset | None, Rule(max_length=200)] = UNSET


@model
class NewRule:
    """An allowlist rule: highest priority first, then the most specific pattern."""

    policy_id: str
    pattern: Annotated[str, Rule(max_length=253)]
    kind: Literal["exact", "wildcard", "cidr"]
    method: Annotated[str | None, Rule(max_length=16)] = None
    path_glob: Annotated[str | None, Rule(max_length=1024)] = None
    action: Literal["allow", "deny"] = "allow"
    warn_only: bool = False
    priority: Annotated[int, Rule(minimum=-1_000_000, maximum=1_000_000)] = 100


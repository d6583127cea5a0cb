"""Path and query parameters declared once: the OpenAPI document describes them, and the
server checks them, from the same declaration.

A route lists them in `query` (a plain string there is only a description: the handler
reads and checks that parameter itself) and, rarely, `params`. The ids of path
parameters are declared once in `RESOURCE_IDS`, by the collection they follow
(`/computers/{id}`, `/projects/{project_id}`, `/snapshots/{snapshot_id}`). The pipeline
checks the query and the route's first path parameter before the handler runs; an id
below that resource is checked by the handler once it has found the resource
(`RequestContext.checked_id`, or the resource's own lookup), so that another tenant's
resource is a 404 whatever id follows it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.errors import ApiError, invalid_id, not_found
from corral.ids import UUID_PATTERN
from corral.models import anchored


class Param(ABC):
    """A parameter the pipeline checks; `schema` is what the OpenAPI document states."""

    description: str

    @abstractmethod
    def schema(self) -> dict[str, Any]: ...

    @abstractmethod
    def check(self, name: str, raw: str) -> None:
        """Raise the route's error for a value it refuses."""


@dataclass(frozen=True)
class Id(Param):
    """An identifier: a UUID, or a string matching `pattern` in full. Anything else is
    `400 INVALID_ID "invalid <noun>"`, the answer of every route that names the resource,
    or `refused()` where the route answers a malformed id as an unknown one (404)."""

    noun: str
    pattern: str = UUID_PATTERN
    description: str = ""
    refused: Callable[[], ApiError] | None = None

    def schema(self) -> dict[str, Any]:
        pattern = self.pattern.removeprefix("^").removesuffix("$")
        schema: dict[str, Any] = {"type": "string", "pattern": anchored(pattern)}
        if self.pattern == UUID_PATTERN:
            schema["format"] = "uuid"
        return schema

    def check(self, name: str, raw: str) -> None:
        if re.fullmatch(self.pattern.removeprefix("^").removesuffix("$"), raw) is None:
            raise self.refused() if self.refused is not None else invalid_id(self.noun)


@dataclass(frozen=True)
class Integer(Param):
    """A whole number within bounds; `400 INVALID_PARAM` otherwise. An absent or empty one
    is `default` (`RequestContext.query_int`)."""

    description: str
    default: int
    minimum: int = 1
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer", "minimum": self.minimum, "default": self.default}
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema

    def check(self, name: str, raw: str) -> None:
        self.value(name, raw)

    def value(self, name: str, raw: str | None) -> int:
        if raw is None or raw == "":
            return self.default
        try:
            value = int(raw)
        except ValueError as exc:
            raise ApiError(400, "INVALID_PARAM", f"{name} must be an integer") from exc
        if value < self.minimum or (self.maximum is not None and value > self.maximum):
            bound = f" and at most {self.maximum}" if self.maximum is not None else ""
            raise ApiError(400, "INVALID_PARAM", f"{name} must be at least {self.minimum}{bound}")
        return value


@dataclass(frozen=True)
class Moment(Param):
    """A date and time (RFC 3339): `accepts` reads it, `refused(name)` is the route's error."""

    description: str
    accepts: Callable[[str], object]
    refused: Callable[[str], ApiError]

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "format": "date-time"}

    def check(self, name: str, raw: str) -> None:
        if self.accepts(raw) is None:
            raise self.refused(name)


def param_schema(param: Param | str) -> dict[str, Any]:
    return param.schema() if isinstance(param, Param) else {"type": "string"}


def param_description(param: Param | str) -> str:
    return param.description if isinstance(param, Param) else param


PREFIXED_ULID = "[0-9a-z]{26}"
"""After the prefix of a `corral.ids.prefixed` id (`dep_01j...`)."""


def _resource_ids() -> dict[str, Param]:
    from corral.actors.computers.cua.actor import session_not_found
    from corral.actors.deployments.service import deployment_not_found
    from corral.actors.previews.sharing import SHARE_ID
    from corral.actors.tenancy.invites import INVITE_ID
    from corral.actors.webhooks.service import WEBHOOK_ID

    return {
        "agent-runs": Id("agent run id", refused=lambda: not_found("agent run not found", "AGENT_RUN_NOT_FOUND")),
        "api-keys": Id("api key id"),
        "computers": Id("computer id"),
        "custom-domains": Id("domain id"),
        "databases": Id("database id"),
        "deployments": Id("deployment id", f"dep_{PREFIXED_ULID}", refused=deployment_not_found),
        "projects": Id("project id"),
        "sandboxes": Id("sandbox id"),
        "tenants": Id("tenant id"),
        "webhooks": Id("webhook id", WEBHOOK_ID.pattern),
        "workspaces": Id("workspace id"),
        # Below a resource: the collection and the parameter's name.
        "artifacts/{artifact_id}": Id("artifact id"),
        "backups/{backup_id}": Id("backup id"),
        "domains/{domain_id}": Id("domain id"),
        "invites/{invite_id}": Id("invite id", INVITE_ID.pattern),
        "members/{user_id}": Id("user id"),
        "processes/{pid}": Id("process id", f"proc_{PREFIXED_ULID}", refused=lambda: not_found("process not found")),
        "services/{service_id}": Id(
            "service id", f"svc_{PREFIXED_ULID}", refused=lambda: not_found("deployment service not found")
        ),
        "sessions/{session_id}": Id("cua session id", refused=session_not_found),
        "shares/{share_id}": Id("share id", SHARE_ID.pattern),
        "snapshots/{snapshot_id}": Id("snapshot id"),
        "versions/{version_id}": Id(
            "version id", f"ver_{PREFIXED_ULID}", refused=lambda: not_found("version not found", "VERSION_NOT_FOUND")
        ),
    }


RESOURCE_IDS: dict[str, Param] = _resource_ids()
"""The id after `/<collection>/` on every route below it, whatever the parameter's name;
and, as `<collection>/{<name>}`, the ids of what lives below a resource."""

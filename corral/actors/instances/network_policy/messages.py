"""The request and the message of a network policy change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from corral.actors.messages import Message
from corral.errors import ApiError, validation_error
from corral.models import Rule, model
from corral.net import MODES, NetworkPolicy, PolicyError, parse_rules

RULES_REQUIRED = "rules required for allowlist/denylist mode"


@dataclass(frozen=True)
class SetNetworkPolicy(Message):
    """Replace the resource's policy (`UNRESTRICTED` resets it); answers the stored record or None."""

    policy: NetworkPolicy


RULE_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["host"],
        "properties": {
            "host": {"type": "string", "description": "a hostname, an IP or a CIDR block"},
            "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "omitted: every port"},
            "protocol": {"type": "string", "enum": ["tcp", "udp", "any"], "default": "any"},
        },
        "additionalProperties": False,
    },
}


@model
class PutNetworkPolicy:
    """The whole policy: `mode`, and `rules` (required for allowlist and denylist)."""

    mode: Annotated[str, Rule(description=" | ".join(MODES), schema={"enum": list(MODES)})]
    rules: Annotated[Any, Rule(schema=RULE_SCHEMA)] = None

    def policy(self) -> NetworkPolicy:
        """The validated policy: 422 for a bad mode or rule (details per field), 400 for
        allowlist/denylist without rules."""
        if self.mode not in MODES:
            raise validation_error({"mode": f"must be one of {', '.join(MODES)}"})
        if self.mode in ("allowlist", "denylist") and self.rules is None:
            raise ApiError(400, "MISSING_PARAM", RULES_REQUIRED)
        try:
            rules = parse_rules(self.rules)
        except PolicyError as exc:
            raise validation_error(exc.details) from exc
        return NetworkPolicy(self.mode, rules if self.mode in ("allowlist", "denylist") else ())



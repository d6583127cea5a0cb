"""What profiles need of their node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import Protocol

from corral.actors.egress import EgressServices


class ProfileServices(EgressServices, Protocol):
    """The store, the secret box (sealed env) and the vault's services (secret bindings)."""

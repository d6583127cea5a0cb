"""What the databases part needs of its node (see `corral.actors.tenancy.services` for why a Protocol)."""

from __future__ import annotations

from typing import Protocol

from corral.actors.bus import EventBus
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorSystem
from corral.actors.tenancy.services import TenancyServices
from corral.config import Settings
from corral.storage import BlobStore, SecretBox

from .node import DatabaseNode


class DatabaseServices(TenancyServices, Protocol):
    settings: Settings
    system: ActorSystem
    bus: EventBus
    runtime: RuntimeHolder
    secrets: SecretBox
    blobs: BlobStore
    databases: DatabaseNode

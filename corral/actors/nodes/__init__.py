"""The nodes of a cluster on one store (contract §20): membership, heartbeats, drain."""

from .actor import NodeActor, NodeLoad, SecondNodeRefused
from .gate import require_accepting_work
from .homed import HOME_MOVED, HomedActor, LivesElsewhere, hear_home_moves
from .service import describe, drain, join, keep_alive, leave, measure
from .store import HEARTBEAT_SECONDS, LOST_AFTER_SECONDS, NodeRecord

ACTORS = (NodeActor,)

__all__ = [
    "ACTORS",
    "HEARTBEAT_SECONDS",
    "HOME_MOVED",
    "LOST_AFTER_SECONDS",
    "HomedActor",
    "LivesElsewhere",
    "NodeActor",
    "NodeLoad",
    "NodeRecord",
    "SecondNodeRefused",
    "describe",
    "drain",
    "hear_home_moves",
    "join",
    "keep_alive",
    "leave",
    "measure",
    "require_accepting_work",
]

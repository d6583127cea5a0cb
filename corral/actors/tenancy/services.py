"""What the organisation part needs of its node: the narrow interface it is handed.

Like hypercorn's `typing.py`: a `Protocol` per part, so that a part never takes the
node's whole service object, and no part imports the node. `corral.node.Platform`
satisfies every one of them.
"""

from __future__ import annotations

from typing import Protocol

import trio

from corral.config import Settings
from corral.storage import Database


class TenancyServices(Protocol):
    settings: Settings
    db: Database
    nursery: trio.Nursery

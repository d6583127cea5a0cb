"""Messages of the template build actor beside the instance base's (`Boot`, `Booted`, `Get`)."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.messages import Message


@dataclass(frozen=True)
class Cancel(Message):
    """Stop the build: its instance goes, its status is `cancelled`."""

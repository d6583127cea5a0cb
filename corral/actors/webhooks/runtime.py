"""`WebhookRuntime`: the running webhook parts of one node, as the node keeps them.

Its own module so that `services` (the node's interface, which holds it) and
`runner` (which builds it from those services) both import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dispatcher import Dispatcher
from .sender import Sender
from .worker import DeliveryWorker


@dataclass
class WebhookRuntime:
    """This node's sender (shared with the test endpoint), delivery worker and dispatcher."""

    sender: Sender
    worker: DeliveryWorker
    dispatcher: Dispatcher

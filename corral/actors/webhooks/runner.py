"""The webhook services of one node, started by the node (`corral.node`).

`run_webhooks` builds the sender, the delivery worker and the dispatcher, keeps
them as `platform.webhooks` (the test endpoint sends through the same sender), and
runs the worker and the dispatcher in the platform's nursery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from .dispatcher import Dispatcher
from .sender import Sender
from .worker import DeliveryWorker

if TYPE_CHECKING:
    from corral.actors.webhooks.services import WebhookServices

@dataclass
class WebhookRuntime:
    sender: Sender
    worker: DeliveryWorker
    dispatcher: Dispatcher


def runtime_of(platform: WebhookServices) -> WebhookRuntime:
    if platform.webhooks is None:
        raise RuntimeError("the webhook services are not running on this platform")
    return platform.webhooks


async def run_webhooks(platform: WebhookServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the dispatcher and the delivery worker until cancelled."""
    sender = Sender(platform.settings)
    worker = DeliveryWorker(platform, sender)
    dispatcher = Dispatcher(platform, worker.wake)
    platform.webhooks = WebhookRuntime(sender, worker, dispatcher)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await nursery.start(dispatcher.run)
            task_status.started()
    finally:
        with trio.CancelScope(shield=True):
            await sender.aclose()

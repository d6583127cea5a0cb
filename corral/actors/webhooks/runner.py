"""The webhook services of one node, started by the node (`corral.node`).

`run_webhooks` builds the sender, the delivery worker and the dispatcher (each
handed only the services it uses, so neither imports `services`), keeps them as
`platform.webhooks` (the test endpoint sends through the same sender), and runs the
worker and the dispatcher in the platform's nursery.
"""

from __future__ import annotations

import trio

from .dispatcher import Dispatcher
from .runtime import WebhookRuntime
from .sender import Sender
from .services import WebhookServices
from .worker import DeliveryWorker


def runtime_of(platform: WebhookServices) -> WebhookRuntime:
    if platform.webhooks is None:
        raise RuntimeError("the webhook services are not running on this platform")
    return platform.webhooks


async def run_webhooks(platform: WebhookServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the dispatcher and the delivery worker until cancelled."""
    sender = Sender(platform.settings)
    worker = DeliveryWorker(platform.db, platform.settings, platform.secrets, sender)
    dispatcher = Dispatcher(platform.db, platform.bus, platform.events, worker.wake)
    platform.webhooks = WebhookRuntime(sender, worker, dispatcher)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await nursery.start(dispatcher.run)
            task_status.started()
    finally:
        with trio.CancelScope(shield=True):
            await sender.aclose()

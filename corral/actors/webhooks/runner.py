"""The webhook services of one node, started from `open_platform`.

`run_webhooks` builds the sender, the delivery worker and the dispatcher, registers
them as `platform.extensions["webhooks"]` (the test endpoint sends through the same
sender), and runs the worker and the dispatcher in the platform's nursery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from .dispatcher import Dispatcher
from .sender import Sender
from .worker import DeliveryWorker

if TYPE_CHECKING:
    from corral.actors.platform import Platform

EXTENSION = "webhooks"


@dataclass
class WebhookRuntime:
    sender: Sender
    worker: DeliveryWorker
    dispatcher: Dispatcher


def runtime_of(platform: Platform) -> WebhookRuntime:
    runtime = platform.extensions.get(EXTENSION)
    if not isinstance(runtime, WebhookRuntime):
        raise RuntimeError("the webhook services are not running on this platform")
    return runtime


async def run_webhooks(platform: Platform, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the dispatcher and the delivery worker until cancelled."""
    sender = Sender(platform.settings)
    worker = DeliveryWorker(platform, sender)
    dispatcher = Dispatcher(platform, worker.wake)
    platform.extensions[EXTENSION] = WebhookRuntime(sender, worker, dispatcher)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await nursery.start(dispatcher.run)
            task_status.started()
    finally:
        with trio.CancelScope(shield=True):
            await sender.aclose()

"""How the rest of the sandbox package reaches a running sandbox's agent.

Apart from `service` so that `processes` can use it without importing the service
(which imports `processes`): the arrows run access -> actor, and processes -> access.
`agent_for` asks the sandbox's actor to `Connect` (waiting for one still being
created) and records the activity that keeps it from auto-stopping.
"""

from __future__ import annotations

import trio

from corral.actors.bus import SubscriberLagged
from corral.actors.instances import InstanceFiles, RunningInstance
from corral.actors.sandboxes.services import SandboxServices
from corral.errors import ApiError
from corral.vm import AgentClient, InstanceInfo

from .activity import touch
from .actor import SandboxActor
from .messages import Connect, Get
from .store import SandboxRecord


async def wait_until_settled(platform: SandboxServices, sandbox_id: str, timeout: float) -> SandboxRecord:
    """The sandbox once it has left `creating`, or as it is when `timeout` passes.

    Woken by the sandbox's own events (`ready`, `error`, emitted once the new status is
    stored), so a sandbox from the warm pool is answered the moment it runs; the
    subscription is made before the first look, so no event falls between."""
    ref = await platform.system.get(SandboxActor, sandbox_id)
    with platform.bus.subscribe(resource_type="sandbox", resource_id=sandbox_id, capacity=64) as events:
        with trio.move_on_after(timeout):
            while True:
                record: SandboxRecord = await ref.ask(Get())
                if record.status != "creating":
                    return record
                try:
                    with trio.move_on_after(0.5):  # and a look now and then, whatever the events
                        await events.receive()
                except (SubscriberLagged, trio.EndOfChannel):  # the bus closing, or a flood
                    await trio.sleep(0.05)
    result: SandboxRecord = await ref.ask(Get())
    return result


async def agent_for(platform: SandboxServices, sandbox_id: str, *, record_activity: bool = True) -> AgentClient:
    """The agent of a running sandbox; waits for one still being created.

    A running sandbox's actor publishes what `Connect` would answer (its
    `published_view`), so the usual exec or file call sends it no message."""
    running: RunningInstance | None = platform.system.view_of(SandboxActor, sandbox_id)
    info = running.info if running is not None else await _connect(platform, sandbox_id)
    if record_activity:
        await touch(platform, sandbox_id)
    return platform.agents.client(info)


async def _connect(platform: SandboxServices, sandbox_id: str) -> InstanceInfo:
    ref = await platform.system.get(SandboxActor, sandbox_id)
    try:
        info: InstanceInfo = await ref.ask(Connect())
    except ApiError:
        settled = await wait_until_settled(platform, sandbox_id, platform.settings.sandbox_ready_wait * 6)
        if settled.status == "creating":
            raise ApiError(409, "SANDBOX_RUNTIME_UNAVAILABLE", "sandbox is still starting; it has no address yet") from None
        info = await ref.ask(Connect())  # running now, or the actor's own refusal
    return info


async def files_for(platform: SandboxServices, sandbox_id: str) -> InstanceFiles:
    """The files of a running sandbox (waits for one still being created)."""
    return InstanceFiles(await agent_for(platform, sandbox_id), SandboxActor.refusals)

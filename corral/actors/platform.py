"""The platform: every long-lived service of one Corral node, opened and closed together.

`open_platform(settings)` is the composition root below the HTTP layer: the store
and its migrations, the secret box, the bootstrap admin key, the JWT signing
secret, and the actor system with its event bus. The HTTP layer and integration
tests receive the same `Platform`, so tests can drive actors directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from corral.actors.agents import AgentPool
from corral.actors.bus import EventBus
from corral.actors.runtime import RuntimeHolder
from corral.actors.system import ActorConfig, ActorSystem
from corral.config import Settings
from corral.storage import Database, EventLog, SecretBox, load_or_create_kek, migrate, open_database

log = logging.getLogger("corral")

ADMIN_KEY_PREFIX = "msk_a_"


@dataclass
class Platform:
    settings: Settings
    db: Database
    events: EventLog
    secrets: SecretBox
    jwt_secret: str
    admin_key_digest: str
    nursery: trio.Nursery
    bus: EventBus
    runtime: RuntimeHolder
    agents: AgentPool
    system: ActorSystem = field(init=False)
    """The actor system; its actors see this platform as `self.services`."""
    extensions: dict[str, Any] = field(default_factory=dict)
    """Optional services registered by later parts (credits, runtime driver, ...)."""

    def is_bootstrap_admin_key(self, token: str) -> bool:
        candidate = hashlib.sha256(token.encode()).hexdigest()
        return hmac.compare_digest(candidate, self.admin_key_digest)


def bootstrap_admin_key(settings: Settings) -> str:
    """`CORRAL_ADMIN_KEY`, or the key in `<data-dir>/admin-key`, generated on first start."""
    if settings.admin_key:
        return settings.admin_key
    path = Path(settings.data_dir) / "admin-key"
    if path.exists():
        return path.read_text().strip()
    key = ADMIN_KEY_PREFIX + secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    log.info("generated the admin key in %s", path)
    return key


async def _jwt_secret(db: Database, configured: str | None) -> str:
    """One signing secret shared by every node through the store."""
    if configured:
        return configured
    fresh = secrets.token_urlsafe(48)
    sql = (
        "INSERT INTO platform_settings (key, value) VALUES ('jwt_secret', ?)"
        " ON CONFLICT (key) DO NOTHING"
    )
    await db.execute(sql, (fresh,))
    value = await db.fetch_value("SELECT value FROM platform_settings WHERE key = 'jwt_secret'")
    return str(value)


async def _recover(platform: Platform) -> None:
    """Re-adopt instances that outlived the last run; finish interrupted creations."""
    from corral.actors.sandboxes.service import (
        recover_interrupted,  # the sandboxes need the platform
    )

    if platform.runtime.has_instances():
        await platform.runtime.driver()
    recovered = await recover_interrupted(platform)
    if recovered:
        log.info("resumed %d interrupted sandbox creation(s)", recovered)
    from corral.actors.sandboxes import start_background

    await start_background(platform)
    from corral.actors import computers  # resumes provisioning; metrics sampler, idle watcher

    await computers.start_background(platform)
    from corral.actors import instances, sandboxes

    watches = [sandboxes.idle_watch(), computers.idle_watch(platform)]
    interval = lambda: platform.settings.idle_check_seconds  # noqa: E731 - read each round
    await platform.nursery.start(instances.watch_idle, platform.db, platform.system, watches, interval)


@contextlib.asynccontextmanager
async def open_platform(settings: Settings) -> AsyncIterator[Platform]:
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    db = open_database(settings.database_url)
    try:
        await migrate(db)
        admin_key = bootstrap_admin_key(settings)
        events = EventLog(db, settings.event_retention_seconds)
        async with trio.open_nursery() as nursery:
            platform = Platform(
                settings=settings,
                db=db,
                events=events,
                secrets=SecretBox(load_or_create_kek(data_dir / "kek")),
                jwt_secret=await _jwt_secret(db, settings.jwt_secret),
                admin_key_digest=hashlib.sha256(admin_key.encode()).hexdigest(),
                nursery=nursery,
                bus=EventBus(events),
                runtime=RuntimeHolder(settings),
                agents=AgentPool(settings.agent_timeout),
            )
            platform.system = ActorSystem(
                db,
                bus=platform.bus,
                services=platform,
                config=ActorConfig(shutdown_grace=settings.shutdown_grace_seconds),
            )
            await nursery.start(platform.system.run)
            await _recover(platform)
            from corral.actors import billing  # billing charges running instances

            await billing.start_metering(platform)
            from corral.actors.webhooks import run_webhooks  # deliveries need the platform

            await nursery.start(run_webhooks, platform)
            try:
                yield platform
            finally:
                billing.stop_metering(platform)
                with trio.move_on_after(settings.shutdown_grace_seconds + 1) as scope:
                    scope.shield = True
                    await platform.system.shutdown()
                    await platform.agents.aclose()
                    await platform.runtime.aclose()
                nursery.cancel_scope.cancel()
    finally:
        await db.close()

"""Exposing a sandbox port: the preview record, its URL, and `sandbox.preview.ready`.

Only exposed ports are routed (a sandbox may run services that were never meant to
be reachable). Exposing is idempotent: the same port keeps its `preview_id`. After
each expose a background task polls the port (through the router's own connector,
so an app bound to 127.0.0.1 counts too) and publishes `sandbox.preview.ready
{preview_id, url, port}` once it accepts a connection; it gives up after
`preview_ready_timeout` (300 s) or when the sandbox is destroyed.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from corral.actors.sandboxes import Connect, SandboxActor, SandboxRecord
from corral.errors import ApiError
from corral.net.network import DEFAULT_AGENT_PORT
from corral.net.preview import Connector, Upstream, UpstreamUnreachable
from corral.storage import Event, utc_now_iso
from corral.vm import InstanceInfo

from . import domains, store
from .access import forget_sandbox, instance_netns
from .services import PreviewServices
from .urls import sandbox_url

log = logging.getLogger("corral.previews")

DEFAULT_PREVIEW_PORTS: dict[str, int] = {}
"""Template -> the port `expose` uses without one. The default template has none."""



def invalid_port(message: str = "port must be an integer from 1 to 65535") -> ApiError:
    return ApiError(422, "INVALID_PORT", message)


def parse_port(value: Any, *, required_message: str | None = None, template_id: str | None = None) -> int | None:
    """A port from a request body; None when absent and allowed to be."""
    if value is None:
        default = DEFAULT_PREVIEW_PORTS.get(template_id or "")
        if default is not None:
            return default
        if required_message:
            raise ApiError(400, "MISSING_PARAM", required_message)
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema's integers include 8080.0
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise invalid_port()
    if value == DEFAULT_AGENT_PORT:
        raise invalid_port(f"port {DEFAULT_AGENT_PORT} is reserved for the sandbox's agent")
    return value


async def url_of(platform: PreviewServices, sandbox: SandboxRecord, port: int) -> str:
    domain = await domains.url_domain(platform.db, platform.settings, sandbox.tenant_id, sandbox.workspace_id, sandbox.project_id)
    return sandbox_url(platform.settings, port, sandbox.slug, domain)


async def expose(platform: PreviewServices, sandbox: SandboxRecord, requested_port: int | None) -> dict[str, Any]:
    resolver = platform.sandbox_templates
    if requested_port is None and resolver is not None:  # the template's default preview port
        requested_port = await resolver.preview_port(platform, sandbox.tenant_id, sandbox.template_id)
    port = parse_port(
        requested_port,
        required_message="port is required (the sandbox's template has no default preview port)",
        template_id=sandbox.template_id,
    )
    assert port is not None
    now = utc_now_iso()
    preview_id = await platform.db.transaction(lambda tx: store.expose_port(tx, sandbox.tenant_id, sandbox.id, port, now))
    forget_sandbox(platform, sandbox.id)
    url = await url_of(platform, sandbox, port)
    polling = platform.preview_polls
    if preview_id not in polling:
        polling.add(preview_id)
        platform.nursery.start_soon(_announce_when_ready, platform, sandbox, preview_id, port, url)
    return {"url": url, "port": port, "preview_id": preview_id}


async def _address(platform: PreviewServices, sandbox_id: str) -> str | None:
    """The instance's address while it runs; None while it does not (yet)."""
    ref = await platform.system.get(SandboxActor, sandbox_id)
    try:
        info: InstanceInfo = await ref.ask(Connect())
    except ApiError as exc:
        if exc.status == 404:
            raise
        return None
    return info.address


async def _announce_when_ready(platform: PreviewServices, sandbox: SandboxRecord, preview_id: str, port: int, url: str) -> None:
    connector = Connector(connect_timeout=2.0)
    delay = 0.1
    try:
        with trio.move_on_after(platform.settings.preview_ready_timeout):
            while True:
                address = await _address(platform, sandbox.id)
                if address is not None:
                    try:
                        sock = await connector.connect(Upstream(address, port, instance_netns(platform, sandbox.id)))
                    except UpstreamUnreachable:
                        pass
                    else:
                        sock.close()
                        await store.mark_ready(platform.db, preview_id, utc_now_iso())
                        await platform.bus.publish(Event(
                            "sandbox.preview.ready", "sandbox", sandbox.id,
                            {"preview_id": preview_id, "url": url, "port": port}, tenant_id=sandbox.tenant_id,
                        ))
                        return
                await trio.sleep(delay)
                delay = min(delay * 1.5, 1.0)
        log.info("port %d of sandbox %s did not answer within %g s", port, sandbox.id, platform.settings.preview_ready_timeout)
    except Exception as exc:  # the sandbox went away, or the store is closing: nothing to announce
        log.debug("stopped waiting for preview %s: %s", preview_id, exc)
    finally:
        platform.preview_polls.discard(preview_id)

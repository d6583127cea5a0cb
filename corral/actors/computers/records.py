"""The computer record as the API shows it, and the size table behind it."""

from __future__ import annotations

from typing import Any

from corral.actors.nodes.lost import public_error
from corral.config import Settings
from corral.models import integer_range_pattern
from corral.vm import SIZES

from .store import ComputerRecord

SIZE_NAMES = tuple(SIZES)
"""`small` (1 vCPU, 4096 MB), `medium` (2, 8192), `large` (4, 16384): the specification's first size table."""

SUMMARY_FIELDS = ("id", "name", "status", "size", "created_at")

MIN_RESOLUTION = (640, 480)
MAX_RESOLUTION = (3840, 2160)
DEFAULT_RESOLUTION = "1280x800"
"""Contract §10: `WxH` from 640x480 to 3840x2160, default 1280x800."""


def parse_resolution(text: str) -> tuple[int, int]:
    """`"1280x800"` as `(1280, 800)`; ValueError for anything else."""
    width, sep, height = text.partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise ValueError(text)
    return int(width), int(height)


RESOLUTION = (
    f"{integer_range_pattern(MIN_RESOLUTION[0], MAX_RESOLUTION[0])}x{integer_range_pattern(MIN_RESOLUTION[1], MAX_RESOLUTION[1])}"
)
"""The resolutions a desktop can have, as a `Rule.pattern`."""
RESOLUTION_PROBLEM = f"must be WIDTHxHEIGHT from {MIN_RESOLUTION[0]}x{MIN_RESOLUTION[1]} to {MAX_RESOLUTION[0]}x{MAX_RESOLUTION[1]}"


def vcpus_of(size: str) -> int:
    return int(SIZES[size].vcpus)


def memory_mb_of(size: str) -> int:
    return SIZES[size].memory_mb


def computer_urls(row: ComputerRecord, settings: Settings, domain: str | None = None) -> dict[str, str]:
    """Where the preview router serves the computer's desktop page, its RFB stream and
    its terminals: `{slug}.{domain}` (the service's domain unless another is given)."""
    host = f"{row.slug}.{(domain or settings.public_domain).lower().rstrip('.')}"
    return {
        "desktop_url": settings.preview_origin(host) + "/",
        "stream_url": settings.preview_origin(host, websocket=True) + "/stream",
        "terminal_url": settings.preview_origin(host, websocket=True) + "/terminal",
    }


def computer_public(row: ComputerRecord, settings: Settings) -> dict[str, Any]:
    """The full computer object of the specification, in its field order."""
    urls = computer_urls(row, settings)
    size = row.size
    public: dict[str, Any] = {
        "id": row.id,
        "tenant_id": row.tenant_id,
        "owner_user_id": row.owner_user_id,
        "name": row.name,
        "slug": row.slug,
        "template_type": row.template_type,
        "size": size,
        "vcpus": vcpus_of(size),
        "memory_mb": memory_mb_of(size),
        "status": row.status,
        "vm_id": row.vm_id if row.status != "provisioning" else None,
        "workspace_id": row.workspace_id,
        "project_id": row.project_id,
        "external_workspace_id": row.external_workspace_id,
        "external_user_id": row.external_user_id,
        "external_project_id": row.external_project_id,
        "sandbox_url": urls["desktop_url"],
        "desktop_url": urls["desktop_url"],
        "selected_apps": list(row.selected_apps),
        "settings": dict(row.settings),
        "ai_config": dict(row.ai_config),
        "agent_session_id": row.agent_session_id,
        "agent_status": row.agent_status,
        "resolution": row.resolution,
        "auto_stop": int(row.auto_stop),
        "region": row.region,
        "node": row.node,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    if row.error:
        public["error"] = public_error(row.error)
    return public


def computer_summary(row: ComputerRecord) -> dict[str, Any]:
    return {name: getattr(row, name) for name in SUMMARY_FIELDS}

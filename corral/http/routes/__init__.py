"""Every router of the API; `create_app` mounts them all."""

from __future__ import annotations

from ..routing import Router
from . import admin, api_keys, auth, sandboxes, tenant, workspaces


def all_routers() -> list[Router]:
    return [admin.router, auth.router, api_keys.router, workspaces.router, tenant.router, sandboxes.router]

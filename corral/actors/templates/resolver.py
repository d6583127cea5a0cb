"""Templates as sandbox creation and expose see them (`corral.actors.sandboxes.TemplateResolver`)."""

from __future__ import annotations

from corral.actors.sandboxes.services import SandboxServices, SandboxTemplate
from corral.errors import conflict
from corral.ids import is_uuid
from corral.vm import RuntimeDriver

from . import copies, store
from .sealing import unseal

BUILTIN_NAMES = ("default", "svc-desktop")


class TemplateResolver:
    """The node's `sandbox_templates`: a tenant's templates by id or name."""

    async def resolve(self, platform: SandboxServices, tenant_id: str, ref: str, workspace_id: str | None) -> SandboxTemplate | None:
        if ref in BUILTIN_NAMES:
            return None
        template = await store.find_template(platform.db, tenant_id, ref, workspace_id)
        if template is None:
            return None
        if template.layer_build_id is None:
            raise conflict("TEMPLATE_NOT_READY", f"template {template.name} is {template.status}: it has no ready build yet")
        return SandboxTemplate(template.id, unseal(platform.secrets, template), template.default_preview_port)

    async def preview_port(self, platform: SandboxServices, tenant_id: str, template_id: str) -> int | None:
        if not is_uuid(template_id):
            return None
        template = await store.load_template(platform.db, template_id)
        return template.default_preview_port if template is not None and template.tenant_id == tenant_id else None

    async def here(self, platform: SandboxServices, driver: RuntimeDriver, template_id: str) -> None:
        await copies.here(platform.db, platform.blobs, driver, template_id)

"""A template's env, sealed at rest with its tenant and id as associated data."""

from __future__ import annotations

import json

from corral.storage import SecretBox, associated_data

from .store import TemplateRecord


def _aad(tenant_id: str, template_id: str) -> bytes:
    return associated_data(tenant_id, template_id, "sandbox-template-env")


def seal(box: SecretBox, tenant_id: str, template_id: str, env: dict[str, str]) -> bytes | None:
    return box.encrypt_text(json.dumps(env), _aad(tenant_id, template_id)) if env else None


def unseal(box: SecretBox, template: TemplateRecord) -> dict[str, str]:
    if template.env_sealed is None:
        return {}
    env: dict[str, str] = json.loads(box.decrypt_text(template.env_sealed, _aad(template.tenant_id, template.id)))
    return env

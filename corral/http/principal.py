"""Who is calling: the credential a request authenticated with, and what it may do."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.tenancy import scope_allows
from corral.errors import insufficient_scope


@dataclass(frozen=True)
class Principal:
    kind: str
    """`user_key`, `platform_key`, `admin_key`, `operator` (the bootstrap key), `session` (JWT)
    or `browser_token` (`mbt_`, one sandbox's routes only)."""
    tenant_id: str | None
    user_id: str | None
    api_key_id: str | None
    scopes: frozenset[str] | None
    tenant_role: str | None
    rate_limit_rpm: int
    workspace_id: str | None = None
    email: str | None = None
    sandbox_id: str | None = None
    """A browser token's sandbox: the only one whose routes it reaches (contract §16)."""

    @property
    def is_operator(self) -> bool:
        return self.kind in ("admin_key", "operator")

    @property
    def is_key(self) -> bool:
        return self.api_key_id is not None or self.kind == "operator"

    @property
    def rate_bucket(self) -> str:
        if self.api_key_id:
            return f"key:{self.api_key_id}"
        return f"{self.kind}:{self.user_id}"

    @property
    def is_tenant_admin(self) -> bool:
        return self.tenant_role in ("owner", "admin")

    def require_scope(self, scope: str) -> None:
        if not scope_allows(self.scopes, scope):
            raise insufficient_scope(scope)

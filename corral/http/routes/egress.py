"""Egress security: the vault, bindings, policies, allowlist rules and audit (docs/api.md "Egress").

Everything is tenant-wide and scoped by `egress:read` / `egress:write`; tenant-scoped
secrets need a tenant owner or admin (specification, Authentication rule 9). Another
tenant's ids are 404. No response carries a secret's value (only its `preview`).
"""

from __future__ import annotations

from corral.actors import egress

from ..context import RequestContext
from ..replies import Reply, data, no_content
from ..routing import Router

router = Router("egress", tenant_wide=True)  # keys restricted to a workspace: 403

_SECRET_FILTERS = ("scope", "workspace_id", "owner_user_id", "external_user_id", "external_workspace_id")


def _caller(ctx: RequestContext) -> egress.Caller:
    principal = ctx.principal
    return egress.Caller(ctx.tenant_id, principal.is_tenant_admin, principal.user_id)


def _filters(ctx: RequestContext, names: tuple[str, ...]) -> dict[str, str | None]:
    return {name: ctx.query(name) or None for name in names}


# -- secrets ------------------------------------------------------------------------


@router.post(
    "/egress/secrets",
    summary="Store a secret (sealed at rest); expose_as_env also binds it scope-wide",
    scope="egress:write",
    action="egress.secrets.create",
    status=201,
    request=egress.NewSecret,
)
async def create_secret(ctx: RequestContext) -> Reply:
    fields = await ctx.body(egress.NewSecret)
    secret, binding = await egress.create_secret(ctx.platform, _caller(ctx), fields)
    ctx.audit.update(resource_type="egress_secret", resource_id=secret.id)
    bound = None if binding is None else egress.binding_public(binding)
    return data(egress.secret_public(secret), 201, binding=bound)


@router.get(
    "/egress/secrets",
    summary="The tenant's secrets (metadata only)",
    scope="egress:read",
    query={name: f"only secrets with this {name}" for name in _SECRET_FILTERS},
)
async def list_secrets(ctx: RequestContext) -> Reply:
    found = await egress.secrets_of(ctx.platform, ctx.tenant_id, _filters(ctx, _SECRET_FILTERS))
    return data([egress.secret_public(secret) for secret in found])


@router.get("/egress/secrets/{id}", summary="One secret's metadata", scope="egress:read")
async def get_secret(ctx: RequestContext, id: str) -> Reply:
    return data(egress.secret_public(await egress.get_secret(ctx.platform, ctx.tenant_id, id)))


@router.patch(
    "/egress/secrets/{id}",
    summary="A new value or expiry; placeholders stay, the next request uses the new value",
    scope="egress:write",
    action="egress.secrets.update",
    request=egress.SecretChange,
)
async def update_secret(ctx: RequestContext, id: str) -> Reply:
    secret = await egress.get_secret(ctx.platform, ctx.tenant_id, id)
    ctx.audit.update(resource_type="egress_secret", resource_id=secret.id)
    change = await ctx.body(egress.SecretChange)
    return data(egress.secret_public(await egress.update_secret(ctx.platform, _caller(ctx), secret, change)))


@router.delete(
    "/egress/secrets/{id}",
    summary="Delete a secret and its bindings",
    scope="egress:write",
    action="egress.secrets.delete",
    status=204,
)
async def delete_secret(ctx: RequestContext, id: str) -> Reply:
    secret = await egress.get_secret(ctx.platform, ctx.tenant_id, id)
    ctx.audit.update(resource_type="egress_secret", resource_id=secret.id)
    await egress.delete_secret(ctx.platform, _caller(ctx), secret)
    return no_content()


# -- bindings -----------------------------------------------------------------------


@router.post(
    "/egress/bindings",
    summary="Expose a secret's placeholder to a sandbox or computer as an env var",
    scope="egress:write",
    action="egress.bindings.create",
    status=201,
    request=egress.NewBinding,
)
async def create_binding(ctx: RequestContext) -> Reply:
    binding = await egress.create_binding(ctx.platform, _caller(ctx), await ctx.body(egress.NewBinding))
    ctx.audit.update(resource_type="egress_binding", resource_id=binding.id)
    return data(egress.binding_public(binding), 201)


@router.get(
    "/egress/bindings",
    summary="The tenant's bindings",
    scope="egress:read",
    query={"resource_id": "only bindings to this resource", "resource_type": "sandbox or computer"},
)
async def list_bindings(ctx: RequestContext) -> Reply:
    found = await egress.bindings_of(ctx.platform, ctx.tenant_id, _filters(ctx, ("resource_id", "resource_type")))
    return data([egress.binding_public(binding) for binding in found])


@router.delete(
    "/egress/bindings/{id}",
    summary="Remove a binding (its placeholder is never substituted again)",
    scope="egress:write",
    action="egress.bindings.delete",
    status=204,
)
async def delete_binding(ctx: RequestContext, id: str) -> Reply:
    binding = await egress.get_binding(ctx.platform, ctx.tenant_id, id)
    ctx.audit.update(resource_type="egress_binding", resource_id=binding.id)
    await egress.delete_binding(ctx.platform, binding)
    return no_content()


# -- policies and allowlist rules ---------------------------------------------------


@router.get(
    "/egress/policies",
    summary="The tenant default and the per-resource policies",
    scope="egress:read",
    query={"resource_id": "only the policy of this resource"},
)
async def list_policies(ctx: RequestContext) -> Reply:
    found = await egress.policies_of(ctx.platform, ctx.tenant_id, ctx.query("resource_id") or None)
    return data([egress.policy_public(policy) for policy in found])


@router.post(
    "/egress/policies",
    summary="A resource's policy (one per resource; the tenant default exists already)",
    scope="egress:write",
    action="egress.policies.create",
    status=201,
    request=egress.NewPolicy,
)
async def create_policy(ctx: RequestContext) -> Reply:
    policy = await egress.create_policy(ctx.platform, ctx.tenant_id, await ctx.body(egress.NewPolicy))
    ctx.audit.update(resource_type="egress_policy", resource_id=policy.id)
    return data(egress.policy_public(policy), 201)


@router.get("/egress/policies/{id}", summary="One policy", scope="egress:read")
async def get_policy(ctx: RequestContext, id: str) -> Reply:
    return data(egress.policy_public(await egress.get_policy(ctx.platform, ctx.tenant_id, id)))


@router.patch(
    "/egress/policies/{id}",
    summary="Set a policy's mode and default action",
    scope="egress:write",
    action="egress.policies.update",
    request=egress.PolicyChange,
)
async def update_policy(ctx: RequestContext, id: str) -> Reply:
    policy = await egress.get_policy(ctx.platform, ctx.tenant_id, id)
    ctx.audit.update(resource_type="egress_policy", resource_id=policy.id)
    change = await ctx.body(egress.PolicyChange)
    return data(egress.policy_public(await egress.update_policy(ctx.platform, policy, change)))


@router.get(
    "/egress/allowlist",
    summary="Allowlist rules, in the order they are tried",
    scope="egress:read",
    query={"policy_id": "only the rules of this policy"},
)
async def list_rules(ctx: RequestContext) -> Reply:
    found = await egress.rules_of(ctx.platform, ctx.tenant_id, ctx.query("policy_id") or None)
    return data([egress.rule_public(rule) for rule in found])


@router.post(
    "/egress/allowlist",
    summary="Add an allowlist rule to a policy",
    scope="egress:write",
    action="egress.allowlist.create",
    status=201,
    request=egress.NewRule,
)
async def create_rule(ctx: RequestContext) -> Reply:
    rule = await egress.create_rule(ctx.platform, ctx.tenant_id, await ctx.body(egress.NewRule))
    ctx.audit.update(resource_type="egress_rule", resource_id=rule.id)
    return data(egress.rule_public(rule), 201)


@router.delete(
    "/egress/allowlist/{id}",
    summary="Remove an allowlist rule",
    scope="egress:write",
    action="egress.allowlist.delete",
    status=204,
)
async def delete_rule(ctx: RequestContext, id: str) -> Reply:
    rule = await egress.get_rule(ctx.platform, ctx.tenant_id, id)
    ctx.audit.update(resource_type="egress_rule", resource_id=rule.id)
    await egress.delete_rule(ctx.platform, rule)
    return no_content()


# -- audit --------------------------------------------------------------------------


@router.get(
    "/egress/audit",
    summary="Requests through the egress proxy, newest first",
    scope="egress:read",
    query={
        "resource_id": "only this sandbox's or computer's requests",
        "host": "only requests to this host",
        "action": "allow, reject, stub or error",
        "since": "30m, 1h, 7d or an ISO timestamp",
        "until": "30m, 1h, 7d or an ISO timestamp",
        "limit": f"page size, 1-{egress.MAX_LIMIT} (default {egress.DEFAULT_LIMIT})",
        "cursor": "next_cursor of the previous page",
        "external_user_id": "only requests of this external user's resources",
        "external_workspace_id": "only requests of this external workspace's resources",
    },
)
async def list_audit(ctx: RequestContext) -> Reply:
    query = egress.parse_query(dict(ctx.request.args.items()))
    rows, next_cursor = await egress.query_audit(ctx.platform.db, ctx.tenant_id, query)
    return data([egress.audit_public(row) for row in rows], next_cursor=next_cursor)


@router.get(
    "/egress/audit/suggestions",
    summary="Hosts contacted recently, by number of requests",
    scope="egress:read",
    query={"resource_id": "only this resource's requests"},
)
async def audit_suggestions(ctx: RequestContext) -> Reply:
    return data(await egress.suggestions(ctx.platform.db, ctx.tenant_id, ctx.query("resource_id") or None))


@router.get("/egress/audit/{id}", summary="One audit event", scope="egress:read")
async def get_audit(ctx: RequestContext, id: str) -> Reply:
    return data(egress.audit_public(await egress.get_audit(ctx.platform.db, ctx.tenant_id, id)))

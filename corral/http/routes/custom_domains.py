"""Custom domains of computers and deployments: nested and flat routes (docs/api.md "Custom domains").

Nested: `/computers/{id}/domains` and `/deployments/{id}/domains` (register, list),
`.../domains/{domain_id}/verify` and `DELETE .../domains/{domain_id}`. Flat:
`/custom-domains` with `computer_id` or `deployment_id`, and `/custom-domains/{id}`.
Registering, verifying and removing need `domains:write`; reading needs the
resource's read scope (`computers:read`, `deployments:read`). A computer's domains
are changed by its owner or a member of its workspace, as the computer itself.
Another tenant's computer, deployment or domain is 404 on every route.
"""

from __future__ import annotations

from typing import Annotated, Any

from corral.actors import domains
from corral.actors.tenancy import scope_allows
from corral.errors import invalid_id, missing_param, validation_error
from corral.models import Rule, anchored, model

from ..context import RequestContext, require_uuid
from ..replies import Reply, data
from ..routing import Router
from .computers import computer_row

router = Router("custom-domains")

WRITE = "domains:write"
READ_SCOPE = {domains.COMPUTER: "computers:read", domains.DEPLOYMENT: "deployments:read"}
DOMAIN_RULE = Rule(
    description=f"the FQDN, e.g. app.example.com (RFC 1123, at most {domains.MAX_LENGTH} characters)",
    schema={"type": "string", "maxLength": domains.MAX_LENGTH, "pattern": anchored(f"{domains.FQDN}\\.?")},
)


@model(schema={"required": ["domain"]})  # absent, it is the `MISSING_PARAM` of `normalize_fqdn`
class NewDomain:
    # `Any`: the name's own checks (`domains.normalize_fqdn`) word every problem.
    domain: Annotated[Any, DOMAIN_RULE] = None


@model(
    schema={
        "required": ["domain"],  # absent, it is the `MISSING_PARAM` of `normalize_fqdn`
        "oneOf": [{"required": [name], "properties": {name: {"type": "string"}}} for name in ("computer_id", "deployment_id")],
    }
)
class NewFlatDomain:
    domain: Annotated[Any, DOMAIN_RULE] = None
    computer_id: Annotated[
        str | None, Rule(format="uuid", error=lambda _: invalid_id("computer id"), description="the computer to serve (or give deployment_id)")
    ] = None
    deployment_id: Annotated[str | None, Rule(description="the deployment to serve (or give computer_id)")] = None


# -- finding things ----------------------------------------------------------------------


def _audit(ctx: RequestContext, target: domains.DomainTarget, domain_id: str | None = None) -> None:
    ctx.audit.update(
        workspace_id=target.workspace_id,
        project_id=target.project_id,
        resource_type="custom_domain" if domain_id else target.kind,
        resource_id=domain_id or target.id,
        external_workspace_id=target.external_workspace_id,
        external_user_id=target.external_user_id,
        external_project_id=target.external_project_id,
    )


async def _computer(ctx: RequestContext, id: str, *, change: bool) -> domains.DomainTarget:
    """The caller's computer (400 invalid id, 404, 403 for a change by a non-member)."""
    target = domains.computer_target(await computer_row(ctx, id, change=change))
    _audit(ctx, target)
    return target


async def _deployment(ctx: RequestContext, id: str) -> domains.DomainTarget:
    target = await domains.find_deployment_target(ctx.db, ctx.tenant_id, id, ctx.principal.workspace_id)
    _audit(ctx, target)
    return target


async def _target(ctx: RequestContext, kind: str, id: str, *, change: bool) -> domains.DomainTarget:
    return await (_computer(ctx, id, change=change) if kind == domains.COMPUTER else _deployment(ctx, id))


async def _domain(ctx: RequestContext, domain_id: str, *, change: bool) -> domains.CustomDomainRecord:
    """The caller's domain by id (400 invalid id, 404 `DOMAIN_NOT_FOUND`), and a write's
    right to change its computer."""
    record = await domains.find_domain(
        ctx.platform, ctx.tenant_id, require_uuid(domain_id, "domain id"), key_workspace_id=ctx.principal.workspace_id
    )
    if record.computer_id is not None:
        target = await _computer(ctx, record.computer_id, change=change)
    else:
        target = await _deployment(ctx, str(record.deployment_id))
    if not change:
        ctx.principal.require_scope(READ_SCOPE[target.kind])
    _audit(ctx, target, record.id)
    return record


async def _nested_domain(ctx: RequestContext, kind: str, id: str, domain_id: str) -> domains.CustomDomainRecord:
    """A domain through its resource's path: another resource's domain is 404 too."""
    target = await _target(ctx, kind, id, change=True)
    record = await domains.find_domain(
        ctx.platform, ctx.tenant_id, require_uuid(domain_id, "domain id"), key_workspace_id=ctx.principal.workspace_id
    )
    if (record.computer_id if kind == domains.COMPUTER else record.deployment_id) != target.id:
        raise domains.domain_not_found()
    _audit(ctx, target, record.id)
    return record


# -- what every route does ------------------------------------------------------------------


async def _register(ctx: RequestContext, target: domains.DomainTarget, value: Any) -> Reply:
    record = await domains.register_domain(ctx.platform, target, value)
    _audit(ctx, target, record.id)
    return data(domains.domain_public(record), 201)


async def _list(ctx: RequestContext, target: domains.DomainTarget) -> Reply:
    column = {"computer_id": target.id} if target.kind == domains.COMPUTER else {"deployment_id": target.id}
    records = await domains.list_domains(ctx.platform, ctx.tenant_id, key_workspace_id=ctx.principal.workspace_id, **column)
    return data([domains.domain_public(record) for record in records], total=len(records))


async def _verify(ctx: RequestContext, record: domains.CustomDomainRecord) -> Reply:
    verified = await domains.verify_domain(ctx.platform, record)
    return data({"id": verified.id, "fqdn": verified.fqdn, "status": verified.status, "verified_at": verified.verified_at})


async def _remove(ctx: RequestContext, record: domains.CustomDomainRecord) -> Reply:
    removed = await domains.remove_domain(ctx.platform, record)
    return data({"id": removed.id, "fqdn": removed.fqdn, "status": removed.status})


# -- nested: computers and deployments ----------------------------------------------------

def _nested_routes(kind: str, prefix: str) -> None:
    """The four nested routes of one kind (`computer`, `deployment`), declared once."""
    noun = kind

    @router.post(f"{prefix}/{{id}}/domains", summary=f"Attach a custom domain to a {noun} (201, status pending)",
                 scope=WRITE, action="domains.create", status=201, request=NewDomain, idempotent=True)
    async def register(ctx: RequestContext, id: str) -> Reply:
        target = await _target(ctx, kind, id, change=True)
        body = await ctx.body(NewDomain)
        return await _register(ctx, target, body.domain)

    @router.get(f"{prefix}/{{id}}/domains", summary=f"A {noun}'s custom domains: {{data, total}}", scope=READ_SCOPE[kind])
    async def list_(ctx: RequestContext, id: str) -> Reply:
        return await _list(ctx, await _target(ctx, kind, id, change=False))

    @router.post(f"{prefix}/{{id}}/domains/{{domain_id}}/verify",
                 summary="Check the domain's CNAME now: verified, 409 if already verified, 422 CNAME not found",
                 scope=WRITE, action="domains.verify", idempotent=True)
    async def verify(ctx: RequestContext, id: str, domain_id: str) -> Reply:
        return await _verify(ctx, await _nested_domain(ctx, kind, id, domain_id))

    @router.delete(f"{prefix}/{{id}}/domains/{{domain_id}}", summary="Remove a custom domain: it stops routing",
                   scope=WRITE, action="domains.delete")
    async def remove(ctx: RequestContext, id: str, domain_id: str) -> Reply:
        return await _remove(ctx, await _nested_domain(ctx, kind, id, domain_id))

_nested_routes(domains.COMPUTER, "/computers")
_nested_routes(domains.DEPLOYMENT, "/deployments")


# -- flat ---------------------------------------------------------------------------------


@router.post("/custom-domains", summary="Register a custom domain of a computer or a deployment (201, status pending)",
             scope=WRITE, action="domains.create", status=201, request=NewFlatDomain, idempotent=True)
async def register_flat(ctx: RequestContext) -> Reply:
    body = await ctx.body(NewFlatDomain)
    if body.computer_id and body.deployment_id:
        raise validation_error(
            {"computer_id": "give computer_id or deployment_id, not both"}, "give computer_id or deployment_id, not both"
        )
    if not body.computer_id and not body.deployment_id:
        raise missing_param("computer_id or deployment_id")
    if body.computer_id:
        target = await _computer(ctx, body.computer_id, change=True)
    else:
        target = await _deployment(ctx, str(body.deployment_id))
    return await _register(ctx, target, body.domain)


@router.get("/custom-domains", summary="Custom domains: ?computer_id= or ?deployment_id=, else all the caller may read",
            query={"computer_id": "only this computer's domains", "deployment_id": "only this deployment's domains"})
async def list_flat(ctx: RequestContext) -> Reply:
    computer_id, deployment_id = ctx.query("computer_id"), ctx.query("deployment_id")
    if computer_id:
        ctx.principal.require_scope(READ_SCOPE[domains.COMPUTER])
        return await _list(ctx, await _computer(ctx, computer_id, change=False))
    if deployment_id:
        ctx.principal.require_scope(READ_SCOPE[domains.DEPLOYMENT])
        return await _list(ctx, await _deployment(ctx, deployment_id))
    granted = ctx.principal.scopes
    records = [
        record
        for record in await domains.list_domains(ctx.platform, ctx.tenant_id, key_workspace_id=ctx.principal.workspace_id)
        if scope_allows(granted, READ_SCOPE[domains.COMPUTER if record.computer_id else domains.DEPLOYMENT])
    ]
    return data([domains.domain_public(record) for record in records], total=len(records))


@router.get("/custom-domains/{id}", summary="One custom domain")
async def get_flat(ctx: RequestContext, id: str) -> Reply:
    return data(domains.domain_public(await _domain(ctx, id, change=False)))


@router.post("/custom-domains/{id}/verify", summary="Check the domain's CNAME now (as the nested route)",
             scope=WRITE, action="domains.verify", idempotent=True)
async def verify_flat(ctx: RequestContext, id: str) -> Reply:
    return await _verify(ctx, await _domain(ctx, id, change=True))


@router.delete("/custom-domains/{id}", summary="Remove a custom domain: it stops routing", scope=WRITE, action="domains.delete")
async def delete_flat(ctx: RequestContext, id: str) -> Reply:
    return await _remove(ctx, await _domain(ctx, id, change=True))

"""Network policy of computers (the specification's routes) and of sandboxes (the
same routes under `/sandboxes/{id}`), contract §11.

GET answers the policy (`unrestricted` with no rules when none was set); PUT
replaces the whole policy (`400 rules required for allowlist/denylist mode`,
`422 VALIDATION_ERROR` with per-field details for a bad mode or rule); DELETE resets
it to `unrestricted`. A change applies to the instance's new connections at once.
"""

from __future__ import annotations

from corral.actors import computers, sandboxes
from corral.actors.instances import network_policy
from corral.actors.instances.network_policy import PutNetworkPolicy

from ..context import RequestContext
from ..replies import Reply, data
from ..routing import Router
from .computers import READ, WRITE, computer_row
from .sandboxes import _sandbox

router = Router("network policy")


def _reply(kind: str, resource_id: str, record: network_policy.NetworkPolicyRecord | None, since: str) -> Reply:
    return data(network_policy.policy_public(kind, resource_id, record, since))


# -- computers ------------------------------------------------------------------------


@router.get("/computers/{id}/network-policy", summary="The computer's network policy: {computer_id, mode, rules, updated_at}", scope=READ)
async def computer_get(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id)
    return _reply("computer", row.id, await network_policy.get_policy(ctx.platform.db, row.id), row.created_at)


@router.put(
    "/computers/{id}/network-policy",
    summary="Replace the computer's network policy (mode unrestricted, allowlist, denylist or isolated; rules {host, port?, protocol?})",
    scope=WRITE,
    action="computers.network_policy.update",
    request=PutNetworkPolicy,
)
async def computer_put(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    policy = (await ctx.body(PutNetworkPolicy)).policy()
    record = await network_policy.set_policy(ctx.platform.system, computers.ComputerActor, row.id, policy)
    return _reply("computer", row.id, record, row.created_at)


@router.delete(
    "/computers/{id}/network-policy",
    summary="Reset the computer's network policy to unrestricted",
    scope=WRITE,
    action="computers.network_policy.delete",
)
async def computer_delete(ctx: RequestContext, id: str) -> Reply:
    row = await computer_row(ctx, id, change=True)
    await network_policy.reset_policy(ctx.platform.system, computers.ComputerActor, row.id)
    return data({"computer_id": row.id, "mode": "unrestricted"})


# -- sandboxes --------------------------------------------------------------------------


@router.get("/sandboxes/{id}/network-policy", summary="The sandbox's network policy: {sandbox_id, mode, rules, updated_at}", scope="sandboxes:read")
async def sandbox_get(ctx: RequestContext, id: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    record = await network_policy.get_policy(ctx.platform.db, sandbox.id)
    return _reply("sandbox", sandbox.id, record, sandbox.created_at)


@router.put(
    "/sandboxes/{id}/network-policy",
    summary="Replace the sandbox's network policy (as for computers)",
    scope="sandboxes:write",
    action="sandboxes.network_policy.update",
    request=PutNetworkPolicy,
)
async def sandbox_put(ctx: RequestContext, id: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    policy = (await ctx.body(PutNetworkPolicy)).policy()
    record = await network_policy.set_policy(ctx.platform.system, sandboxes.SandboxActor, sandbox.id, policy)
    return _reply("sandbox", sandbox.id, record, sandbox.created_at)


@router.delete(
    "/sandboxes/{id}/network-policy",
    summary="Reset the sandbox's network policy to unrestricted",
    scope="sandboxes:write",
    action="sandboxes.network_policy.delete",
)
async def sandbox_delete(ctx: RequestContext, id: str) -> Reply:
    sandbox = await _sandbox(ctx, id)
    await network_policy.reset_policy(ctx.platform.system, sandboxes.SandboxActor, sandbox.id)
    return data({"sandbox_id": sandbox.id, "mode": "unrestricted"})

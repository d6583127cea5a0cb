"""Every router of the API; `create_app` mounts them all."""

from __future__ import annotations

from ..routing import Router
from . import (
    admin,
    agent_runs,
    agent_runtime_profiles,
    api_keys,
    auth,
    branding,
    browser_tokens,
    computer_cua,
    computer_desktop,
    computer_logs,
    computer_runtime,
    computer_snapshots,
    computer_streams,
    computers,
    console,
    credits,
    custom_domains,
    database_ops,
    databases,
    deployment_events,
    deployments,
    egress,
    egress_oauth,
    invite_pages,
    invites,
    members,
    network_policy,
    preview_domains,
    previews,
    quotas,
    sandbox_env,
    sandbox_events,
    sandbox_processes,
    sandbox_templates,
    sandboxes,
    tenant,
    tls,
    webhooks,
    white_label,
    workspaces,
)


def all_routers() -> list[Router]:
    return [
        admin.router, auth.router, api_keys.router, workspaces.router, tenant.router, sandboxes.router,
        sandbox_processes.router, sandbox_env.router, sandbox_events.router,
        members.router, invites.router, invite_pages.router, white_label.router,
        credits.router, quotas.router, webhooks.router,
        computers.router, computer_runtime.router, computer_desktop.router, computer_streams.router,
        computer_snapshots.router,
        computer_cua.router, computer_logs.router,
        previews.router, preview_domains.router,
        network_policy.router, egress.router, egress_oauth.router,
        databases.router, database_ops.router,
        branding.router, browser_tokens.router, agent_runtime_profiles.router, sandbox_templates.router,
        agent_runs.router, deployments.router, deployment_events.router,
        console.router, custom_domains.router, tls.router]

"""Tenant isolation, table-driven from the route map.

For every tenant route with a resource id in its path, a resource is created in
tenant A and the route is called with tenant B's key: the answer must be 404 or 403,
and tenant A's resources must be intact afterwards. A new route whose path names a
resource this table cannot create fails the test, so new routes are covered the day
they are added.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from corral.actors import egress
from corral.http import create_app, routes_of
from tests.http.computer_support import windows
from tests.support import Api, Tenant

Params = dict[str, str]
Factory = Callable[[Api, Tenant, Params], Awaitable[Params]]


async def _workspace(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/workspaces", key=tenant.key, json={"name": "Isolated"})
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _project(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/projects", key=tenant.key, json={"name": "Isolated"})
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _api_key(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/api-keys", key=tenant.key, json={"name": "isolated", "key_type": "user"})
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _sandbox(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/sandboxes", key=tenant.key, json={"name": "isolated"})
    assert response.status_code == 201, response.text
    sandbox_id = response.json()["data"]["id"]
    wrote = await api.request(
        "POST", f"/api/v1/sandboxes/{sandbox_id}/files/write", key=tenant.key, json={"path": "/workspace/mine.txt", "content": "A"}
    )
    assert wrote.status_code == 201, wrote.text
    return {"id": sandbox_id}


async def _sandbox_env_var(api: Api, tenant: Tenant, params: Params) -> Params:
    body = {"vars": [{"key": "ISOLATED", "value": "mine"}]}
    response = await api.request("PUT", f"/api/v1/sandboxes/{params['id']}/env", key=tenant.key, json=body)
    assert response.status_code == 200, response.text
    return {"key": "ISOLATED"}


async def _sandbox_process(api: Api, tenant: Tenant, params: Params) -> Params:
    body = {"cmd": "sleep 600"}
    response = await api.request("POST", f"/api/v1/sandboxes/{params['id']}/processes", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"pid": response.json()["data"]["pid"]}


async def _sandbox_share(api: Api, tenant: Tenant, params: Params) -> Params:
    response = await api.request("POST", f"/api/v1/sandboxes/{params['id']}/shares", key=tenant.key, json={})
    assert response.status_code == 201, response.text
    return {"share_id": response.json()["data"]["id"]}


async def _computer(api: Api, tenant: Tenant, _: Params) -> Params:
    from tests.http.computer_support import create_running

    computer = await create_running(api, tenant, name="isolated")
    wrote = await api.request(
        "POST", f"/api/v1/computers/{computer['id']}/files/write", key=tenant.key, json={"path": "/workspace/mine.txt", "content": "A"}
    )
    assert wrote.status_code == 201, wrote.text
    return {"id": computer["id"]}


async def _computer_window(api: Api, tenant: Tenant, params: Params) -> Params:
    run = await api.request(
        "POST", f"/api/v1/computers/{params['id']}/exec", key=tenant.key,
        json={"command": "nohup xterm -T isolated >/dev/null 2>&1 &"},
    )
    assert run.status_code == 200, run.text
    with trio.fail_after(15):
        while not (found := [w for w in await windows(api, tenant, params["id"]) if w["title"] == "isolated"]):
            await trio.sleep(0.05)
    return {"window_id": found[0]["id"]}


async def _computer_terminal(api: Api, tenant: Tenant, params: Params) -> Params:
    response = await api.request("POST", f"/api/v1/computers/{params['id']}/terminal", key=tenant.key, json={})
    assert response.status_code == 201, response.text
    return {"session_id": response.json()["data"]["session_id"]}


async def _computer_snapshot(api: Api, tenant: Tenant, params: Params) -> Params:
    response = await api.request("POST", f"/api/v1/computers/{params['id']}/snapshots", key=tenant.key, json={"name": "mine"})
    assert response.status_code == 201, response.text
    return {"snapshot_id": response.json()["data"]["id"]}


async def _computer_cua_session(api: Api, tenant: Tenant, params: Params) -> Params:
    response = await api.request("POST", f"/api/v1/computers/{params['id']}/cua/sessions", key=tenant.key, json={"task": "mine"})
    assert response.status_code == 201, response.text
    return {"session_id": response.json()["data"]["id"]}


async def _computer_env_var(api: Api, tenant: Tenant, params: Params) -> Params:
    response = await api.request("POST", f"/api/v1/computers/{params['id']}/env", key=tenant.key, json={"name": "ISOLATED", "value": "mine"})
    assert response.status_code == 201, response.text
    return {"name": "ISOLATED"}


async def _quota(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("PUT", "/api/v1/quotas/external/isolated-user", key=tenant.key, json={"max_sandboxes": 7})
    assert response.status_code == 200, response.text
    return {"external_user_id": "isolated-user"}


async def _webhook(api: Api, tenant: Tenant, _: Params) -> Params:
    settings = api.platform.settings
    allowed, settings.allow_private_destinations = settings.allow_private_destinations, True
    try:  # a loopback URL (nothing listens there): the test server has no public DNS
        response = await api.request("POST", "/api/v1/webhooks", key=tenant.key, json={"url": "https://127.0.0.1:9/hook", "name": "mine"})
    finally:
        settings.allow_private_destinations = allowed
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _workspace_member(api: Api, tenant: Tenant, params: Params) -> Params:
    return {"user_id": tenant.owner_id}  # the workspace's creator, its owner


async def _workspace_invite(api: Api, tenant: Tenant, params: Params) -> Params:
    body = {"email": "isolated@example.test", "role": "member"}
    response = await api.request("POST", f"/api/v1/workspaces/{params['id']}/invites", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"invite_id": response.json()["data"]["id"]}


async def _tenant(api: Api, tenant: Tenant, _: Params) -> Params:
    return {"id": tenant.id}


async def _tenant_invite(api: Api, tenant: Tenant, params: Params) -> Params:
    session = (await api.login(tenant.owner_email))["token"]  # org invites take a JWT session
    body = {"email": "isolated.org@example.test", "role": "member"}
    response = await api.request("POST", f"/api/v1/tenants/{params['id']}/invites", key=session, json=body)
    assert response.status_code == 201, response.text
    return {"invite_id": response.json()["data"]["invite_id"]}


async def _workspace_invite_token(api: Api, tenant: Tenant, _: Params) -> Params:
    body = {"email": "token@example.test", "role": "member"}
    response = await api.request("POST", f"/api/v1/workspaces/{tenant.workspace_id}/invites", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"token": response.json()["data"]["invite_url"].rsplit("/", 1)[1]}


async def _tenant_invite_token(api: Api, tenant: Tenant, _: Params) -> Params:
    session = (await api.login(tenant.owner_email))["token"]
    body = {"email": "token.org@example.test", "role": "member"}
    response = await api.request("POST", f"/api/v1/tenants/{tenant.id}/invites", key=session, json=body)
    assert response.status_code == 201, response.text
    return {"token": response.json()["data"]["invite_url"].rsplit("/", 1)[1]}


async def _egress_secret(api: Api, tenant: Tenant, _: Params) -> Params:
    body = {"name": "isolated", "value": "isolated-secret-value", "type": "api_key", "scope": "tenant"}
    response = await api.request("POST", "/api/v1/egress/secrets", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _egress_binding(api: Api, tenant: Tenant, _: Params) -> Params:
    body = {"name": "bound", "value": "isolated-secret-value", "type": "api_key", "scope": "tenant", "expose_as_env": "BOUND"}
    response = await api.request("POST", "/api/v1/egress/secrets", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"id": response.json()["binding"]["id"]}


async def _egress_oauth_provider(api: Api, tenant: Tenant, _: Params) -> Params:
    body = {
        "provider": "isolated", "name": "Mine", "client_id": "mine", "client_secret": "mine-secret-value",
        "authorize_url": "https://auth.example/authorize", "token_url": "https://auth.example/token",
        "allowed_hosts": ["api.example"],
    }
    response = await api.request("POST", "/api/v1/egress/oauth/admin/providers", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _egress_policy(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("GET", "/api/v1/egress/policies", key=tenant.key)
    assert response.status_code == 200, response.text
    return {"id": response.json()["data"][0]["id"]}


async def _egress_rule(api: Api, tenant: Tenant, _: Params) -> Params:
    policy = await _egress_policy(api, tenant, {})
    body = {"policy_id": policy["id"], "pattern": "isolated.test", "kind": "exact"}
    response = await api.request("POST", "/api/v1/egress/allowlist", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _egress_audit(api: Api, tenant: Tenant, _: Params) -> Params:
    row = await egress.record_request(api.platform, egress.AuditEntry(tenant_id=tenant.id, host="isolated.test", action="allow"))
    return {"id": row.id}


async def _agent_runtime_profile(api: Api, tenant: Tenant, _: Params) -> Params:
    body = {"name": "isolated", "provider": "claude", "env": {"MINE": "secret-env"}}
    response = await api.request("POST", "/api/v1/agent-runtime-profiles", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _sandbox_template(api: Api, tenant: Tenant, _: Params) -> Params:
    response = await api.request("POST", "/api/v1/sandbox-templates", key=tenant.key, json={"name": "isolated", "setup": ["true"]})
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["template"]["id"]}


async def _sandbox_template_build(api: Api, tenant: Tenant, _: Params) -> Params:
    body = {"name": "isolated-build", "setup": ["true"]}
    response = await api.request("POST", "/api/v1/sandbox-templates", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["build"]["id"]}
async def _agent_run(api: Api, tenant: Tenant, _: Params) -> Params:
    sandbox = await _sandbox(api, tenant, {})
    body = {"sandbox_id": sandbox["id"], "prompt": "isolated", "command": "echo mine > /workspace/run.txt",
            "metadata": {"artifact_paths": ["/workspace/run.txt"]}}
    response = await api.request("POST", "/api/v1/agent-runs", key=tenant.key, json=body)
    assert response.status_code == 200, response.text
    return {"run_id": response.json()["data"]["id"]}


async def _agent_run_artifact(api: Api, tenant: Tenant, params: Params) -> Params:
    response = await api.request("GET", f"/api/v1/agent-runs/{params['run_id']}/artifacts", key=tenant.key)
    assert response.status_code == 200, response.text
    return {"artifact_id": response.json()["data"][0]["id"]}


async def _computer_domain(api: Api, tenant: Tenant, params: Params) -> Params:
    body = {"domain": f"isolated-{params['id'][:8]}.example.com"}
    response = await api.request("POST", f"/api/v1/computers/{params['id']}/domains", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"domain_id": response.json()["data"]["id"]}


async def _custom_domain(api: Api, tenant: Tenant, _: Params) -> Params:
    computer = await api.request("POST", "/api/v1/computers", key=tenant.key, json={"name": "domains", "template_type": "svc-desktop"})
    assert computer.status_code == 201, computer.text
    body = {"domain": "isolated-flat.example.com", "computer_id": computer.json()["id"]}
    response = await api.request("POST", "/api/v1/custom-domains", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"id": response.json()["data"]["id"]}


async def _deployment_domain(api: Api, tenant: Tenant, params: Params) -> Params:
    body = {"domain": "isolated-deployment.example.com"}
    response = await api.request("POST", f"/api/v1/deployments/{params['id']}/domains", key=tenant.key, json=body)
    assert response.status_code == 201, response.text
    return {"domain_id": response.json()["data"]["id"]}


async def _project_in_path(api: Api, tenant: Tenant, _: Params) -> Params:
    return {"project_id": tenant.project_id}


async def _deployment(api: Api, tenant: Tenant, _: Params) -> Params:
    """A deployment serving a published static version."""
    sandbox = await _sandbox(api, tenant, {})
    created = await api.request("POST", f"/api/v1/projects/{tenant.project_id}/deployments", key=tenant.key, json={"name": "isolated"})
    assert created.status_code == 201, created.text
    deployment_id = created.json()["data"]["id"]
    body = {"source_sandbox_id": sandbox["id"], "output_path": "/workspace"}
    published = await api.request("POST", f"/api/v1/deployments/{deployment_id}/publish", key=tenant.key, json=body)
    assert published.status_code == 200, published.text
    return {"id": deployment_id}


async def _deployment_version(api: Api, tenant: Tenant, params: Params) -> Params:
    response = await api.request("GET", f"/api/v1/deployments/{params['id']}/versions", key=tenant.key)
    assert response.status_code == 200, response.text
    return {"version_id": response.json()["data"][0]["id"]}


async def _deployment_service(api: Api, tenant: Tenant, params: Params) -> Params:
    version = await _deployment_version(api, tenant, params)
    response = await api.request("GET", f"/api/v1/deployments/{params['id']}/versions/{version['version_id']}", key=tenant.key)
    return {"service_id": response.json()["data"]["services"][0]["id"]}


FACTORIES: dict[str, Factory] = {
    "/agent-runtime-profiles/{id}": _agent_runtime_profile,
    "/sandbox-templates/{id}": _sandbox_template,
    "/sandbox-template-builds/{id}": _sandbox_template_build,
    "/workspaces/{id}/members/{user_id}": _workspace_member,
    "/workspaces/{id}/invites/{invite_id}": _workspace_invite,
    "/tenants/{id}": _tenant,
    "/tenants/{id}/invites/{invite_id}": _tenant_invite,
    "/workspace-invites/{token}": _workspace_invite_token,
    "/invites/{token}": _tenant_invite_token,
    "/quotas/external/{external_user_id}": _quota,
    "/computers/{id}": _computer,
    "/computers/{id}/env/{name}": _computer_env_var,
    "/computers/{id}/desktop/windows/{window_id}": _computer_window,
    "/computers/{id}/pty/{session_id}": _computer_terminal,
    "/computers/{id}/snapshots/{snapshot_id}": _computer_snapshot,
    "/computers/{id}/cua/sessions/{session_id}": _computer_cua_session,
    "/sandboxes/{id}": _sandbox,
    "/sandboxes/{id}/env/{key}": _sandbox_env_var,
    "/sandboxes/{id}/processes/{pid}": _sandbox_process,
    "/sandboxes/{id}/shares/{share_id}": _sandbox_share,
    "/workspaces/{id}": _workspace,
    "/projects/{id}": _project,
    "/api-keys/{id}": _api_key,
    "/webhooks/{id}": _webhook,
    "/egress/secrets/{id}": _egress_secret,
    "/egress/bindings/{id}": _egress_binding,
    "/egress/policies/{id}": _egress_policy,
    "/egress/oauth/admin/providers/{id}": _egress_oauth_provider,
    "/egress/allowlist/{id}": _egress_rule,
    "/egress/audit/{id}": _egress_audit,
    "/agent-runs/{run_id}": _agent_run,
    "/agent-runs/{run_id}/artifacts/{artifact_id}": _agent_run_artifact,
    "/computers/{id}/domains/{domain_id}": _computer_domain,
    "/custom-domains/{id}": _custom_domain,
    "/deployments/{id}/domains/{domain_id}": _deployment_domain,
    "/projects/{project_id}": _project_in_path,
    "/deployments/{id}": _deployment,
    "/deployments/{id}/versions/{version_id}": _deployment_version,
    "/deployments/{id}/services/{service_id}": _deployment_service,
}
"""Route prefix up to a path parameter -> how to create that resource in a tenant."""

OWN_NAMESPACE = {"/quotas/external/{external_user_id}"}
"""Prefixes whose parameter is a key the caller chooses inside its own tenant (PUT
creates): another tenant's PUT or DELETE of the same key acts on its own record and
may succeed; its GET (run first) must still be 404, and the owner's record must be
untouched (OWNER_CHECKS and the checks at the end)."""

INVITE_TOKENS = {"/workspace-invites/{token}", "/invites/{token}"}
"""Prefixes whose parameter is an invite link's secret token, meant for a user outside
the tenant: another tenant's user holding it is refused `422 EMAIL_MISMATCH` unless they
are the invitee, and the invite stays pending (checked at the end)."""

OWNER_CHECKS: dict[str, str] = {
    "/agent-runtime-profiles/{id}": "/api/v1/agent-runtime-profiles/{id}",
    "/sandbox-templates/{id}": "/api/v1/sandbox-templates/{id}",
    "/sandbox-template-builds/{id}": "/api/v1/sandbox-template-builds/{id}",
    "/quotas/external/{external_user_id}": "/api/v1/quotas/external/{external_user_id}",
    "/computers/{id}": "/api/v1/computers/{id}/files/stat?path=/workspace/mine.txt",
    "/sandboxes/{id}": "/api/v1/sandboxes/{id}/files/stat?path=/workspace/mine.txt",
    "/workspaces/{id}": "/api/v1/workspaces/{id}",
    "/projects/{id}": "/api/v1/projects/{id}",
    "/webhooks/{id}": "/api/v1/webhooks/{id}",
    "/egress/secrets/{id}": "/api/v1/egress/secrets/{id}",
    "/egress/policies/{id}": "/api/v1/egress/policies/{id}",
    "/agent-runs/{run_id}": "/api/v1/agent-runs/{run_id}",
    "/custom-domains/{id}": "/api/v1/custom-domains/{id}",
    "/deployments/{id}": "/api/v1/deployments/{id}",
}


def _prefixes(path: str) -> list[str]:
    """`/a/{x}/b/{y}/c` -> [`/a/{x}`, `/a/{x}/b/{y}`]."""
    parts, found = path.split("/"), []
    for index, part in enumerate(parts):
        if part.startswith("{"):
            found.append("/".join(parts[: index + 1]))
    return found


async def test_other_tenants_resources_are_absent_on_every_route(runtime_api: Api) -> None:
    api = runtime_api
    tenant, other_tenant = await api.create_tenant(), await api.create_tenant("Other")
    routes = [r for r in routes_of(create_app(api.platform)) if r.path_params and r.auth not in ("admin", "public", "public_auth")]
    assert routes, "no tenant routes with path parameters"
    uncovered = sorted({p for r in routes for p in _prefixes(r.path) if p not in FACTORIES})
    assert not uncovered, f"add isolation factories for: {uncovered}"

    created: dict[str, Params] = {}
    checked = 0
    for route in routes:
        params: Params = {}
        for prefix in _prefixes(route.path):
            if prefix not in created:
                created[prefix] = await FACTORIES[prefix](api, tenant, dict(params))
            params.update(created[prefix])
        url = route.full_path.format(**params)
        kwargs = {"json": {}} if route.is_mutation else {}
        response = await api.request(route.method, url, key=other_tenant.key, **kwargs)
        if route.is_mutation and response.status_code in (200, 204) and set(_prefixes(route.path)) & OWN_NAMESPACE:
            checked += 1
            continue
        if set(_prefixes(route.path)) & INVITE_TOKENS:
            assert (response.status_code, response.json()["error"]["code"]) == (422, "EMAIL_MISMATCH"), response.text
            checked += 1
            continue
        assert response.status_code in (403, 404), f"{route.method} {route.path}: {response.status_code} {response.text}"
        assert response.json()["error"]["code"] in ("NOT_FOUND", "FORBIDDEN") or response.status_code == 404
        checked += 1
    assert checked == len(routes)

    for prefix, template in OWNER_CHECKS.items():
        response = await api.request("GET", template.format(**created[prefix]), key=tenant.key)
        assert response.status_code == 200, f"{template} was changed by another tenant: {response.text}"
    process = created["/sandboxes/{id}/processes/{pid}"]
    kept = await api.request("GET", "/api/v1/sandboxes/{id}/processes/{pid}".format(**created["/sandboxes/{id}"], **process), key=tenant.key)
    assert kept.json()["data"]["status"] == "running", "another tenant killed a process"
    env = await api.request("GET", "/api/v1/sandboxes/{id}/env".format(**created["/sandboxes/{id}"]), key=tenant.key)
    assert env.json()["data"] == [{"key": "ISOLATED", "encrypted": True}], "another tenant changed the environment"
    quota = await api.request("GET", "/api/v1/quotas/external/isolated-user", key=tenant.key)
    assert quota.json()["data"]["limits"]["max_sandboxes"] == 7, "another tenant changed a quota"
    for prefix in INVITE_TOKENS:
        invite = await api.client.get("/api/v1" + prefix.format(**created[prefix]))
        assert invite.json()["data"]["accepted"] is False, "another tenant accepted an invite"
    members = await api.request("GET", "/api/v1/workspaces/{id}/members".format(**created["/workspaces/{id}"]), key=tenant.key)
    assert [(m["user_id"], m["role"]) for m in members.json()["data"]] == [(tenant.owner_id, "owner")], "members changed"
    invites = await api.request("GET", "/api/v1/workspaces/{id}/invites".format(**created["/workspaces/{id}"]), key=tenant.key)
    assert [i["id"] for i in invites.json()["data"]] == [created["/workspaces/{id}/invites/{invite_id}"]["invite_id"]]
    session = (await api.login(tenant.owner_email))["token"]
    org_invites = await api.request("GET", f"/api/v1/tenants/{tenant.id}/invites", key=session)
    assert created["/tenants/{id}/invites/{invite_id}"]["invite_id"] in [i["invite_id"] for i in org_invites.json()["data"]]
    rules = await api.request("GET", "/api/v1/egress/allowlist", key=tenant.key)
    assert created["/egress/allowlist/{id}"]["id"] in [r["id"] for r in rules.json()["data"]], "another tenant removed a rule"
    bindings = await api.request("GET", "/api/v1/egress/bindings", key=tenant.key)
    assert created["/egress/bindings/{id}"]["id"] in [b["id"] for b in bindings.json()["data"]], "another tenant removed a binding"
    policy = await api.request("GET", "/api/v1/egress/policies/{id}".format(**created["/egress/policies/{id}"]), key=tenant.key)
    assert policy.json()["data"]["mode"] == "audit_only", "another tenant changed a policy"
    keys = await api.request("GET", "/api/v1/api-keys", key=tenant.key)
    statuses = {k["id"]: k["status"] for k in keys.json()["data"]}
    assert statuses[created["/api-keys/{id}"]["id"]] == "active"

"""OAuth connect over HTTP (contract §11), against a real authorization server.

`AuthServer` is a tiny h11 server on loopback: `/authorize` checks the query a
browser brings (response_type, client_id, redirect_uri, S256 challenge) and redirects
back with a code, `/token` checks the code, client and PKCE verifier and answers
tokens. The test plays the browser: it follows the authorize URL `start` answers,
then the redirect to the public callback.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import h11
import httpx
import pytest
import trio

from corral.actors import egress
from corral.client import AsyncClient
from corral.ids import new_uuid
from corral.storage import utc_now_iso
from tests.support import API, Api, Tenant, assert_error, free_port, member_key, running_server

ACCESS = "gho_access-0123456789abcdefTOKEN"
ACCESS_2 = "gho_access-refreshed-0123456789TOKEN"
REFRESH = "ghr_refresh-0123456789abcdef"
CLIENT_SECRET = "operator-client-secret-0123456789"
TENANT_SECRET = "tenant-client-secret-0123456789"


@dataclass
class AuthServer:
    """A loopback OAuth authorization server with PKCE."""

    port: int
    client_id: str = "op-client"
    client_secret: str = CLIENT_SECRET
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    token_status: int = 200
    refresh_token: str = REFRESH
    token_answer_bytes: int = 0
    """When set, a successful token answer is padded to exactly this many bytes."""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            return 400, {}, b"bad request"
        code = secrets.token_urlsafe(16)
        self.codes[code] = query
        back = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query["state"]})
        return 302, {"location": back}, b""

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        self.token_requests.append(form)
        if form.get("grant_type") == "refresh_token":
            if form.get("refresh_token") != self.refresh_token or form.get("client_secret") != self.client_secret:
                return 400, {"content-type": "application/json"}, b'{"error": "invalid_grant"}'
            self.refresh_token = REFRESH + "-rotated"
            body = {"access_token": ACCESS_2, "refresh_token": self.refresh_token, "expires_in": 3600}
            return 200, {"content-type": "application/json"}, json.dumps(body).encode()
        issued = self.codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if (
            issued is None
            or form.get("grant_type") != "authorization_code"
            or issued["client_id"] != form.get("client_id")
            or issued["redirect_uri"] != form.get("redirect_uri")
            or issued["code_challenge"] != challenge
        ):
            return 400, {"content-type": "application/json"}, b'{"error": "invalid_grant"}'
        if self.token_status != 200:
            return self.token_status, {"content-type": "text/plain"}, b"down"
        body = {"access_token": ACCESS, "refresh_token": REFRESH, "token_type": "bearer", "expires_in": 3600}
        answer = json.dumps(body).encode()
        if self.token_answer_bytes:
            padded = {**body, "padding": ""}
            padded["padding"] = "x" * (self.token_answer_bytes - len(json.dumps(padded).encode()))
            answer = json.dumps(padded).encode()
        return 200, {"content-type": "application/json"}, answer

    async def handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                if not data:
                    return
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
        assert request is not None
        target = urlsplit(request.target.decode())
        query = {name: values[0] for name, values in parse_qs(target.query).items()}
        if target.path == "/authorize":
            status, headers, payload = self.authorize(query)
        elif target.path == "/token" and request.method == b"POST":
            form = {name: values[0] for name, values in parse_qs(body.decode()).items()}
            status, headers, payload = self.token(form)
        else:
            status, headers, payload = 404, {}, b""
        headers = {**headers, "content-length": str(len(payload)), "connection": "close"}
        out = conn.send(h11.Response(status_code=status, headers=list(headers.items())))
        out += conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage())
        await stream.send_all(out)
        await stream.aclose()


@pytest.fixture
async def auth_server() -> AsyncIterator[AuthServer]:
    server = AuthServer(free_port())
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_tcp, server.handle, server.port)
        yield server
        nursery.cancel_scope.cancel()


def _providers_file(tmp_path: Path, server: AuthServer) -> str:
    path = tmp_path / "providers.json"
    path.write_text(json.dumps([{
        "provider": "github", "name": "GitHub", "client_id": server.client_id, "client_secret": server.client_secret,
        "authorize_url": f"{server.base}/authorize", "token_url": f"{server.base}/token",
        "scopes": ["repo", "read:user"], "allowed_hosts": ["api.github.com"],
    }]))
    return str(path)


@pytest.fixture
async def oauth_api(tmp_path: Path, auth_server: AuthServer, database_url: str) -> AsyncIterator[Api]:
    """A node with the operator's provider file, on SQLite and on PostgreSQL."""
    async with running_server(tmp_path / "node", database_url, egress_proxy=False, oauth_providers=_providers_file(tmp_path, auth_server)) as api:
        yield api


async def call(api: Api, tenant: Tenant, method: str, path: str, **kwargs: Any) -> httpx.Response:
    key = kwargs.pop("key", tenant.key)
    response = await api.request(method, f"{API}/egress/oauth{path}", key=key, **kwargs)
    for secret in (ACCESS, ACCESS_2, REFRESH, CLIENT_SECRET, TENANT_SECRET):
        assert secret not in response.text
    return response


async def browse(api: Api, authorize_url: str) -> httpx.Response:
    """The browser: the provider's authorize page redirects to the callback, which answers HTML."""
    async with httpx.AsyncClient() as browser:
        redirect = await browser.get(authorize_url)
    assert redirect.status_code == 302, redirect.text
    location = urlsplit(redirect.headers["location"])
    assert f"{location.scheme}://{location.netloc}" == str(api.client.base_url)
    return await api.client.get(f"{location.path}?{location.query}")


async def start(api: Api, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = await call(api, tenant, "POST", "/start", json={"provider": "github", **body})
    assert response.status_code == 200, response.text
    started: dict[str, Any] = response.json()
    assert set(started) == {"authorize_url", "state"}, started  # unwrapped: the specification's explicit shape
    return started


async def test_connect_stores_an_oauth_connect_secret_with_its_binding(oauth_api: Api, auth_server: AuthServer) -> None:
    api = oauth_api
    tenant = await api.create_tenant()
    listed = (await call(api, tenant, "GET", "/providers")).json()["data"]
    assert [(p["provider"], p["source"], p["client_id"]) for p in listed] == [("github", "platform", "op-client")]
    assert "client_secret" not in listed[0]

    started = await start(api, tenant, expose_as_env="GITHUB_TOKEN")
    query = parse_qs(urlsplit(started["authorize_url"]).query)
    assert started["authorize_url"].startswith(f"{auth_server.base}/authorize?")
    assert query["response_type"] == ["code"] and query["client_id"] == ["op-client"]
    assert query["redirect_uri"] == [f"{api.client.base_url}/api/v1/egress/oauth/callback"]
    assert query["state"] == [started["state"]] and query["scope"] == ["repo read:user"]
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    status = (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]
    assert status == {"state": started["state"], "status": "pending", "secret_id": None, "error": None}

    page = await browse(api, started["authorize_url"])
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "Connected" in page.text and ACCESS not in page.text
    assert auth_server.token_requests[0]["client_secret"] == CLIENT_SECRET
    status = (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]
    assert status["status"] == "complete" and status["error"] is None

    secret = (await api.request("GET", f"{API}/egress/secrets/{status['secret_id']}", key=tenant.key)).json()["data"]
    assert secret["type"] == "oauth_connect" and secret["scope"] == "user"
    assert secret["owner_user_id"] == tenant.owner_id and secret["allowed_hosts"] == ["api.github.com"]
    assert secret["expires_at"] is not None and ACCESS not in json.dumps(secret)
    bindings = (await api.request("GET", f"{API}/egress/bindings", key=tenant.key)).json()["data"]
    assert [(b["secret_id"], b["expose_as_env"]) for b in bindings] == [(secret["id"], "GITHUB_TOKEN")]
    row = await api.platform.db.fetch_one("SELECT refresh_token FROM egress_oauth_flows WHERE state = ?", (started["state"],))
    assert row is not None and REFRESH.encode() not in bytes(row["refresh_token"])

    # The same callback again: the flow was used.
    again = await api.client.get(f"{API}/egress/oauth/callback?code=x&state={started['state']}")
    assert again.status_code == 409 and "already used" in again.text


async def test_the_python_client_gets_the_unwrapped_start_answer(oauth_api: Api, auth_server: AuthServer) -> None:
    """`egress_oauth_start` of the generated client answers what the server sends: the
    specification's `{authorize_url, state}`, no `data` around it."""
    tenant = await oauth_api.create_tenant()
    async with AsyncClient(str(oauth_api.client.base_url), tenant.key) as client:
        started = await client.egress_oauth_start(provider="github")
        assert set(started) == {"authorize_url", "state"}
        assert started["authorize_url"].startswith(f"{auth_server.base}/authorize?")
        status = await client.get_egress_oauth_status(state=started["state"])
    assert status["data"]["status"] == "pending"


async def test_callback_and_start_errors(oauth_api: Api, auth_server: AuthServer) -> None:
    api = oauth_api
    tenant = await api.create_tenant()
    assert_error(await call(api, tenant, "POST", "/start", json={"provider": "gitlab"}), 404, "NOT_FOUND")
    assert_error(await call(api, tenant, "POST", "/start", json={}), 400, "MISSING_PARAM")
    assert_error(await call(api, tenant, "POST", "/start", json={"provider": "github", "scope": "planet"}), 400, "INVALID_PARAM")
    assert_error(await call(api, tenant, "POST", "/start", json={"provider": "github", "expose_as_env": "lower"}), 400, "INVALID_PARAM")
    assert_error(await call(api, tenant, "GET", "/status?state=nope"), 404, "NOT_FOUND")
    member_id, member = await member_key(api, tenant)
    response = await call(api, tenant, "POST", "/start", json={"provider": "github", "scope": "tenant"}, key=member)
    assert_error(response, 403, "FORBIDDEN")
    response = await call(api, tenant, "POST", "/start", json={"provider": "github", "owner_user_id": tenant.owner_id}, key=member)
    assert_error(response, 403, "FORBIDDEN")

    for query, status, text in [
        ("", 400, "no state"),
        ("code=x&state=unknown", 404, "unknown"),
    ]:
        page = await api.client.get(f"{API}/egress/oauth/callback?{query}")
        assert page.status_code == status and text in page.text and page.headers["content-type"].startswith("text/html")

    # The provider refuses (the user said no): the flow fails with its error.
    started = await start(api, tenant)
    page = await api.client.get(f"{API}/egress/oauth/callback?error=access_denied&state={started['state']}")
    assert page.status_code == 400 and "access_denied" in page.text
    status = (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]
    assert status["status"] == "failed" and "access_denied" in status["error"] and status["secret_id"] is None

    # The provider sends the browser back without a code.
    started = await start(api, tenant)
    page = await api.client.get(f"{API}/egress/oauth/callback?state={started['state']}")
    assert page.status_code == 400 and "no code" in page.text
    assert (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]["status"] == "failed"

    # A code the token endpoint does not know.
    started = await start(api, tenant)
    page = await api.client.get(f"{API}/egress/oauth/callback?code=forged&state={started['state']}")
    assert page.status_code == 502 and "invalid_grant" in page.text
    status = (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]
    assert status["status"] == "failed" and "invalid_grant" in status["error"]

    # The token endpoint answers something that is not JSON.
    auth_server.token_status = 503
    started = await start(api, tenant)
    page = await browse(api, started["authorize_url"])
    assert page.status_code == 502
    assert (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]["status"] == "failed"
    auth_server.token_status = 200

    # A token answer of 64 KiB is taken; one byte more is refused (a tenant's token
    # endpoint is the tenant's server, and is not read whole).
    for size, answered in ((64 * 1024, 200), (64 * 1024 + 1, 502)):
        auth_server.token_answer_bytes = size
        started = await start(api, tenant)
        page = await browse(api, started["authorize_url"])
        assert page.status_code == answered, page.text
        if answered == 502:
            assert "token endpoint answered more than 65536 bytes" in page.text
    auth_server.token_answer_bytes = 0

    # A state too old to use.
    started = await start(api, tenant)
    await api.platform.db.execute(
        "UPDATE egress_oauth_flows SET created_at = '2000-01-01T00:00:00.000000Z' WHERE state = ?", (started["state"],)
    )
    page = await browse(api, started["authorize_url"])
    assert page.status_code == 400 and "expired" in page.text
    assert (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]["status"] == "failed"
    assert len((await api.request("GET", f"{API}/egress/secrets", key=tenant.key)).json()["data"]) == 1  # the 64 KiB answer's
    del member_id


async def test_tenant_providers_need_an_admin_and_override_the_operator(oauth_api: Api, auth_server: AuthServer) -> None:
    api = oauth_api
    tenant, other = await api.create_tenant(), await api.create_tenant("Other")
    body = {
        "provider": "github", "name": "Our GitHub app", "client_id": "tenant-client", "client_secret": TENANT_SECRET,
        "authorize_url": "https://github.example/login/oauth/authorize", "token_url": "https://github.example/token",
        "scopes": ["repo"], "allowed_hosts": ["api.github.com"],
    }
    _, member = await member_key(api, tenant)
    assert_error(await call(api, tenant, "POST", "/admin/providers", json=body, key=member), 403, "FORBIDDEN")
    assert_error(await call(api, tenant, "POST", "/admin/providers", json={**body, "token_url": "ftp://x"}), 422, "VALIDATION_ERROR")
    refused = {**body, "token_url": f"{auth_server.base}/token"}
    assert_error(await call(api, tenant, "POST", "/admin/providers", json=refused), 422, "VALIDATION_ERROR")
    response = await call(api, tenant, "POST", "/admin/providers", json=body)
    assert response.status_code == 201, response.text
    created = response.json()["data"]
    assert created["source"] == "tenant" and created["client_id"] == "tenant-client" and "client_secret" not in created
    assert_error(await call(api, tenant, "POST", "/admin/providers", json=body), 409, "PROVIDER_EXISTS")

    listed = (await call(api, tenant, "GET", "/providers")).json()["data"]
    assert [(p["id"], p["source"]) for p in listed] == [(created["id"], "tenant")]
    started = await start(api, tenant)
    assert started["authorize_url"].startswith("https://github.example/login/oauth/authorize?")
    assert "client_id=tenant-client" in started["authorize_url"]

    # Another tenant sees the operator's provider only, and none of this tenant's rows.
    assert [p["source"] for p in (await call(api, other, "GET", "/providers")).json()["data"]] == ["platform"]
    assert_error(await call(api, other, "GET", f"/status?state={started['state']}"), 404, "NOT_FOUND")
    assert_error(await call(api, other, "DELETE", f"/admin/providers/{created['id']}"), 404, "NOT_FOUND")

    assert_error(await call(api, tenant, "DELETE", f"/admin/providers/{created['id']}", key=member), 403, "FORBIDDEN")
    assert (await call(api, tenant, "DELETE", f"/admin/providers/{created['id']}")).status_code == 204
    assert [p["source"] for p in (await call(api, tenant, "GET", "/providers")).json()["data"]] == ["platform"]
    assert_error(await call(api, tenant, "DELETE", f"/admin/providers/{created['id']}"), 404, "NOT_FOUND")


async def test_a_tenant_provider_connects_end_to_end(tmp_path: Path, auth_server: AuthServer) -> None:
    async with running_server(tmp_path / "node", egress_proxy=False, allow_private_destinations=True) as api:
        tenant = await api.create_tenant()
        assert (await call(api, tenant, "GET", "/providers")).json()["data"] == []
        auth_server.client_id, auth_server.client_secret = "tenant-client", TENANT_SECRET
        response = await call(api, tenant, "POST", "/admin/providers", json={
            "provider": "acme", "name": "Acme", "client_id": "tenant-client", "client_secret": TENANT_SECRET,
            "authorize_url": f"{auth_server.base}/authorize", "token_url": f"{auth_server.base}/token",
            "allowed_hosts": ["api.acme.test"],
        })
        assert response.status_code == 201, response.text
        started = (await call(api, tenant, "POST", "/start", json={"provider": "acme", "scope": "tenant"})).json()
        page = await browse(api, started["authorize_url"])
        assert page.status_code == 200, page.text
        assert auth_server.token_requests[-1]["client_secret"] == TENANT_SECRET
        status = (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]
        secret = (await api.request("GET", f"{API}/egress/secrets/{status['secret_id']}", key=tenant.key)).json()["data"]
        assert (secret["scope"], secret["type"], secret["allowed_hosts"]) == ("tenant", "oauth_connect", ["api.acme.test"])


async def sandbox_row(api: Api, tenant: Tenant) -> str:
    sandbox_id = new_uuid()
    now = utc_now_iso()
    await api.platform.db.insert(
        "sandboxes",
        {
            "id": sandbox_id, "tenant_id": tenant.id, "owner_user_id": tenant.owner_id,
            "name": "connected", "slug": f"connected-{sandbox_id[:8]}", "template_id": "default", "size": "small",
            "status": "stopped", "region": "local", "auto_stop": None, "workspace_id": tenant.workspace_id,
            "project_id": tenant.project_id, "external_workspace_id": None,
            "external_user_id": None, "external_project_id": None, "metadata": "{}",
            "error": None, "forked_from": None, "last_activity_at": None, "created_at": now, "updated_at": now,
        },
    )
    return sandbox_id


async def test_an_expiring_token_is_refreshed_before_it_is_substituted(oauth_api: Api, auth_server: AuthServer) -> None:
    api = oauth_api
    tenant = await api.create_tenant()
    sandbox_id = await sandbox_row(api, tenant)
    started = await start(api, tenant, expose_as_env="GITHUB_TOKEN")
    assert (await browse(api, started["authorize_url"])).status_code == 200
    secret_id = (await call(api, tenant, "GET", f"/status?state={started['state']}")).json()["data"]["secret_id"]

    context = await egress.load_context(api.platform, "sandbox", sandbox_id)
    assert context is not None and [s.value for s in context.secrets] == [ACCESS]
    assert len(auth_server.token_requests) == 1  # far from expiry: no refresh

    await api.platform.db.execute("UPDATE egress_secrets SET expires_at = ? WHERE id = ?", ("2000-01-01T00:00:00.000000Z", secret_id))
    context = await egress.load_context(api.platform, "sandbox", sandbox_id)
    assert context is not None and [s.value for s in context.secrets] == [ACCESS_2]
    refresh = auth_server.token_requests[-1]
    assert (refresh["grant_type"], refresh["refresh_token"], refresh["client_id"]) == ("refresh_token", REFRESH, "op-client")
    secret = (await api.request("GET", f"{API}/egress/secrets/{secret_id}", key=tenant.key)).json()["data"]
    assert secret["expires_at"] > utc_now_iso()
    placeholder = context.secrets[0].placeholder
    assert (await egress.load_context(api.platform, "sandbox", sandbox_id)).secrets[0].placeholder == placeholder  # type: ignore[union-attr]

    # The rotated refresh token is the one used next; a refused refresh leaves the secret out.
    await api.platform.db.execute("UPDATE egress_secrets SET expires_at = ? WHERE id = ?", ("2000-01-01T00:00:00.000000Z", secret_id))
    auth_server.refresh_token = "revoked"
    context = await egress.load_context(api.platform, "sandbox", sandbox_id)
    assert context is not None and context.secrets == []
    assert auth_server.token_requests[-1]["refresh_token"] == REFRESH + "-rotated"
    # Not tried again at once (the provider is not asked on every request).
    asked = len(auth_server.token_requests)
    assert (await egress.load_context(api.platform, "sandbox", sandbox_id)).secrets == []  # type: ignore[union-attr]
    assert len(auth_server.token_requests) == asked


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "Expecting property name"),
        ('{"provider": "github"}', "JSON list"),
        ('[{"provider": "github", "client_id": "x", "token_url": "http://t"}]', "missing field 'authorize_url'"),
        (None, "No such file"),
    ],
)
async def test_a_broken_providers_file_stops_the_start_with_the_reason(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "providers.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(egress.ProvidersFileError, match=problem):
        async with running_server(tmp_path / "node", egress_proxy=False, oauth_providers=str(path)):
            pass


async def test_a_providers_file_broken_while_running_answers_503(oauth_api: Api) -> None:
    tenant = await oauth_api.create_tenant()
    assert oauth_api.platform.settings.oauth_providers is not None
    Path(oauth_api.platform.settings.oauth_providers).write_text("[{")
    for path, method in (("/providers", "GET"), ("/start", "POST")):
        response = await call(oauth_api, tenant, method, path, json={"provider": "github"} if method == "POST" else None)
        error = assert_error(response, 503, "SERVICE_UNAVAILABLE")
        assert "providers.json" not in error["message"]


async def test_redirect_uri_uses_the_public_api_url_and_old_flows_are_pruned(
    tmp_path: Path, auth_server: AuthServer
) -> None:
    providers = _providers_file(tmp_path, auth_server)
    async with running_server(
        tmp_path / "node", egress_proxy=False, oauth_providers=providers, public_api_url="https://api.corral.example/"
    ) as api:
        tenant = await api.create_tenant()
        first = await start(api, tenant)
        query = parse_qs(urlsplit(first["authorize_url"]).query)
        assert query["redirect_uri"] == ["https://api.corral.example/api/v1/egress/oauth/callback"]
        # A flow that never completed, started two days ago, is gone at the next start.
        await api.platform.db.execute(
            "UPDATE egress_oauth_flows SET created_at = '2000-01-01T00:00:00.000000Z' WHERE state = ?", (first["state"],)
        )
        await start(api, tenant)
        assert (await call(api, tenant, "GET", f"/status?state={first['state']}")).status_code == 404
        rows = await api.platform.db.fetch_value("SELECT COUNT(*) FROM egress_oauth_flows WHERE tenant_id = ?", (tenant.id,))
        assert rows == 1

"""Sandbox previews end to end: expose, the router, preview tokens and share links.

Real sandboxes run the test app (preview_app.py); requests reach the preview router
on loopback with the preview's Host header, as a browser would after DNS.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import trio

from corral.actors.instances.activity import TOUCH_EVERY
from corral.storage import parse_iso, utc_now
from tests.http.preview_support import (
    API,
    expose,
    host_of,
    new_sandbox,
    preview_host,
    preview_token,
    router,
    share,
    start_app,
    wait_ready,
)
from tests.support import Api, Tenant, assert_error


async def running_app(api: Api, tenant: Tenant, port: int = 8000, bind: str = "0.0.0.0") -> dict[str, Any]:
    sandbox = await new_sandbox(api, tenant, name="web")
    await start_app(api, tenant, sandbox["id"], port, bind)
    await expose(api, tenant, sandbox["id"], port)
    await wait_ready(api, sandbox["id"], port)
    return sandbox


async def test_expose_validates_the_port(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await new_sandbox(runtime_api, owner)
    path = f"{API}/sandboxes/{sandbox['id']}/expose"
    missing = await runtime_api.request("POST", path, key=owner.key, json={})
    assert "port is required" in assert_error(missing, 400, "MISSING_PARAM")["message"]
    for bad in (0, 65536, -1, "8000", True, 80.5):
        response = await runtime_api.request("POST", path, key=owner.key, json={"port": bad})
        assert_error(response, 422, "INVALID_PORT")
    agent = await runtime_api.request("POST", path, key=owner.key, json={"port": 49983})
    assert "reserved" in assert_error(agent, 422, "INVALID_PORT")["message"]
    not_json = await runtime_api.request("POST", path, key=owner.key, content=b"{port")
    assert_error(not_json, 400, "INVALID_BODY")
    unknown = await runtime_api.request("POST", f"{API}/sandboxes/00000000-0000-4000-8000-000000000000/expose", key=owner.key, json={"port": 80})
    assert_error(unknown, 404, "NOT_FOUND")


async def test_expose_answers_the_url_and_announces_readiness(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await new_sandbox(api, owner, name="My Site")
    first = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/expose", key=owner.key, json={"port": 8000})
    assert first.status_code == 200, first.text
    body = first.json()
    expected = f"http://8000-{sandbox['slug']}.sandbox.corral.localhost:{api.platform.settings.preview_port}"
    assert body["url"] == expected and body["port"] == 8000 and body["preview_id"].startswith("prv_")
    again = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/expose", key=owner.key, json={"port": 8000})
    assert again.json()["preview_id"] == body["preview_id"]
    await trio.sleep(0.5)
    types = [e.type for e in await api.platform.events.list("sandbox", sandbox["id"])]
    assert "sandbox.preview.ready" not in types  # nothing listens yet
    await start_app(api, owner, sandbox["id"], 8000)
    ready = await wait_ready(api, sandbox["id"], 8000)
    assert ready == {"preview_id": body["preview_id"], "url": expected, "port": 8000}


async def test_preview_token_minting(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await new_sandbox(runtime_api, owner)
    path = f"{API}/sandboxes/{sandbox['id']}/preview-token"
    response = await runtime_api.request("POST", path, key=owner.key, json={})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert set(data) == {"token", "expires_at", "sandbox_id"} and data["sandbox_id"] == sandbox["id"]
    assert data["token"].startswith("mp_")
    remaining = (parse_iso(data["expires_at"]) - utc_now()).total_seconds()
    assert 3590 < remaining <= 3600
    longest = await runtime_api.request("POST", path, key=owner.key, json={"expires_in": 86400})
    assert longest.status_code == 200
    for bad in (0, 86401, "60", True):
        refused = await runtime_api.request("POST", path, key=owner.key, json={"expires_in": bad})
        assert "expires_in" in assert_error(refused, 422, "VALIDATION_ERROR")["details"]


async def test_private_by_default_and_open_with_a_preview_token(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner)
    host = preview_host(sandbox, 8000, api)
    token = await preview_token(api, owner, sandbox["id"])
    async with router(api) as http:
        anonymous = await http.get("/", headers={"Host": host})
        assert anonymous.status_code == 401 and anonymous.headers["content-type"].startswith("text/html")
        assert "This preview is private" in anonymous.text and anonymous.headers["x-corral-preview-error"] == "token_required"

        by_header = await http.get("/headers", headers={"Host": host, "X-Preview-Token": token, "Cookie": "theirs=1"})
        assert by_header.status_code == 200, by_header.text
        seen = {name.lower(): value for name, value in by_header.json()["headers"]}
        assert "x-preview-token" not in seen and seen["cookie"] == "theirs=1"
        assert seen["x-forwarded-for"] == "127.0.0.1" and seen["x-forwarded-proto"] == "http"
        assert seen["x-forwarded-host"] == host and seen["host"] == host

        by_query = await http.get("/headers?a=1&preview_token=" + token + "&b=2", headers={"Host": host})
        assert by_query.status_code == 302
        assert by_query.headers["location"] == "/headers?a=1&b=2"
        cookie = by_query.headers["set-cookie"]
        assert cookie.startswith(f"corral_preview={token};")
        assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie and "Domain" not in cookie
        max_age = int(cookie.split("Max-Age=")[1].split(";")[0])
        assert 3590 < max_age <= 3600

        # `ms=250` is the app's own parameter (not a token): it passes through.
        with_cookie = await http.get("/headers?a=1&ms=250", headers={"Host": host, "Cookie": f"theirs=1; corral_preview={token}"})
        assert with_cookie.status_code == 200
        seen = {name.lower(): value for name, value in with_cookie.json()["headers"]}
        assert seen["cookie"] == "theirs=1" and with_cookie.json()["path"] == "/headers?a=1&ms=250"

        # A POST is not redirected (its body would be lost): forwarded without the token, and the cookie set.
        posted = await http.post(f"/submit?preview_token={token}", headers={"Host": host}, content=b"x" * 5000)
        assert posted.status_code == 200 and posted.json() == {"received": 5000}
        assert posted.headers["set-cookie"].startswith("corral_preview=")

        tampered = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        bad = await http.get("/", headers={"Host": host, "X-Preview-Token": tampered})
        assert bad.status_code == 401 and "not valid" in bad.text

        big = await http.get("/big?n=3000000", headers={"Host": host, "X-Preview-Token": token})
        assert big.status_code == 200 and len(big.content) == 3_000_000


async def test_expired_tokens_and_unexposed_ports(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner)
    # Expiry is whole seconds (int(time) + ttl): a 2 s token lives at least 1 s.
    short = await preview_token(api, owner, sandbox["id"], expires_in=2)
    token = await preview_token(api, owner, sandbox["id"])
    async with router(api) as http:
        assert (await http.get("/", headers={"Host": preview_host(sandbox, 8000, api), "X-Preview-Token": short})).status_code == 200
        await trio.sleep(2.2)
        expired = await http.get("/", headers={"Host": preview_host(sandbox, 8000, api), "X-Preview-Token": short})
        assert expired.status_code == 401 and "expired" in expired.text
        unexposed = await http.get("/", headers={"Host": preview_host(sandbox, 8001, api), "X-Preview-Token": token})
        assert unexposed.status_code == 404 and unexposed.headers["x-corral-preview-error"] == "port_not_exposed"
        nowhere = await http.get("/", headers={"Host": f"8000-nosuchsandbox1.sandbox.corral.localhost:{api.platform.settings.preview_port}"})
        assert nowhere.status_code == 404 and "No such sandbox" in nowhere.text
        foreign = await http.get("/", headers={"Host": f"8000-{sandbox['slug']}.sandbox.evil.test", "X-Preview-Token": token})
        assert foreign.status_code == 404  # a domain that is not the sandbox's


async def test_tokens_of_another_sandbox_are_refused(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    mine = await running_app(api, owner)
    other = await new_sandbox(api, owner, name="other")
    other_token = await preview_token(api, owner, other["id"])
    other_share = await share(api, owner, other["id"])
    stranger = await api.create_tenant("Stranger")
    strangers_sandbox = await new_sandbox(api, stranger)
    strangers_token = await preview_token(api, stranger, strangers_sandbox["id"])
    host = preview_host(mine, 8000, api)
    async with router(api) as http:
        for headers in (
            {"X-Preview-Token": other_token},
            {"X-Preview-Token": strangers_token},
            {"Cookie": f"corral_preview={other_share['token']}"},
        ):
            refused = await http.get("/", headers={"Host": host, **headers})
            assert refused.status_code == 403, refused.text
            assert "another sandbox" in refused.text and refused.headers["content-type"].startswith("text/html")
        by_link = await http.get(f"/?ms={other_share['token']}", headers={"Host": host})
        assert by_link.status_code == 403


async def test_share_links_open_and_are_revoked_at_once(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner)
    created = await share(api, owner, sandbox["id"])
    assert set(created) >= {"id", "token", "url", "expires_at", "sandbox_id"}
    assert created["id"].startswith("shr_") and created["token"].startswith("ms_") and created["expires_at"] is None
    assert created["sandbox_id"] == sandbox["id"] and created["url"].endswith(f"/?ms={created['token']}")
    assert created["url"].startswith(f"http://8000-{sandbox['slug']}.sandbox.corral.localhost:")
    listed = await api.request("GET", f"{API}/sandboxes/{sandbox['id']}/shares", key=owner.key)
    assert [s["id"] for s in listed.json()["data"]] == [created["id"]]
    assert "token" not in listed.json()["data"][0] and created["token"] not in listed.text

    preview_port = str(api.platform.settings.preview_port)
    host = host_of(created["url"])

    def curl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["curl", "-s", "-i", "--resolve", f"{host.split(':')[0]}:{preview_port}:127.0.0.1", *args],
            capture_output=True, text=True, timeout=30,
        )

    opened = await trio.to_thread.run_sync(lambda: curl("-L", "-c", "-", created["url"]))
    assert "HTTP/1.1 302" in opened.stdout and "Hello from the sandbox" in opened.stdout

    revoked = await api.request("DELETE", f"{API}/sandboxes/{sandbox['id']}/shares/{created['id']}", key=owner.key)
    assert revoked.status_code == 200 and revoked.json()["data"]["revoked"] is True
    refused = await trio.to_thread.run_sync(lambda: curl(created["url"]))
    assert refused.stdout.startswith("HTTP/1.1 401") and "This link was revoked" in refused.stdout
    async with router(api) as http:
        by_cookie = await http.get("/", headers={"Host": host, "Cookie": f"corral_preview={created['token']}"})
    assert by_cookie.status_code == 401 and "Max-Age=0" in by_cookie.headers["set-cookie"]

    again = await api.request("DELETE", f"{API}/sandboxes/{sandbox['id']}/shares/{created['id']}", key=owner.key)
    assert_error(again, 404, "NOT_FOUND")
    malformed = await api.request("DELETE", f"{API}/sandboxes/{sandbox['id']}/shares/nope", key=owner.key)
    assert_error(malformed, 400, "INVALID_ID")
    listed = await api.request("GET", f"{API}/sandboxes/{sandbox['id']}/shares", key=owner.key)
    assert listed.json()["data"] == []


async def test_share_expiry_and_validation(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner)
    path = f"{API}/sandboxes/{sandbox['id']}/shares"
    for body in ({"expires_in": 0}, {"expires_in": "1"}, {"port": 0}):
        response = await api.request("POST", path, key=owner.key, json=body)
        assert response.status_code == 422, response.text
    year = await share(api, owner, sandbox["id"], expires_in=365 * 86400 * 10)  # no maximum
    assert (parse_iso(year["expires_at"]) - utc_now()).days > 3600
    brief = await share(api, owner, sandbox["id"], expires_in=1)
    on_port = await share(api, owner, sandbox["id"], port=9000)
    assert on_port["url"].startswith(f"http://9000-{sandbox['slug']}.")
    host = preview_host(sandbox, 8000, api)
    async with router(api) as http:
        assert (await http.get("/", headers={"Host": host, "Cookie": f"corral_preview={brief['token']}"})).status_code == 200
        await trio.sleep(1.2)
        expired = await http.get("/", headers={"Host": host, "Cookie": f"corral_preview={brief['token']}"})
    assert expired.status_code == 401 and "expired" in expired.text


async def test_nothing_listening_is_a_clear_502_page(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await new_sandbox(api, owner)
    await expose(api, owner, sandbox["id"], 3000)
    token = await preview_token(api, owner, sandbox["id"])
    async with router(api) as http:
        response = await http.get("/", headers={"Host": preview_host(sandbox, 3000, api), "X-Preview-Token": token})
    assert response.status_code == 502
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert "Nothing is listening yet" in response.text and "port 3000" in response.text


async def test_apps_bound_to_loopback_are_reached(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner, port=5173, bind="127.0.0.1")  # as Vite and Flask bind by default
    token = await preview_token(api, owner, sandbox["id"])
    async with router(api) as http:
        for _ in range(3):
            response = await http.get("/", headers={"Host": preview_host(sandbox, 5173, api), "X-Preview-Token": token})
            assert response.status_code == 200 and "Hello from the sandbox" in response.text


async def test_a_slow_chunked_response_streams_through(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner)
    token = await preview_token(api, owner, sandbox["id"])
    async with router(api) as http, http.stream("GET", "/slow", headers={"Host": preview_host(sandbox, 8000, api), "X-Preview-Token": token}) as response:
        assert response.status_code == 200
        chunks = response.aiter_raw()
        with trio.fail_after(10):
            first = await chunks.__anext__()
        assert first == b"first\n"  # while the app still holds the second chunk back
        released = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/exec", key=owner.key, json={"command": "touch /tmp/release"})
        assert released.status_code == 200
        rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"second\n"


async def test_preview_traffic_counts_as_activity(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner)
    token = await preview_token(api, owner, sandbox["id"])
    old = "2020-01-01T00:00:00.000000Z"
    await api.platform.db.execute("UPDATE sandboxes SET last_activity_at = ? WHERE id = ?", (old, sandbox["id"]))
    # Activity told within TOUCH_EVERY of the app's start (its execs) is not told again.
    await trio.sleep(TOUCH_EVERY + 0.05)
    async with router(api) as http:
        assert (await http.get("/", headers={"Host": preview_host(sandbox, 8000, api), "X-Preview-Token": token})).status_code == 200
    deadline = time.monotonic() + 5
    while True:
        value = await api.platform.db.fetch_value("SELECT last_activity_at FROM sandboxes WHERE id = ?", (sandbox["id"],))
        if value != old:
            break
        assert time.monotonic() < deadline, "preview traffic did not mark the sandbox active"
        await trio.sleep(0.05)
    assert (utc_now() - parse_iso(value)).total_seconds() < 10


async def test_stopping_and_destroying_the_sandbox(runtime_api: Api, owner: Tenant) -> None:
    api = runtime_api
    sandbox = await running_app(api, owner)
    token = await preview_token(api, owner, sandbox["id"])
    link = await share(api, owner, sandbox["id"])
    host = preview_host(sandbox, 8000, api)
    async with router(api) as http:
        assert (await http.get("/", headers={"Host": host, "X-Preview-Token": token})).status_code == 200
        stopped = await api.request("POST", f"{API}/sandboxes/{sandbox['id']}/stop", key=owner.key)
        assert stopped.status_code == 200
        unavailable = await http.get("/", headers={"Host": host, "X-Preview-Token": token})
        assert unavailable.status_code == 503 and "is stopped" in unavailable.text
        destroyed = await api.request("DELETE", f"{API}/sandboxes/{sandbox['id']}", key=owner.key)
        assert destroyed.status_code == 200
        for headers in ({"X-Preview-Token": token}, {"Cookie": f"corral_preview={link['token']}"}):
            gone = await http.get("/", headers={"Host": host, **headers})
            assert gone.status_code == 404 and "No such sandbox" in gone.text

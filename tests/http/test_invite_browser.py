"""A real browser: an invitee opens the link from their invite e-mail, signs in on the
landing page and accepts, as a new user with no organization would."""

from __future__ import annotations

import json

from tests.browser import open_browser, server_ports
from tests.http.people import call, login, new_person, outbox, owner_of
from tests.support import PASSWORD, Api, Tenant


async def test_a_new_user_accepts_an_org_invite_in_chromium(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    created = await call(api, owner, "POST", f"/tenants/{tenant.id}/invites", json={"email": "browser@example.test", "role": "admin"})
    assert created.status_code == 201, created.text
    invite_url = created.json()["data"]["invite_url"]
    assert invite_url in (await outbox(api))[0]["body"]
    assert invite_url.startswith("http://corral.localhost:")
    invitee = await new_person(api, email="browser@example.test")  # an account in no organization yet

    async with open_browser(host_rules="MAP corral.localhost 127.0.0.1", ports=server_ports(api)) as browser:
        legacy = invite_url.replace("/invites/", "/invite/")
        page = await browser.new_page(legacy)  # the legacy link redirects to the landing page
        assert await page.evaluate("location.pathname") == "/invites/" + invite_url.rsplit("/", 1)[1]
        heading = await page.evaluate("document.querySelector('h1').textContent")
        assert heading == f"Join {tenant.name}"
        assert "as admin" in await page.evaluate("document.body.textContent")
        await page.evaluate(
            f"document.getElementById('email').value = {json.dumps(invitee.email)};"
            f"document.getElementById('password').value = {json.dumps(PASSWORD)};"
            "document.querySelector('#accept button').click()"
        )
        status = await page.wait_for("document.getElementById('result').textContent")
        assert status.startswith("Invite accepted"), status

    session = await login(api, invitee.email)
    assert session["tenant_id"] == tenant.id
    me = await api.request("GET", "/api/v1/tenant", key=session["token"])
    assert me.json()["data"]["role"] == "admin"


async def test_the_page_reports_a_wrong_account(api: Api, tenant: Tenant) -> None:
    owner = await owner_of(api, tenant)
    created = await call(api, owner, "POST", f"/tenants/{tenant.id}/invites", json={"email": "right@example.test", "role": "member"})
    invite_url = created.json()["data"]["invite_url"]
    wrong = await new_person(api, email="wrong@example.test")
    async with open_browser(host_rules="MAP corral.localhost 127.0.0.1", ports=server_ports(api)) as browser:
        page = await browser.new_page(invite_url)
        await page.evaluate(
            f"document.getElementById('email').value = {json.dumps(wrong.email)};"
            f"document.getElementById('password').value = {json.dumps(PASSWORD)};"
            "document.querySelector('#accept button').click()"
        )
        status = await page.wait_for("document.getElementById('result').textContent")
        assert "another e-mail address" in status

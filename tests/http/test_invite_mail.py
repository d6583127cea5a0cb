"""Invite e-mail by SMTP (contract §7), against a real SMTP server (aiosmtpd) on loopback.

Every invite e-mail goes to the operator outbox; with CORRAL_SMTP_URL it is also sent.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from corral.actors.tenancy.mail import build_message, parse_smtp_url
from tests.http.people import call, outbox, owner_of
from tests.support import free_port, running_server


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: Message
    tls: bool
    login: str | None


@dataclass
class Inbox:
    """An aiosmtpd handler that keeps what it receives."""

    received: list[Received] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        login = session.auth_data.login.decode() if session.authenticated else None
        self.received.append(
            Received(envelope.mail_from, list(envelope.rcpt_tos), message_from_bytes(envelope.content), session.ssl is not None, login)
        )
        return "250 OK"

    async def wait(self, count: int = 1, timeout: float = 10) -> list[Received]:
        with trio.fail_after(timeout):
            while len(self.received) < count:
                await trio.sleep(0.02)
        return self.received


def _check_password(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (b"mailer", b"s3cret pass")
    return AuthResult(success=ok, auth_data=auth_data)


@contextlib.contextmanager
def smtp_server(**options: Any) -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port, **options)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


async def _invite(api: Any, email: str = "mailed@example.test") -> dict[str, Any]:
    tenant = await api.create_tenant("Mail Co")
    owner = await owner_of(api, tenant)
    response = await call(api, owner, "POST", f"/workspaces/{tenant.workspace_id}/invites", json={"email": email, "role": "member"})
    assert response.status_code == 201, response.text
    invite: dict[str, Any] = response.json()["data"]
    return invite


async def test_invites_are_sent_by_smtp_and_kept_in_the_outbox(tmp_path_factory: pytest.TempPathFactory) -> None:
    with smtp_server() as (inbox, port):
        url = f"smtp://127.0.0.1:{port}?from=Corral%20Invites%20%3Cinvites%40corral.test%3E"
        async with running_server(tmp_path_factory.mktemp("smtp"), smtp_url=url) as api:
            invite = await _invite(api)
            (got,) = await inbox.wait()
            assert got.recipients == ["mailed@example.test"]
            assert got.sender == "invites@corral.test"
            assert got.message["From"] == "Corral Invites <invites@corral.test>"
            assert got.message["To"] == "mailed@example.test"
            assert "Default" in got.message["Subject"] and "Mail Co" in got.message["Subject"]
            assert got.message["Message-ID"] and got.message["Date"]
            body = got.message.get_payload(decode=True).decode()
            assert invite["invite_url"] in body
            assert (got.tls, got.login) == (False, None)
            kept = (await outbox(api))[0]
            assert (kept["to"], kept["subject"]) == ("mailed@example.test", got.message["Subject"])
            assert invite["invite_url"] in kept["body"]


async def test_smtp_login_over_starttls(tmp_path_factory: pytest.TempPathFactory) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_context)
    ca_file = Path(str(tmp_path_factory.mktemp("ca"))) / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with smtp_server(tls_context=server_context, require_starttls=True, authenticator=_check_password) as (inbox, port):
        url = f"smtp://mailer:s3cret%20pass@127.0.0.1:{port}"
        async with running_server(tmp_path_factory.mktemp("tls"), smtp_url=url, ca_bundle=str(ca_file)) as api:
            invite = await _invite(api, "secure@example.test")
            (got,) = await inbox.wait()
            assert (got.tls, got.login) == (True, "mailer")
            assert got.sender == "noreply@corral.localhost"
            assert invite["invite_url"] in got.message.get_payload(decode=True).decode()


async def test_an_untrusted_certificate_is_refused_and_the_outbox_keeps_the_mail(
    tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()  # not given to Corral
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    with smtp_server(tls_context=server_context, require_starttls=True) as (inbox, port):
        async with running_server(tmp_path_factory.mktemp("untrusted"), smtp_url=f"smtp://127.0.0.1:{port}") as api:
            invite = await _invite(api, "careful@example.test")
            with trio.fail_after(10):
                while not any("could not send e-mail" in r.message for r in caplog.records):
                    await trio.sleep(0.02)
            assert inbox.received == []
            assert invite["invite_url"] in (await outbox(api))[0]["body"]
            logged = " ".join(r.getMessage() for r in caplog.records if r.name == "corral.mail")
            assert "careful@example.test" in logged and "SSLCertVerificationError" in logged
            assert invite["invite_url"] not in logged


async def test_an_unreachable_smtp_server_does_not_fail_the_invite(tmp_path_factory: pytest.TempPathFactory) -> None:
    async with running_server(tmp_path_factory.mktemp("down"), smtp_url=f"smtp://127.0.0.1:{free_port()}") as api:
        invite = await _invite(api, "patient@example.test")
        assert invite["invite_url"] in (await outbox(api))[0]["body"]
        assert (await api.client.get("/healthz")).status_code == 200


def test_smtp_urls() -> None:
    target = parse_smtp_url("smtps://me%40corp:p%3Ass@mail.corp.test?from=ops%40corp.test", "x@y.test")
    assert (target.host, target.port, target.implicit_tls, target.username, target.password, target.sender) == (
        "mail.corp.test", 465, True, "me@corp", "p:ss", "ops@corp.test",
    )
    plain = parse_smtp_url("smtp://mail.corp.test", "Corral <noreply@corral.localhost>")
    assert (plain.port, plain.implicit_tls, plain.username, plain.sender) == (25, False, None, "Corral <noreply@corral.localhost>")
    for bad in ("http://mail.corp.test", "smtp://", "mail.corp.test:25"):
        with pytest.raises(ValueError):
            parse_smtp_url(bad, "x@y.test")


def test_subjects_stay_on_one_line() -> None:
    message = build_message("a@b.test", "c@d.test", "Join\r\nBcc: victim@example.test", "body")
    assert message["Subject"] == "Join Bcc: victim@example.test"
    assert message["Bcc"] is None

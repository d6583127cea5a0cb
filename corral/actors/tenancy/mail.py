"""E-mail (contract §7): every message goes to the operator outbox; with `CORRAL_SMTP_URL`
it is also sent by SMTP.

`CORRAL_SMTP_URL` is `smtp://[user:password@]host[:port][?from=address]` (port 25;
STARTTLS whenever the server offers it) or `smtps://...` (TLS from the start, port
465). Certificates are verified against the system store plus `CORRAL_CA_BUNDLE`.
Credentials are only ever sent over TLS, or to a loopback server.

Sending runs in a worker thread (the standard library's `smtplib` blocks) in the
background, so a slow or absent mail server never holds up the request that caused
the mail; a failure is logged (recipient and error, never the body, which may hold
an invite link) and the outbox still has the message.
"""

from __future__ import annotations

import ipaddress
import logging
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from urllib.parse import parse_qs, unquote, urlsplit

import trio

from corral.config import Settings

from . import outbox
from .services import TenancyServices

log = logging.getLogger("corral.mail")

SMTP_TIMEOUT = 30.0


@dataclass(frozen=True)
class SmtpTarget:
    host: str
    port: int
    implicit_tls: bool
    username: str | None
    password: str | None
    sender: str


def parse_smtp_url(url: str, default_sender: str) -> SmtpTarget:
    parts = urlsplit(url)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ValueError("CORRAL_SMTP_URL must look like smtp://[user:password@]host[:port] or smtps://...")
    implicit_tls = parts.scheme == "smtps"
    sender = parse_qs(parts.query).get("from", [default_sender])[0]
    return SmtpTarget(
        host=parts.hostname,
        port=parts.port or (465 if implicit_tls else 25),
        implicit_tls=implicit_tls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        sender=sender,
    )


def default_sender(settings: Settings) -> str:
    return f"Corral <noreply@{settings.public_domain}>"


def _one_line(text: str) -> str:
    """Header values cannot hold line breaks (a workspace name might)."""
    return " ".join(text.split())


def build_message(sender: str, to: str, subject: str, body: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = _one_line(subject)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2].rstrip(">") or None)
    message.set_content(body)
    return message


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_bundle:
        context.load_verify_locations(ca_bundle)
    return context


def deliver(target: SmtpTarget, message: EmailMessage, ca_bundle: str | None = None) -> None:
    """Send one message (blocking; run it in a thread)."""
    context = _tls_context(ca_bundle)
    client: smtplib.SMTP
    if target.implicit_tls:
        client = smtplib.SMTP_SSL(target.host, target.port, timeout=SMTP_TIMEOUT, context=context)
    else:
        client = smtplib.SMTP(target.host, target.port, timeout=SMTP_TIMEOUT)
    with client:
        client.ehlo()
        encrypted = target.implicit_tls
        if not encrypted and client.has_extn("starttls"):
            client.starttls(context=context)
            client.ehlo()
            encrypted = True
        if target.username is not None:
            if not encrypted and not _is_loopback(target.host):
                raise smtplib.SMTPException("refusing to send SMTP credentials over an unencrypted connection")
            client.login(target.username, target.password or "")
        client.send_message(message)


async def send_mail(platform: TenancyServices, to: str, subject: str, body: str) -> str:
    """Queue the message in the operator outbox and, with SMTP configured, send it in
    the background. Returns the outbox id."""
    mail_id = await outbox.queue_mail(platform.db, to, subject, body)
    settings = platform.settings
    if settings.smtp_url:
        platform.nursery.start_soon(_send_logged, settings, to, subject, body, mail_id)
    return mail_id


async def _send_logged(settings: Settings, to: str, subject: str, body: str, mail_id: str) -> None:
    assert settings.smtp_url
    try:
        target = parse_smtp_url(settings.smtp_url, default_sender(settings))
        message = build_message(target.sender, to, subject, body)
        with trio.fail_after(SMTP_TIMEOUT * 2):
            await trio.to_thread.run_sync(deliver, target, message, settings.ca_bundle, abandon_on_cancel=True)
    except Exception as error:
        log.warning("could not send e-mail %s to %s by SMTP: %s: %s", mail_id, to, type(error).__name__, error)
    else:
        log.info("sent e-mail %s to %s by SMTP", mail_id, to)

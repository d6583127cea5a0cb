"""One signed attempt for one webhook: decrypt its secret, sign the body, send."""

from __future__ import annotations

from corral.storage import DecryptionError, SecretBox, associated_data

from .sender import Outcome, Sender
from .signing import signature_headers
from .store import WebhookRecord

SECRET_PURPOSE = "webhook.secret"


def secret_aad(tenant_id: str, webhook_id: str) -> bytes:
    """The secret is bound to its tenant and webhook: a copied ciphertext does not decrypt."""
    return associated_data(tenant_id, webhook_id, SECRET_PURPOSE)


async def send_attempt(
    sender: Sender,
    secrets: SecretBox,
    webhook: WebhookRecord,
    *,
    delivery_id: str,
    event_id: str,
    event_type: str,
    payload: str,
) -> Outcome:
    """POST `payload` to `webhook` with its own headers and both signatures."""
    try:
        secret = secrets.decrypt_text(webhook.secret, secret_aad(webhook.tenant_id, webhook.id))
    except DecryptionError:
        return Outcome(False, None, 0, "the webhook secret could not be decrypted (key-encryption key changed?)")
    body = payload.encode()
    headers = {
        **webhook.headers,
        **signature_headers(
            secret=secret, body=body, event_id=event_id, event_type=event_type, delivery_id=delivery_id
        ),
    }
    return await sender.send(webhook.url, body, headers)

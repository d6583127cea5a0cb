"""Run tokens and signed artifact URLs: HMACs under the node's signing secret.

A run token (`CORRAL_RUN_TOKEN`) names its run and is an HMAC of its id, so nothing
is stored and it is only good for that run (and only while the run is running, the
usage endpoint checks). A signed download URL carries its expiry and an HMAC over
run, artifact and expiry: changing any of the three, or waiting past the expiry,
makes it refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

RUN_TOKEN_PREFIX = "crt_"
SIGNED_URL_SECONDS = 15 * 60


def _mac(secret: str, message: str) -> str:
    digest = hmac.new(secret.encode(), message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def run_token(secret: str, run_id: str) -> str:
    return f"{RUN_TOKEN_PREFIX}{run_id}.{_mac(secret, 'agent-run-usage:' + run_id)}"


def run_of_token(secret: str, token: str) -> str | None:
    """The run a valid token names, else None."""
    if not token.startswith(RUN_TOKEN_PREFIX):
        return None
    run_id, _, mac = token[len(RUN_TOKEN_PREFIX):].partition(".")
    if not run_id or not mac or not hmac.compare_digest(mac, _mac(secret, "agent-run-usage:" + run_id)):
        return None
    return run_id


def download_signature(secret: str, run_id: str, artifact_id: str, expires: int) -> str:
    return _mac(secret, f"agent-run-artifact:{run_id}:{artifact_id}:{expires}")


def signed_query(secret: str, run_id: str, artifact_id: str, now: float | None = None) -> tuple[int, str]:
    """(expires, signature) of a URL good for `SIGNED_URL_SECONDS` from now."""
    expires = int(now if now is not None else time.time()) + SIGNED_URL_SECONDS
    return expires, download_signature(secret, run_id, artifact_id, expires)


def signature_valid(secret: str, run_id: str, artifact_id: str, expires: int, signature: str, now: float | None = None) -> bool:
    if expires < int(now if now is not None else time.time()):
        return False
    return hmac.compare_digest(signature, download_signature(secret, run_id, artifact_id, expires))

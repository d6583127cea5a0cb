"""Run tokens and signed artifact URLs."""

from __future__ import annotations

from corral.actors.agent_runs import signing

SECRET = "s" * 48


def test_run_tokens_name_their_run_and_cannot_be_forged() -> None:
    token = signing.run_token(SECRET, "run-1")
    assert token.startswith("crt_run-1.")
    assert signing.run_of_token(SECRET, token) == "run-1"
    assert signing.run_of_token("other" * 10, token) is None
    assert signing.run_of_token(SECRET, token.replace("run-1", "run-2")) is None
    assert signing.run_of_token(SECRET, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    for junk in ("", "crt_", "crt_run-1", "msk_u_x", "crt_.abc"):
        assert signing.run_of_token(SECRET, junk) is None


def test_signed_urls_expire_and_bind_run_artifact_and_expiry() -> None:
    expires, signature = signing.signed_query(SECRET, "r", "a", now=1000)
    assert expires == 1000 + 15 * 60
    assert signing.signature_valid(SECRET, "r", "a", expires, signature, now=1000)
    assert signing.signature_valid(SECRET, "r", "a", expires, signature, now=expires)
    assert not signing.signature_valid(SECRET, "r", "a", expires, signature, now=expires + 1)
    assert not signing.signature_valid(SECRET, "r", "b", expires, signature, now=1000)
    assert not signing.signature_valid(SECRET, "x", "a", expires, signature, now=1000)
    assert not signing.signature_valid(SECRET, "r", "a", expires + 1, signature, now=1000)
    assert not signing.signature_valid("other" * 10, "r", "a", expires, signature, now=1000)

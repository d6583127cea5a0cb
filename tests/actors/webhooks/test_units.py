"""The pure parts of webhooks: retry schedule, address rules, URL rules, body checks, signatures."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import random

import pytest

from corral.actors.webhooks import (
    EVENT_TYPES,
    DestinationRefused,
    InvalidUrl,
    base_delay,
    check_destination,
    new_secret,
    parse_url,
    parse_webhook_fields,
    refused_reason,
    retry_delay,
    secret_preview,
    signature_headers,
    subscribed,
)
from corral.errors import ApiError


def test_schedule_follows_the_specification() -> None:
    assert base_delay(2, 3) == 30
    assert base_delay(3, 3) == 300
    assert base_delay(4, 3) == 600
    # attempt 4 and later: exponential from 10 minutes, at most retry_count x 10 minutes ...
    assert [base_delay(n, 10) for n in range(4, 12)] == [600, 1200, 2400, 4800, 6000, 6000, 6000, 6000]
    assert base_delay(5, 3) == 1200 and base_delay(6, 3) == 1800
    # ... and never more than 6 hours
    assert all(base_delay(n, 10) <= 6 * 3600 for n in range(2, 40))


def test_no_attempt_beyond_retry_count() -> None:
    assert retry_delay(2, 0) is None
    assert retry_delay(2, 1) is not None and retry_delay(3, 1) is None
    assert retry_delay(11, 10) is not None and retry_delay(12, 10) is None
    assert retry_delay(1, 3) is None


def test_jitter_stays_within_ten_percent_and_scale_applies() -> None:
    rng = random.Random(7)
    delays = [retry_delay(2, 3, rng=rng) for _ in range(500)]
    assert all(d is not None and 27.0 <= d <= 33.0 for d in delays)
    assert len({round(d or 0, 3) for d in delays}) > 100, "no jitter"
    scaled = retry_delay(3, 3, scale=0.01, rng=random.Random(1))
    assert scaled is not None and 2.7 <= scaled <= 3.3


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "172.16.0.9", "192.168.1.1", "169.254.169.254", "169.254.3.4", "100.64.0.1",
     "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "fe80::1", "fc00::5", "::", "ff02::1", "::ffff:127.0.0.1",
     "::ffff:10.0.0.1", "2002:7f00:1::1", "64:ff9b::a00:1", "fd00:ec2::254", "100.100.100.200"],
)
def test_private_addresses_are_refused(address: str) -> None:
    assert refused_reason(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert refused_reason(ipaddress.ip_address(address)) is None


async def test_check_destination_resolves_names() -> None:
    with pytest.raises(DestinationRefused, match=r"127\.0\.0\.1"):
        await check_destination(parse_url("https://localhost:8443/x"), allow_private=False)
    allowed = await check_destination(parse_url("https://localhost:8443/x"), allow_private=True)
    assert "127.0.0.1" in allowed.addresses
    with pytest.raises(DestinationRefused, match="could not be resolved"):
        await check_destination(parse_url("https://no-such-host.invalid/"), allow_private=True)


def test_url_rules() -> None:
    target = parse_url("https://Example.COM:8443/a/b?c=d")
    assert (target.host, target.port, target.path, target.host_header) == ("example.com", 8443, "/a/b?c=d", "example.com:8443")
    assert parse_url("https://[::1]/").host_header == "[::1]"
    assert parse_url("https://example.com").path == "/"
    for bad, reason in [
        ("http://example.com/", "https"),
        ("ftp://example.com/", "https"),
        ("https:///path", "host"),
        ("https://user:pw@example.com/", "credentials"),
        ("https://example.com/#frag", "fragment"),
        ("https://example.com/a b", "spaces"),
        ("https://example.com:99999/", "valid URL"),
        ("https://example.com/" + "a" * 3000, "at most"),
    ]:
        with pytest.raises(InvalidUrl, match=reason):
            parse_url(bad)


def _details(body: dict[str, object], *, creating: bool = True) -> dict[str, str]:
    with pytest.raises(ApiError) as raised:
        parse_webhook_fields(body, creating=creating)
    assert raised.value.status == 422 and raised.value.code == "VALIDATION_ERROR"
    assert raised.value.details is not None
    return raised.value.details


def test_body_validation() -> None:
    url = "https://example.com/hook"
    assert _details({}) == {"url": "is required"}
    assert "url" in _details({"url": 5})
    assert "https" in _details({"url": "http://example.com/"})["url"]
    assert "unknown event type" in _details({"url": url, "events": ["sandbox.created", "sandbox.exploded"]})["events"]
    assert "events" in _details({"url": url, "events": "sandbox.created"})
    assert "events" in _details({"url": url, "events": ["sandbox.*"]})
    assert _details({"url": url, "retry_count": 11}) == {"retry_count": "must be between 0 and 10"}
    assert "retry_count" in _details({"url": url, "retry_count": -1})
    assert "retry_count" in _details({"url": url, "retry_count": 2.5})
    assert "retry_count" in _details({"url": url, "retry_count": True})
    assert "retry_count" in _details({"url": url, "retry_count": "3"})
    assert "headers" in _details({"url": url, "headers": ["X-A"]})
    assert "headers" in _details({"url": url, "headers": {"X-A": 1}})
    assert "headers" in _details({"url": url, "headers": {"bad name": "v"}})
    assert "headers" in _details({"url": url, "headers": {"X-A": "a\r\nX-Injected: 1"}})
    for reserved in ("Host", "content-type", "X-Service-Signature", "x-service-anything", "Webhook-Id", "User-Agent"):
        assert "set by the platform" in _details({"url": url, "headers": {reserved: "v"}})["headers"]
    assert "headers" in _details({"url": url, "headers": {f"X-{i}": "v" for i in range(21)}})
    assert "metadata" in _details({"url": url, "metadata": [1]})
    assert "metadata" in _details({"url": url, "metadata": {"a": "x" * 20000}})
    assert "name" in _details({"url": url, "name": 7})
    several = _details({"url": "ftp://x", "retry_count": 99, "events": ["nope"]})
    assert set(several) == {"url", "retry_count", "events"}

    fields = parse_webhook_fields(
        {"url": url, "events": ["sandbox.ready", "sandbox.ready"], "headers": {"X-Team": "core"}, "retry_count": 0},
        creating=True,
    )
    assert fields.events == ["sandbox.ready"] and fields.headers == {"X-Team": "core"} and fields.retry_count == 0
    assert parse_webhook_fields({}, creating=False).url is None


def test_subscription_matching() -> None:
    assert all(subscribed([], event_type) for event_type in EVENT_TYPES)
    assert not subscribed([], "sandbox.exec.stdout")
    assert subscribed(["sandbox.ready"], "sandbox.ready")
    assert not subscribed(["sandbox.ready"], "sandbox.created")


def test_secret_and_signatures_match_an_independent_computation() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert secret_preview(secret) == "whsec_..." + secret[-4:]
    assert new_secret() != secret
    body = b'{"id":"evt_1","type":"webhook.test"}'
    headers = signature_headers(
        secret=secret, body=body, event_id="evt_1", event_type="webhook.test", delivery_id="del_1", timestamp=1_700_000_000
    )
    assert headers["X-Service-Signature"] == "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    key = base64.b64decode(secret.split("_", 1)[1])
    digest = hmac.new(key, b"evt_1.1700000000." + body, hashlib.sha256).digest()
    assert headers["webhook-signature"] == "v1," + base64.b64encode(digest).decode()
    assert headers["webhook-id"] == "evt_1" and headers["webhook-timestamp"] == "1700000000"
    assert headers["X-Service-Event"] == "webhook.test" and headers["X-Service-Delivery"] == "del_1"


def test_standard_webhooks_reference_vector() -> None:
    """The example of the Standard Webhooks specification's reference libraries."""
    from corral.actors.webhooks import standard_signature

    signature = standard_signature(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

"""Agent-run artifacts (blob store, bearer and signed downloads) and the run's usage report."""

from __future__ import annotations

import hashlib
import json
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import trio

from corral.actors.agent_runs import signing
from corral.ids import new_uuid
from tests.actors.webhooks.receiver import https_receiver
from tests.support import API, RUNTIME_SETTINGS, Api, Tenant, assert_error, running_server

from .test_agent_runs import event_types, start_run
from .test_sandboxes import create, run


async def test_artifacts_are_kept_byte_for_byte_and_downloaded(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    sid = sandbox["id"]
    made = await start_run(
        runtime_api, owner, sandbox_id=sid, prompt="p",
        command="mkdir -p /workspace/out && head -c 300000 /dev/urandom > /workspace/out/blob.bin && printf '<h1>hi</h1>' > /workspace/out/page.html",
        metadata={"artifact_paths": ["/workspace/out/blob.bin", "/workspace/out/page.html", "/workspace/missing.txt"]},
    )
    assert made["status"] == "succeeded"
    assert await event_types(runtime_api, owner, made["id"]) == [
        "created", "command_started", "process_started", "artifacts_recorded", "command_finished",
    ]
    listed = await runtime_api.request("GET", f"{API}/agent-runs/{made['id']}/artifacts", key=owner.key)
    assert listed.status_code == 200, listed.text
    blob, page, missing = listed.json()["data"]
    assert set(blob) >= {"id", "path", "name", "size_bytes", "content_type", "status", "sha256", "persisted",
                         "storage_backend", "persisted_at", "signed_download_url"}
    assert (blob["name"], blob["status"], blob["persisted"], blob["size_bytes"]) == ("blob.bin", "available", True, 300000)
    assert blob["storage_backend"] == "local" and blob["persisted_at"] is not None
    assert page["content_type"] == "text/html" and page["status"] == "available"
    assert missing["status"] == "failed" and missing["persisted"] is False and missing["signed_download_url"] is None
    assert missing["sha256"] is None and missing["error"] == "file not found"

    # Bearer download: the same bytes as in the sandbox, with their hash.
    inside = await runtime_api.request("GET", f"{API}/sandboxes/{sid}/files/download", key=owner.key, params={"path": "/workspace/out/blob.bin"})
    download = await runtime_api.request("GET", f"{API}/agent-runs/{made['id']}/artifacts/{blob['id']}/download", key=owner.key)
    assert download.status_code == 200
    assert download.content == inside.content and hashlib.sha256(download.content).hexdigest() == blob["sha256"]
    assert download.headers["content-disposition"].startswith('attachment; filename="blob.bin"')
    inline = await runtime_api.request("GET", f"{API}/agent-runs/{made['id']}/artifacts/{page['id']}/download?disposition=inline", key=owner.key)
    assert inline.content == b"<h1>hi</h1>" and inline.headers["content-disposition"].startswith("inline;")
    assert inline.headers["content-type"].startswith("text/html")
    # The bytes outlive the sandbox.
    assert (await runtime_api.request("DELETE", f"{API}/sandboxes/{sid}", key=owner.key)).status_code == 200

    # Signed URL: no bearer needed.
    signed = await runtime_api.client.get(blob["signed_download_url"])
    assert signed.status_code == 200 and signed.content == download.content
    parts = urlsplit(blob["signed_download_url"])
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert int(query["expires"]) - time.time() <= 15 * 60 + 1
    path = parts.path
    # Altered: another artifact, another expiry, another signature, another run.
    for bad_path, bad_query in (
        (path.replace(blob["id"], page["id"]), query),
        (path, {**query, "expires": str(int(query["expires"]) + 60)}),
        (path, {**query, "signature": query["signature"][:-2] + "AA"}),
        (path.replace(made["id"], new_uuid()), query),
        (path, {"expires": query["expires"]}),
    ):
        assert_error(await runtime_api.client.get(bad_path, params=bad_query), 401, "INVALID_SIGNATURE")
    # Expired: a correctly signed URL whose time has passed.
    secret = runtime_api.platform.jwt_secret
    past = int(time.time()) - 1
    expired = {"expires": str(past), "signature": signing.download_signature(secret, made["id"], blob["id"], past)}
    assert_error(await runtime_api.client.get(path, params=expired), 401, "INVALID_SIGNATURE")
    # A freshly signed one of the same shape works: only the expiry refused it.
    future = int(time.time()) + 60
    fresh = {"expires": str(future), "signature": signing.download_signature(secret, made["id"], blob["id"], future)}
    assert (await runtime_api.client.get(path, params=fresh)).status_code == 200

    # Errors.
    base = f"{API}/agent-runs/{made['id']}/artifacts"
    assert_error(await runtime_api.request("GET", f"{base}/{new_uuid()}/download", key=owner.key), 404, "ARTIFACT_NOT_FOUND")
    assert_error(await runtime_api.request("GET", f"{base}/{missing['id']}/download", key=owner.key), 409, "ARTIFACT_NOT_AVAILABLE")
    assert_error(await runtime_api.request("GET", f"{base}/{blob['id']}/download"), 401, "invalid_token")
    other = await runtime_api.create_tenant("Other")
    assert_error(await runtime_api.request("GET", f"{base}/{blob['id']}/download", key=other.key), 404, "AGENT_RUN_NOT_FOUND")
    assert_error(await runtime_api.request("GET", base, key=other.key), 404, "AGENT_RUN_NOT_FOUND")


async def test_usage_reported_from_inside_is_charged(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    report = (
        'curl -s -o /dev/stderr -w "%{http_code}" -X POST "$CORRAL_USAGE_URL" -H "Authorization: Bearer $CORRAL_RUN_TOKEN"'
        " -H 'Content-Type: application/json' -d '{\"provider\": \"anthropic\", \"model\": \"claude-sonnet\","
        " \"input_tokens\": 400000, \"output_tokens\": 150000}'"
    )
    # Through the proxy variables, and straight to the proxy's address (no proxy variables).
    await run(runtime_api, owner, sandbox["id"], f"cat > /tmp/report.sh <<'EOF'\n{report}\nEOF")
    made = await start_run(
        runtime_api, owner, sandbox_id=sandbox["id"], prompt="p",
        command="sh /tmp/report.sh; echo; env -u HTTP_PROXY -u http_proxy sh /tmp/report.sh",
    )
    assert made["status"] == "succeeded", made
    assert made["output"] == "201\n201", made
    body = (await runtime_api.request("GET", f"{API}/credits/transactions", key=owner.key)).json()
    spends = [t for t in body["transactions"] if t["type"] == "spend"]
    assert len(spends) == 2
    # standard: 10 credits per million input, 20 per million output: 4 + 3 = 7 credits a call.
    assert {(t["provider"], t["model"], t["input_tokens"], t["output_tokens"], t["amount_credits"]) for t in spends} == {
        ("anthropic", "claude-sonnet", 400000, 150000, -7)
    }
    usage = (await runtime_api.request("GET", f"{API}/credits/usage", key=owner.key)).json()["usage"]
    assert [(u["provider"], u["model"], u["credits_spent"], u["call_count"], u["input_tokens"]) for u in usage] == [
        ("anthropic", "claude-sonnet", 14, 2, 800000)
    ]

    # The token is good for its run only while it runs; anything else is refused.
    url = "/api/v1/agent-runs/usage"
    token = signing.run_token(runtime_api.platform.jwt_secret, made["id"])
    good = {"provider": "openai", "model": "gpt-x", "input_tokens": 1, "output_tokens": 1}
    assert_error(await runtime_api.client.post(url, json=good, headers={"Authorization": f"Bearer {token}"}), 409, "INVALID_STATE")
    assert_error(await runtime_api.client.post(url, json=good), 401, "invalid_token")
    assert_error(await runtime_api.client.post(url, json=good, headers={"Authorization": f"Bearer {token[:-3]}abc"}), 401, "invalid_token")
    assert_error(await runtime_api.client.post(url, json=good, headers={"Authorization": f"Bearer {owner.key}"}), 401, "invalid_token")


async def test_usage_limits_and_low_credit_events(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    made = await start_run(runtime_api, owner, sandbox_id=sandbox["id"], prompt="p", command="sleep 30", wait=False)
    url = "/api/v1/agent-runs/usage"
    headers = {"Authorization": f"Bearer {signing.run_token(runtime_api.platform.jwt_secret, made['id'])}"}
    post = lambda body: runtime_api.client.post(url, json=body, headers=headers)  # noqa: E731
    for bad in ({"input_tokens": -1}, {"input_tokens": 100_000_001}, {"output_tokens": "x"}, {"model": ""}):
        body = {"provider": "p", "model": "m", "input_tokens": 1, "output_tokens": 1, **bad}
        assert (await post(body)).status_code in (400, 422)
    with runtime_api.platform.bus.subscribe(tenant_id=owner.id, types=["billing.*"]) as events:
        at_max = await post({"provider": "openai", "model": "gpt-4o", "input_tokens": 100_000_000, "output_tokens": 0})
        assert at_max.status_code == 201, at_max.text
        assert at_max.json()["data"]["amount_credits"] == -1000  # standard: 10 credits per million input tokens
        with trio.fail_after(5):
            seen = {(await events.receive()).type, (await events.receive()).type}
    assert seen == {"billing.credit_low", "billing.credit_exhausted"}
    advanced = await post({"provider": "anthropic", "model": "claude-opus-4", "input_tokens": 0, "output_tokens": 1_000_000})
    assert advanced.status_code in (201, 409), advanced.text  # 409: credits ran out and the sandbox was stopped
    if advanced.status_code == 201:
        assert advanced.json()["data"]["amount_credits"] == -100  # advanced: 100 credits per million output tokens


async def test_the_proxy_forwards_only_the_usage_path(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    settings = runtime_api.platform.settings
    from corral.net import gateway_address

    proxy = f"http://{gateway_address(settings.subnet)}:{settings.egress_port}"
    api = f"http://127.0.0.1:{settings.port}"
    probe = (
        f"curl -s -o /dev/null -w '%{{http_code}} ' {proxy}/api/v1/agent-runs; "
        f"curl -s -o /dev/null -w '%{{http_code}} ' --noproxy '*' {proxy}/api/v1/agent-runs; "
        f"curl -s -o /dev/null -w '%{{http_code}} ' --noproxy '' -x {proxy} {api}/api/v1/agent-runs/usage; "
        f"curl -s -o /dev/null -w '%{{http_code}}' --noproxy '*' -X POST {proxy}/api/v1/agent-runs/usage"
    )
    result = await run(runtime_api, owner, sandbox["id"], probe)
    # Other platform paths are refused; the API's own address is not reachable through the
    # proxy; the usage path without a run token is the API's 401.
    assert result["stdout"] == "400 400 403 401", result


async def test_usage_that_runs_credits_low_is_delivered_as_webhooks(tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> None:
    async with https_receiver(tmp_path_factory.mktemp("receiver")) as receiver, running_server(
        tmp_path_factory.mktemp("corral"), allow_private_destinations=True, ca_bundle=str(receiver.ca_path),
        webhook_retry_scale=0.01, webhook_poll_interval=0.1, **RUNTIME_SETTINGS,
    ) as api:
        tenant = await api.create_tenant()
        hook = await api.request("POST", f"{API}/webhooks", key=tenant.key, json={"url": receiver.url(), "events": ["billing.credit_low", "billing.credit_exhausted"]})
        assert hook.status_code == 201, hook.text
        sandbox = await create(api, tenant)
        try:
            # 100 credits to start: 9.5M standard output tokens cost 190 credits, past both thresholds.
            report = (
                'curl -s -o /dev/null -w "%{http_code}" -X POST "$CORRAL_USAGE_URL" -H "Authorization: Bearer $CORRAL_RUN_TOKEN"'
                " -H 'Content-Type: application/json' -d '{\"provider\": \"openai\", \"model\": \"gpt-4o\", \"input_tokens\": 0, \"output_tokens\": 9500000}'"
            )
            made = await start_run(api, tenant, sandbox_id=sandbox["id"], prompt="p", command=report)
            assert made["output"] == "201", made
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 2)
            types = sorted(json.loads(r.body)["type"] for r in receiver.delivered())
            assert types == ["billing.credit_exhausted", "billing.credit_low"]
            spend = [t for t in (await api.request("GET", f"{API}/credits/transactions", key=tenant.key)).json()["transactions"] if t["provider"]]
            assert [(t["amount_credits"], t["output_tokens"]) for t in spend] == [(-190, 9500000)]
        finally:
            driver = await api.platform.runtime.driver()
            for info in await driver.instances():
                await driver.destroy(info.id)


async def test_artifact_size_limit(runtime_api: Api, owner: Tenant) -> None:
    sandbox = await create(runtime_api, owner)
    limit = 100 * 1024 * 1024
    made = await start_run(
        runtime_api, owner, sandbox_id=sandbox["id"], prompt="p",
        command=f"truncate -s {limit} /workspace/at-limit && truncate -s {limit + 1} /workspace/past-limit",
        metadata={"artifact_paths": ["/workspace/at-limit", "/workspace/past-limit", "/workspace"]},
    )
    at, past, directory = (await runtime_api.request("GET", f"{API}/agent-runs/{made['id']}/artifacts", key=owner.key)).json()["data"]
    assert (at["status"], at["size_bytes"], at["sha256"]) == ("available", limit, hashlib.sha256(b"\0" * limit).hexdigest())
    assert (past["status"], past["size_bytes"], past["error"]) == ("failed", limit + 1, f"larger than {limit} bytes")
    assert (directory["status"], directory["error"]) == ("failed", "not a regular file")

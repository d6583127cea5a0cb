"""The API under a fuzzer: schemathesis, generated from the server's own OpenAPI document,
against a live server, as an outside tester would run it.

The run fails on any 5xx (`not_a_server_error`), on an answer its operation's declared
schema does not describe (`response_schema_conformance`), on an answer slower than
`STALL_SECONDS` (`--max-response-time`) and on a request left unanswered (a request
timeout is an error of the run). Streams and WebSockets are left out (a stream answers
for as long as it is open); so are the two operations that would start real work on the
node (a database server, a template build). The tenant has no credits, so sandboxes and
computers are refused before they launch. The number of examples is fixed, so a slow
machine takes longer but tests as much; the time limits are generous for a 2-core one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from corral.http import api_document
from tests.support import (
    ADMIN_KEY,
    PASSWORD,
    Api,
    cleanup_host,
    host_names,
    running_server,
)

pytestmark = pytest.mark.slow

STALL_SECONDS = 10
"""An answer slower than this is a stall: every route answers in well under a second alone."""
REQUEST_TIMEOUT = 30
MAX_EXAMPLES = 8
"""Generated cases per operation in the fuzzing phase (the coverage phase adds its own)."""
RUN_LIMIT = 20 * 60
"""The whole run's hard limit: it sends about 10,000 requests in two minutes on a busy
2-core machine."""

HEAVY = {
    ("post", "/api/v1/databases"): "starts a PostgreSQL server",
    ("post", "/api/v1/sandbox-templates"): "builds a template in an instance",
}

NETWORK = host_names(
    bridge="corralz0",
    subnet_prefix="10.211",
    nft_table="corral_fuzz",
    link_letter="z",
    netns_prefix="corralz",
    cgroup_parent="corral-fuzz",
)
"""This server's host names: it should never start an instance, but if it did, the
instance would not meet another test's."""


def excluded_operations(document: dict[str, Any]) -> list[str]:
    """Streams (SSE), WebSockets (101) and `HEAVY`, by operation id, from the document itself."""
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            answers = operation["responses"]
            streams = any("text/event-stream" in (answer.get("content") or {}) for answer in answers.values())
            if streams or "101" in answers or (method, path) in HEAVY:
                found.append(operation["operationId"])
    return found


def toml(value: object) -> str:
    return json.dumps(value)  # a JSON string, or list of strings, is valid TOML


def config(tenant_key: str, excluded: list[str], resources: dict[str, str]) -> str:
    """Every operation with the tenant's key, /admin ones with the admin key; the ids of
    real resources below their collections, so that their bodies are checked too."""
    lines = [
        f"headers = {{ Authorization = {toml('Bearer ' + tenant_key)} }}",
        f"request-timeout = {REQUEST_TIMEOUT}",
        "workers = 1",  # two workers race inside hypothesis (an AST KeyError now and then)
        "",
        "[[operations]]",
        'include-path-regex = "^/api/v1/admin/"',
        f"headers = {{ Authorization = {toml('Bearer ' + ADMIN_KEY)} }}",
        "",
        "[[operations]]",
        f"include-operation-id = {toml(excluded)}",
        "enabled = false",
    ]
    for collection, resource_id in resources.items():
        lines += [
            "",
            "[[operations]]",
            f"include-path-regex = {toml(f'^/api/v1/{collection}/[{{]')}",
            f"parameters = {{ {toml('path.id')} = {toml(resource_id)} }}",
        ]
    return "\n".join(lines) + "\n"


async def fuzz_tenant(api: Api) -> tuple[str, dict[str, str]]:
    """A platform key (30,000 requests a minute) of a new tenant's owner, with no credits,
    and a workspace, a project, a deployment and a webhook of the tenant."""
    created = await api.admin(
        "POST",
        "/api/v1/admin/tenants",
        json={"name": "Fuzz", "owner_email": "fuzz@example.test", "owner_password": PASSWORD, "credits": 0},
    )
    assert created.status_code == 201, created.text
    body = created.json()["data"]
    made = await api.admin(
        "POST",
        "/api/v1/admin/api-keys",
        json={"tenant_id": body["tenant"]["id"], "user_id": body["owner"]["id"], "name": "fuzzer", "key_type": "platform"},
    )
    assert made.status_code == 201, made.text
    key = str(made.json()["data"]["key"])

    async def create(path: str, fields: dict[str, Any]) -> str:
        response = await api.request("POST", f"/api/v1/{path}", key=key, json=fields)
        assert response.status_code == 201, response.text
        return str(response.json()["data"]["id"])

    project = body["project"]["id"]
    resources = {
        "workspaces": await create("workspaces", {"name": "Fuzzed"}),
        "projects": project,
        "deployments": await create(f"projects/{project}/deployments", {"name": "fuzzed"}),
        "webhooks": await create("webhooks", {"url": "https://hooks.example.test/fuzzed"}),
    }
    return key, resources


async def test_a_fuzzer_finds_no_server_error_no_schema_mismatch_and_no_stall(tmp_path: Path) -> None:
    try:
        async with running_server(tmp_path / "node", template_dir=tmp_path / "templates", **NETWORK) as api:
            tenant_key, resources = await fuzz_tenant(api)
            settings = tmp_path / "schemathesis.toml"
            settings.write_text(config(tenant_key, excluded_operations(api_document()), resources))
            base = str(api.client.base_url).rstrip("/")
            argv = [
                sys.executable, str(Path(__file__).with_name("schemathesis_cli.py")), "--config-file", str(settings), "run", f"{base}/api/v1/openapi.json",
                "--checks", "not_a_server_error,response_schema_conformance",
                "--max-response-time", str(STALL_SECONDS),
                "--phases", "examples,coverage,fuzzing",
                "--max-examples", str(MAX_EXAMPLES),
                "--seed", "26",
                "--generation-database", "none",
                "--no-color",
                "--report", "ndjson", "--report-dir", str(tmp_path / "report"),
            ]  # fmt: skip
            with trio.fail_after(RUN_LIMIT):
                run = await trio.run_process(argv, cwd=tmp_path, capture_stdout=True, stderr=subprocess.STDOUT, check=False)
    finally:  # nothing should have started an instance; if something did, it goes
        cleanup_host(**{name: NETWORK[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})
    output = run.stdout.decode(errors="replace")
    (tmp_path / "schemathesis.log").write_text(output)
    assert run.returncode == 0, f"schemathesis found problems (exit {run.returncode}; report in {tmp_path}):\n{output[-20000:]}"
    assert "Test cases:" in output, output[-5000:]

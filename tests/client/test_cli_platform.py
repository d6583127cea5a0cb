"""`corral deployments`, `databases` and `agent-runs` against a real server. Each test
runs once its routes are in the route table (they land from other branches)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import httpx
import trio

from tests.client.test_cli import ERROR_LINE, Cli
from tests.support import Api, Tenant


async def test_publish_a_sandbox_with_progress(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    sid = (await cli.json("sandboxes", "create"))["id"]  # type: ignore[index]
    code, out, err = await cli("exec", sid, "--", "mkdir -p /workspace/site && echo '<h1>from the cli</h1>' > /workspace/site/index.html")
    assert code == 0, err
    code, out, err = await cli("deployments", "publish", sid, "--name", "cli-site", "--output-path", "/workspace/site")
    assert code == 0, err
    assert re.search(r"^publish dep_\w+: \[3/6\] packing the artifact$", err, re.MULTILINE), err  # the steps, live
    assert re.search(r"^version ver_\w+: ready$", err, re.MULTILINE), err
    url = re.search(r"^public_url +(\S+)$", out, re.MULTILINE)[1]  # type: ignore[index]
    deployment = re.search(r"^deployment +(dep_\w+)$", out, re.MULTILINE)[1]  # type: ignore[index]
    host = httpx.URL(url).host
    async with httpx.AsyncClient() as web:
        page = await web.get(f"http://127.0.0.1:{runtime_api.platform.settings.preview_port}/", headers={"Host": host})
    assert "from the cli" in page.text
    assert deployment in await cli.ok("deployments", "list")
    versions = await cli.ok("deployments", "versions", deployment)
    assert "ready" in versions
    code, _out, err = await cli("deployments", "publish", sid, "--deployment", deployment, "--output-path", "/workspace/empty")
    assert code == 1 and ERROR_LINE.match(err.strip().splitlines()[-1]), err
    await cli.ok("deployments", "delete", deployment)


async def test_database_create_credentials_backup(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    code, out, err = await cli("databases", "create", "cli-db")
    assert code == 0, err
    assert "running" in err  # the progress display
    database_id = re.search(r"^id +(\S+)$", out, re.MULTILINE)[1]  # type: ignore[index]
    credentials = await cli.json("databases", "credentials", database_id)
    assert isinstance(credentials, dict) and credentials["data"]["url"].startswith("postgresql://")
    assert database_id in await cli.ok("databases", "list")
    psql = await trio.run_process(
        [sys.executable, "-m", "corral", "databases", "psql", database_id, "--", "-tAc", "select 40 + 2"],
        capture_stdout=True, capture_stderr=True, env={**os.environ, **cli.env}, check=False,
    )
    assert (psql.returncode, psql.stdout.strip()) == (0, b"42"), psql.stderr  # the terminal handed to psql
    code, out, err = await cli("databases", "backup", database_id)
    assert code == 0 and "completed" in out, (out, err)
    await cli.ok("databases", "delete", database_id)


async def test_agent_run_follow(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    sid = (await cli.json("sandboxes", "create"))["id"]  # type: ignore[index]
    code, out, err = await cli("agent-runs", "create", sid, "say hi", "--command", 'echo "agent says: $AGENT_PROMPT"', "--follow")
    assert code == 0, (out, err)
    assert re.search(r"^command_started: ", out, re.MULTILINE) and re.search(r"^command_finished: ", out, re.MULTILINE)
    assert "agent says: say hi" in out  # the run's output, after its events
    code, out, err = await cli("agent-runs", "create", sid, "fail", "--command", "exit 3", "--follow")
    assert code == 3, (out, err)  # the run's exit code
    runs = await cli.json("agent-runs", "list")
    assert isinstance(runs, dict) and len(runs["data"]) == 2
    assert json.dumps(runs)


async def test_template_build_followed_live(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    code, out, err = await cli("sandbox-templates", "create", "cli-tpl", "--setup", "echo from-the-template > /etc/cli-marker")
    assert code == 0, (out, err)
    assert re.search(r"^build \S+: ready", err, re.MULTILINE), err  # the build's status, live
    assert "cli-tpl" in await cli.ok("sandbox-templates", "list")
    sid = (await cli.json("sandboxes", "create", "--template", "cli-tpl"))["id"]  # type: ignore[index]
    code, out, err = await cli("exec", sid, "--", "cat /etc/cli-marker")
    assert (code, out) == (0, "from-the-template\n"), err
    code, out, err = await cli("sandbox-templates", "create", "cli-broken", "--setup", "exit 9")
    assert code == 1 and "failed" in err, (out, err)

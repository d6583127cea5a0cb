"""`corral serve` as a user runs it: real processes, signals, restarts, two nodes."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.pg_server import create_database
from tests.support import ADMIN_KEY, PASSWORD, free_port

CORRAL = [sys.executable, "-m", "corral"]


@contextlib.contextmanager
def corral_serve(data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = subprocess.Popen(
        [*CORRAL, "serve", "--port", str(port), "--preview-port", str(free_port()), "--data-dir", str(data_dir), *extra],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                output = proc.stdout.read().decode() if proc.stdout else ""
                raise AssertionError(f"corral serve did not start:\n{output}")
            time.sleep(0.05)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _create_tenant(base: str, admin_key: str) -> dict:  # type: ignore[type-arg]
    response = httpx.post(
        f"{base}/api/v1/admin/tenants",
        headers={"Authorization": f"Bearer {admin_key}"},
        json={"name": "Acme", "owner_email": "ada@acme.test", "owner_password": PASSWORD},
    )
    assert response.status_code == 201, response.text
    return response.json()["data"]  # type: ignore[no-any-return]


def test_first_start_generates_admin_key_and_sigterm_stops_cleanly(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_ADMIN_KEY"}
    with corral_serve(data_dir, env=env) as (base, proc):
        key_file = data_dir / "admin-key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        admin_key = key_file.read_text().strip()
        assert admin_key.startswith("msk_a_")
        tenants = httpx.get(f"{base}/api/v1/admin/tenants", headers={"Authorization": f"Bearer {admin_key}"})
        assert tenants.status_code == 200 and tenants.json() == {"data": []}
        assert (data_dir / "corral.db").exists()
        assert stat.S_IMODE((data_dir / "kek").stat().st_mode) == 0o600
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 12


@pytest.mark.parametrize(
    ("key", "starts"),
    [("my-secret-admin-key-0123456789abcdef", False), ("msk_a_short", False), ("msk_a_" + "k" * 26, True)],
)
def test_a_configured_admin_key_that_could_never_work_refuses_to_start(tmp_path: Path, key: str, starts: bool) -> None:
    """Admin tokens are recognised by their prefix: a key without it would start a
    server that answers every admin request with 401, so it is refused at startup."""
    env = {**os.environ, "CORRAL_ADMIN_KEY": key}
    if starts:
        with corral_serve(tmp_path, env=env) as (base, _):
            tenants = httpx.get(f"{base}/api/v1/admin/tenants", headers={"Authorization": f"Bearer {key}"})
            assert tenants.status_code == 200
        return
    result = subprocess.run(
        [*CORRAL, "serve", "--port", str(free_port()), "--data-dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert "CORRAL_ADMIN_KEY must start with msk_a_ and be at least 32 characters" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_first_start_builds_the_default_template_in_the_background(tmp_path: Path) -> None:
    """The server answers at once and says what it is doing; here the build cannot run
    (no mmdebstrap on the PATH), which it reports without stopping."""
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {
        "CORRAL_ADMIN_KEY": ADMIN_KEY,
        "CORRAL_PREPARE_TEMPLATES": "1",
        "CORRAL_TEMPLATE_DIR": str(tmp_path / "templates"),
        "PATH": str(empty_bin),
    }
    with corral_serve(tmp_path / "data", env=env) as (base, proc):
        assert httpx.get(f"{base}/healthz").status_code == 200
        deadline = time.monotonic() + 10
        while not (tmp_path / "templates" / ".default.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        output = proc.stdout.read().decode() if proc.stdout else ""
    assert "building the 'default' template in the background" in output
    assert "could not build the 'default' template: mmdebstrap is not installed" in output


def test_state_survives_a_restart(tmp_path: Path) -> None:
    env = {"CORRAL_ADMIN_KEY": ADMIN_KEY}
    with corral_serve(tmp_path, env=env) as (base, proc):
        created = _create_tenant(base, ADMIN_KEY)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    key = created["api_key"]["key"]
    with corral_serve(tmp_path, env=env) as (base, _):
        response = httpx.get(f"{base}/api/v1/tenant", headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200
        assert response.json()["data"]["id"] == created["tenant"]["id"]
        login = httpx.post(f"{base}/api/v1/auth/login", json={"email": "ada@acme.test", "password": PASSWORD})
        assert login.status_code == 200


def test_two_nodes_on_postgresql_share_state_and_revocation(tmp_path: Path, postgres_url: str) -> None:
    url = create_database(postgres_url, "two_nodes")
    env = {"CORRAL_ADMIN_KEY": ADMIN_KEY}
    with (
        corral_serve(tmp_path / "a", "--database-url", url, env=env) as (node_a, _),
        corral_serve(tmp_path / "b", "--database-url", url, env=env) as (node_b, _),
    ):
        created = _create_tenant(node_a, ADMIN_KEY)
        owner = {"Authorization": f"Bearer {created['api_key']['key']}"}
        made = httpx.post(f"{node_a}/api/v1/api-keys", headers=owner, json={"name": "ci", "key_type": "user"})
        assert made.status_code == 201
        key = made.json()["data"]
        auth = {"Authorization": f"Bearer {key['key']}"}
        assert httpx.get(f"{node_b}/api/v1/tenant", headers=auth).status_code == 200
        # A JWT minted on one node is accepted on the other: the signing secret is shared.
        token = httpx.post(f"{node_a}/api/v1/auth/login", json={"email": "ada@acme.test", "password": PASSWORD}).json()["token"]
        assert httpx.get(f"{node_b}/api/v1/tenant", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        revoked = httpx.delete(f"{node_a}/api/v1/api-keys/{key['id']}", headers=owner)
        assert revoked.status_code == 200
        refused = httpx.get(f"{node_b}/api/v1/tenant", headers=auth)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_token"


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"]])
def test_cli_help(argv: list[str]) -> None:
    result = subprocess.run([*CORRAL, *argv], capture_output=True, text=True, check=True)
    assert "corral" in result.stdout


def runtime_env() -> dict[str, str]:
    from tests.support import RUNTIME_SETTINGS

    names = {
        "template_dir": "CORRAL_TEMPLATE_DIR", "bridge": "CORRAL_BRIDGE", "subnet": "CORRAL_SUBNET",
        "nft_table": "CORRAL_NFT_TABLE", "link_prefix": "CORRAL_LINK_PREFIX", "netns_prefix": "CORRAL_NETNS_PREFIX",
        "cgroup_parent": "CORRAL_CGROUP_PARENT",
    }
    return {"CORRAL_ADMIN_KEY": ADMIN_KEY, **{var: str(RUNTIME_SETTINGS[name]) for name, var in names.items()}}


def test_instances_survive_kill_9_and_are_readopted(tmp_path: Path, runtime_host: None) -> None:
    env = runtime_env()
    with corral_serve(tmp_path, env=env) as (base, proc):
        created = _create_tenant(base, ADMIN_KEY)
        auth = {"Authorization": f"Bearer {created['api_key']['key']}"}
        sandbox = httpx.post(f"{base}/api/v1/sandboxes", headers=auth, json={}, timeout=60).json()["data"]
        assert sandbox["status"] == "running"
        sid = sandbox["id"]
        wrote = httpx.post(f"{base}/api/v1/sandboxes/{sid}/files/write", headers=auth, json={"path": "/workspace/keep.txt", "content": "still here"})
        assert wrote.status_code == 201
        started = httpx.post(f"{base}/api/v1/sandboxes/{sid}/exec", headers=auth, json={"command": "nohup sleep 1000 >/dev/null 2>&1 & echo $!"}).json()
        ticker = httpx.post(
            f"{base}/api/v1/sandboxes/{sid}/processes", headers=auth, json={"cmd": "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.2; done"}
        ).json()["data"]
        logs_url = f"{base}/api/v1/sandboxes/{sid}/processes/{ticker['pid']}/logs"
        deadline = time.monotonic() + 10
        while not httpx.get(logs_url, headers=auth).json()["data"]["lines"] and time.monotonic() < deadline:
            time.sleep(0.1)
        before = httpx.get(logs_url, headers=auth, params={"tail": 10000}).json()["data"]["lines"]
        assert before and before[0] == "tick-1"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The instance outlived its control plane.
    instance_state = tmp_path / "instances" / sid / "state.json"
    assert instance_state.exists()
    with corral_serve(tmp_path, env=env) as (base, proc):
        result = httpx.post(f"{base}/api/v1/sandboxes/{sid}/exec", headers=auth, json={"command": f"cat /workspace/keep.txt; kill -0 {started['stdout'].strip()} && echo alive"}, timeout=60)
        assert result.status_code == 200, result.text
        assert result.json()["stdout"] == "still herealive\n"
        listed = httpx.get(f"{base}/api/v1/sandboxes/{sid}/files", headers=auth)
        assert "keep.txt" in [f["name"] for f in listed.json()["files"]]
        # The background process kept running, and its record and logs are read again.
        process_url = f"{base}/api/v1/sandboxes/{sid}/processes/{ticker['pid']}"
        assert httpx.get(process_url, headers=auth).json()["data"]["status"] == "running"
        after = httpx.get(f"{process_url}/logs", headers=auth, params={"tail": 10000}).json()["data"]["lines"]
        assert after[: len(before)] == before and len(after) > len(before)
        assert httpx.delete(process_url, headers=auth, timeout=30).status_code == 204
        assert httpx.get(process_url, headers=auth).json()["data"]["status"] == "killed"
        assert httpx.delete(f"{base}/api/v1/sandboxes/{sid}", headers=auth).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def test_tools_serve_starts_with_the_default_relative_data_dir(tmp_path: Path, runtime_host: None) -> None:
    """The README's first command, from a working directory of the user's choosing."""
    root = Path(__file__).resolve().parents[1]
    port = free_port()
    env = {**runtime_env(), "CORRAL_PORT": str(port), "CORRAL_PREVIEW_PORT": str(free_port())}
    env.pop("CORRAL_DATA_DIR", None)
    proc = subprocess.Popen([str(root / "tools" / "serve")], cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        assert (tmp_path / ".corral" / "corral.db").exists()
        created = _create_tenant(base, ADMIN_KEY)
        auth = {"Authorization": f"Bearer {created['api_key']['key']}"}
        sandbox = httpx.post(f"{base}/api/v1/sandboxes", headers=auth, json={}, timeout=60).json()["data"]
        assert sandbox["status"] == "running", sandbox
        result = httpx.post(f"{base}/api/v1/sandboxes/{sandbox['id']}/exec", headers=auth, json={"command": "echo ok"}, timeout=60)
        assert result.json()["stdout"] == "ok\n"
        assert httpx.delete(f"{base}/api/v1/sandboxes/{sandbox['id']}", headers=auth).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0

"""Under the seccomp filter, Docker's capabilities and a uid range of its own, a
tenant's everyday tools still work: pip and git through the egress proxy from a test
world's server, a virtual environment, Node and Firefox on the desktop.

The "internet" is a network namespace at a private address (tests/net/egress_support)
with a static file server: a package index with one wheel, and a git repository served
over git's plain HTTP protocol. The node resolves its name through a test name server
and is allowed private destinations, as a developer runs it against a LAN."""

from __future__ import annotations

import subprocess
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.dns_server import dns_server
from tests.http.computer_support import create_running
from tests.http.computer_support import run as computer_run
from tests.http.test_sandboxes import create, run
from tests.net.egress_support import INTERNET, internet
from tests.support import (
    RUNTIME_SETTINGS,
    TEST_SLOT,
    Api,
    destroy_instances_and_databases,
    running_server,
)

FILES_PORT = 8080
HOST = "pkgs.example.test"


def make_wheel(directory: Path) -> None:
    """A pure-Python wheel, written by hand (no build tools on the host needed)."""
    name = "hello_corral-1.0-py3-none-any.whl"
    info = "hello_corral-1.0.dist-info"
    files = {
        "hello_corral/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: hello-corral\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: corral-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(directory / name, "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
    index = directory / "simple" / "hello-corral"
    index.mkdir(parents=True)
    (index / "index.html").write_text(f'<html><body><a href="../../{name}">{name}</a></body></html>\n')


def make_repository(directory: Path) -> None:
    """A bare repository with one commit, served by plain HTTP (`git update-server-info`)."""
    work = directory.parent / "work"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.test", "HOME": str(directory.parent), "PATH": "/usr/bin:/bin"}  # fmt: skip
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    (work / "README").write_text("from the test world\n")
    subprocess.run(["git", "-C", str(work), "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-q", "-m", "first"], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(directory / "repo.git")], check=True, env=env)
    subprocess.run(["git", "-C", str(directory / "repo.git"), "update-server-info"], check=True, env=env)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "site"
    root.mkdir()
    make_wheel(root)
    make_repository(root)
    yield root


async def listening(host: str, port: int) -> None:
    with trio.fail_after(30):
        while True:
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await stream.aclose()
            return


@pytest.fixture
async def world_api(runtime_host: None, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, site: Path) -> AsyncIterator[Api]:
    async with dns_server() as dns, internet(tmp_path) as bundle:
        dns.addresses = {HOST: [INTERNET]}
        server = subprocess.Popen(
            ["ip", "netns", "exec", f"egress-internet{TEST_SLOT}", "python3", "-m", "http.server", str(FILES_PORT),
             "--bind", INTERNET, "--directory", str(site)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await listening(INTERNET, FILES_PORT)
            settings: dict[str, Any] = {**RUNTIME_SETTINGS, "dns_servers": dns.address, "ca_bundle": bundle, "allow_private_destinations": True}
            async with running_server(tmp_path_factory.mktemp("corral"), **settings) as api:
                try:
                    yield api
                finally:
                    await destroy_instances_and_databases(api.platform)
        finally:
            server.kill()
            server.wait()


async def test_pip_and_git_through_the_proxy(world_api: Api) -> None:
    api = world_api
    tenant = await api.create_tenant()
    sid = (await create(api, tenant))["id"]
    url = f"http://{HOST}:{FILES_PORT}"
    result = await run(
        api, tenant, sid,
        f"pip install -q --break-system-packages --index-url {url}/simple/ --trusted-host {HOST} hello-corral"
        " && python3 -c 'import hello_corral; print(hello_corral.VALUE)'",
        timeout=120,
    )  # fmt: skip
    assert result["exit_code"] == 0, result
    assert result["stdout"].strip().splitlines()[-1] == "42"
    result = await run(api, tenant, sid, f"git clone -q {url}/repo.git /workspace/repo && cat /workspace/repo/README", timeout=120)
    assert result["exit_code"] == 0, result
    assert result["stdout"] == "from the test world\n"
    result = await run(api, tenant, sid, "python3 -m venv /tmp/v && /tmp/v/bin/python -c 'print(1)'")
    assert result["stdout"].split() == ["1"], result


async def test_firefox_and_node_on_the_desktop(runtime_api: Api) -> None:
    tenant = await runtime_api.create_tenant()
    computer = await create_running(runtime_api, tenant)
    result = await computer_run(
        runtime_api, tenant, computer["id"],
        "echo '<h1>hello</h1>' > /tmp/page.html && timeout 90 firefox-esr --headless --screenshot /tmp/shot.png"
        " file:///tmp/page.html >/dev/null 2>&1; python3 -c 'print(open(\"/tmp/shot.png\", \"rb\").read(4)[1:])'",
        timeout=120,
    )  # fmt: skip
    assert result["output"].strip() == "b'PNG'", result
    result = await computer_run(runtime_api, tenant, computer["id"], "node -e 'console.log(6 * 7)'")
    assert result["output"].strip() == "42", result

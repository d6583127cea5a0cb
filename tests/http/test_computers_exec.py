"""Exec and exec/python inside a computer: output, timeouts, the /tmp file, errors, 502."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from corral.actors.computers.execution import clamp_timeout
from corral.errors import ApiError
from tests.http.computer_support import call, create_running, quick_server, run
from tests.support import Api, Tenant, assert_error


@pytest.fixture
async def computer(runtime_api: Api, owner: Tenant) -> str:
    return str((await create_running(runtime_api, owner))["id"])


async def test_exec_combines_output_and_reports_the_exit_code(runtime_api: Api, owner: Tenant, computer: str) -> None:
    result = await run(runtime_api, owner, computer, "echo out; echo err >&2; echo more; exit 3")
    assert result == {"output": "out\nerr\nmore\n", "exit_code": 3}
    tools = await run(runtime_api, owner, computer, "for t in python3 pip3 curl wget git vim jq htop tree zip unzip; do command -v $t >/dev/null || echo missing $t; done; pwd")
    assert tools == {"output": "/workspace\n", "exit_code": 0}


async def test_exec_timeout_sends_sigterm(runtime_api: Api, owner: Tenant, computer: str) -> None:
    began = time.monotonic()
    result = await run(runtime_api, owner, computer, "trap 'echo got TERM; exit 7' TERM; sleep 30 & wait", timeout=1)
    assert result == {"output": "got TERM\n", "exit_code": 7}
    assert time.monotonic() - began < 10
    assert await run(runtime_api, owner, computer, "echo start; sleep 30", timeout=1) == {"output": "start\n", "exit_code": 143}


async def test_exec_python_runs_a_temporary_file_that_is_deleted(runtime_api: Api, owner: Tenant, computer: str) -> None:
    code = "import os, sys\nprint(os.path.dirname(os.path.abspath(__file__)))\nprint('oops', file=sys.stderr)\nprint('after')\nsys.exit(4)"
    response = await call(runtime_api, owner, "POST", computer, "/exec/python", json={"code": code})
    assert response.status_code == 200, response.text
    assert response.json() == {"output": "/tmp\noops\nafter\n", "exit_code": 4}
    slow = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (print('terminated'), sys.exit(9)))\ntime.sleep(60)"
    began = time.monotonic()
    timed_out = await call(runtime_api, owner, "POST", computer, "/exec/python", json={"code": slow, "timeout": 1})
    assert timed_out.json() == {"output": "terminated\n", "exit_code": 9}
    assert time.monotonic() - began < 10
    left = await run(runtime_api, owner, computer, "ls /tmp")
    assert left == {"output": "", "exit_code": 0}  # no file left behind, also after the timeout
    syntax = await call(runtime_api, owner, "POST", computer, "/exec/python", json={"code": "def ("})
    assert syntax.json()["exit_code"] == 1 and "SyntaxError" in syntax.json()["output"]


async def test_exec_sees_the_env_store(runtime_api: Api, owner: Tenant, computer: str) -> None:
    added = await call(runtime_api, owner, "POST", computer, "/env", json={"name": "API_TOKEN", "value": "tok-123"})
    assert added.status_code == 201
    assert (await run(runtime_api, owner, computer, 'printf %s "$API_TOKEN"'))["output"] == "tok-123"
    python = await call(runtime_api, owner, "POST", computer, "/exec/python", json={"code": "import os; print(os.environ['API_TOKEN'])"})
    assert python.json()["output"] == "tok-123\n"


async def test_bad_requests(runtime_api: Api, owner: Tenant, computer: str) -> None:
    assert assert_error(await call(runtime_api, owner, "POST", computer, "/exec", json={}), 400, "MISSING_PARAM")["message"] == "command is required"
    assert assert_error(await call(runtime_api, owner, "POST", computer, "/exec/python", json={"code": " "}), 400, "MISSING_PARAM")["message"] == "code is required"
    for timeout in (-1, 0, "10", True):
        response = await call(runtime_api, owner, "POST", computer, "/exec", json={"command": "true", "timeout": timeout})
        assert_error(response, 422, "VALIDATION_ERROR")
    assert_error(await call(runtime_api, owner, "POST", computer, "/exec", json={"command": ["ls"]}), 422, "VALIDATION_ERROR")
    assert_error(await call(runtime_api, owner, "POST", computer, "/exec", content=b"nope"), 400, "INVALID_BODY")


def test_timeout_defaults_to_30_and_is_clamped_to_300() -> None:
    assert clamp_timeout(None) == 30
    assert clamp_timeout(5) == 5
    assert clamp_timeout(300) == 300
    assert clamp_timeout(1000) == 300
    assert clamp_timeout(2.7) == 2
    with pytest.raises(ApiError):
        clamp_timeout(-3)


def agent_pids(init_pid: int) -> list[int]:
    """The instance's agent: the children of its init on the host."""
    children = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
    return [int(pid) for pid in children]


async def test_an_agent_that_does_not_answer_is_502(tmp_path_factory: pytest.TempPathFactory, runtime_host: None) -> None:
    async with quick_server(tmp_path_factory.mktemp("corral"), agent_timeout=1.0) as api:
        tenant = await api.create_tenant()
        computer = await create_running(api, tenant)
        driver = await api.platform.runtime.driver()
        info = await driver.info(computer["vm_id"])
        assert info.init_pid is not None
        pids = agent_pids(info.init_pid)
        assert pids
        await api.platform.agents.forget(computer["vm_id"])  # no pooled connection: a fresh connect
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            for suffix, body in (("/exec", {"command": "true"}), ("/exec/python", {"code": "print(1)"})):
                response = await call(api, tenant, "POST", computer["id"], suffix, json=body)
                assert_error(response, 502, "AGENT_UNAVAILABLE")
            files = await call(api, tenant, "GET", computer["id"], "/files")
            assert_error(files, 502, "AGENT_UNAVAILABLE")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert (await run(api, tenant, computer["id"], "echo back"))["output"] == "back\n"


async def test_the_files_api_below_a_computer(runtime_api: Api, owner: Tenant, computer: str) -> None:
    async def files(method: str, suffix: str = "", **kwargs: object) -> httpx.Response:
        return await call(runtime_api, owner, method, computer, f"/files{suffix}", **kwargs)

    wrote = await files("POST", "/write", json={"path": "/home/notes/a.txt", "content": "aGk=", "encoding": "base64"})
    assert wrote.status_code == 201 and wrote.json() == {"success": True, "file": {"path": "/home/notes/a.txt", "size_bytes": 2}}
    assert (await files("POST", "/mkdir", json={"path": "/srv/x/y", "recursive": True})).status_code == 201
    assert (await files("POST", "/copy", json={"source": "/home/notes/a.txt", "destination": "/srv/x/y/b.txt"})).status_code == 201
    assert (await files("POST", "/rename", json={"source": "/srv/x/y/b.txt", "destination": "/opt/c.txt"})).json()["destination"] == "/opt/c.txt"
    assert (await files("POST", "/chmod", json={"path": "/opt/c.txt", "mode": "600"})).json() == {"success": True, "path": "/opt/c.txt", "mode": "600"}
    stat = (await files("GET", "/stat", params={"path": "/opt/c.txt"})).json()
    assert stat["permissions"] == "-rw-------" and stat["size_bytes"] == 2
    listing = (await files("GET", params={"path": "/home/notes"})).json()
    assert listing["path"] == "/home/notes" and [f["name"] for f in listing["files"]] == ["a.txt"]
    exported = (await files("POST", "/export", json={"path": "/opt/c.txt"})).json()
    assert exported["content_base64"] == "aGk=" and exported["file"]["content_type"] == "text/plain"
    assert (await files("DELETE", json={"path": "/opt/c.txt"})).json() == {"success": True, "path": "/opt/c.txt"}
    assert_error(await files("GET", "/stat", params={"path": "/opt/c.txt"}), 404, "FILE_NOT_FOUND")
    assert_error(await files("GET", "/download", params={"path": "/etc/shadow"}), 403, "FORBIDDEN_PATH")
    assert_error(await files("GET", "/download"), 400, "MISSING_PATH")
    assert_error(await files("POST", "/upload", data={"path": "/tmp/"}), 400, "MISSING_FILE")
    assert_error(await files("POST", "/upload", files={"file": ("big", b"x" * (10 * 1024 * 1024 + 1))}), 413, "FILE_TOO_LARGE")
    assert_error(await files("POST", "/rename", json={"source": "/home/notes/a.txt", "destination": "/home/notes/a.txt"}), 409, "DESTINATION_EXISTS")
    assert (await run(runtime_api, owner, computer, "cat /home/notes/a.txt"))["output"] == "hi"

"""Every `corral` client command against a real server: tables, --json, one-line errors."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from corral import commands
from corral.cli import build_parser
from corral.commands.output import Console
from tests.client.support import base_url
from tests.support import PASSWORD, Api, Tenant

ERROR_LINE = re.compile(r"^error: [A-Za-z_]+: .+ \(request req_[0-9a-z]+\)$")
HANG_GUARD = 180
"""Seconds a `corral` subprocess may take before the test calls it hung: a guard against
hangs, never a measure of speed (a slow machine must pass; events decide, not time)."""


def interruptible(argv: list[str]) -> list[str]:
    """`argv` run with SIGINT at its default, as a terminal's foreground job has it.

    A test run started in the background by a non-interactive shell (`bash .ci/run &`,
    `nohup`, a CI runner) ignores SIGINT, and an ignored signal stays ignored through
    fork and exec: the `corral` started here would never see the Ctrl-C the test sends
    (its command ran on to exit 0; `corral logs` never ended)."""
    return ["env", "--default-signal=INT", *argv]


@asynccontextmanager
async def corral_process(cli: Cli, *argv: str) -> AsyncIterator[trio.Process]:
    """`corral ARGV` as its own process, with SIGINT at its default and pipes for its
    output; killed if the test leaves it running."""
    command = interruptible([sys.executable, "-m", "corral", *argv])
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **cli.env})
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    await pipe.aclose()


async def read_until(stream: trio.abc.ReceiveStream, *wanted: bytes) -> bytes:
    """What `stream` delivers until every one of `wanted` has arrived; it must not end first."""
    seen = b""
    while not all(part in seen for part in wanted):
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise AssertionError(f"the stream ended before {wanted!r}: {seen!r}")
        seen += chunk
    return seen


class Cli:
    """Runs `corral ARGS` in a worker thread (the server is on this loop) with its own HOME."""

    def __init__(self, api: Api, home: Path, key: str | None) -> None:
        self.env = {"HOME": str(home), "CORRAL_API_URL": base_url(api)}
        if key:
            self.env["CORRAL_API_KEY"] = key

    async def __call__(self, *argv: str, stdin: str = "") -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()

        def run() -> int:
            args = commands.parse(build_parser(), list(argv))
            assert args.subcommand in commands.CLIENT_COMMANDS, args  # what `corral.cli.main` dispatches on
            return commands.run(args, Console(out, err), self.env)

        code = await trio.to_thread.run_sync(run)
        return code, out.getvalue(), err.getvalue()

    async def ok(self, *argv: str) -> str:
        code, out, err = await self(*argv)
        assert code == 0, (argv, out, err)
        return out

    async def json(self, *argv: str) -> object:
        """The command's output with --json (given before any `--`)."""
        cut = argv.index("--") if "--" in argv else len(argv)
        return json.loads(await self.ok(*argv[:cut], "--json", *argv[cut:]))


async def test_login_with_a_key_or_a_password_whoami_logout(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, None)
    code, _out, err = await cli("login", "--api-key", owner.key)
    assert code == 0, err
    config = tmp_path / ".config" / "corral" / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {"url": base_url(runtime_api), "api_key": owner.key}
    who = await cli.ok("whoami")
    assert owner.id in who and str(config) in who
    await cli.ok("logout")
    assert not config.exists()
    code, _out, err = await cli("login", "--email", owner.owner_email, "--password", PASSWORD)
    assert code == 0, err
    made = json.loads(config.read_text())["api_key"]
    assert made != owner.key and made.startswith("msk_")
    code, _out, err = await cli("login", "--email", owner.owner_email, "--password", "wrong password")
    assert code == 1 and ERROR_LINE.match(err.strip()) and "UNAUTHORIZED" in err
    code, _out, err = await cli("login", "--api-key", "msk_not_a_key")
    assert code == 1 and ERROR_LINE.match(err.strip())


async def test_sandbox_commands_exec_files_processes_previews(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    created = await cli.json("sandboxes", "create", "--name", "cli-box", "--env", "GREETING=hi")
    assert isinstance(created, dict) and created["status"] == "running"
    sid = created["id"]
    table = await cli.ok("sandboxes", "list")
    assert table.splitlines()[0].split()[:3] == ["ID", "NAME", "STATUS"] and sid in table
    assert re.search(rf"^id +{sid}$", await cli.ok("sandboxes", "get", sid), re.MULTILINE)

    code, out, err = await cli("exec", sid, "--", "echo $GREETING; echo to-err >&2; exit 7")
    assert (code, out, err) == (7, "hi\n", "to-err\n")
    code, out, err = await cli("exec", sid, "--", "sh", "-c", "echo 'a b'")
    assert (code, out) == (0, "a b\n")
    result = await cli.json("exec", sid, "--", "echo json")
    assert isinstance(result, dict) and result["exit_code"] == 0 and result["output"] == [{"stream": "stdout", "line": "json"}]

    local = tmp_path / "notes.txt"
    local.write_text("uploaded by the cli\n")
    await cli.ok("files", "upload", sid, str(local), "/workspace/notes.txt")
    listing = await cli.ok("files", "ls", sid, "/workspace")
    assert re.search(r"^-rw\S+ +20 +\S+ +notes.txt$", listing, re.MULTILINE), listing
    back = tmp_path / "back.txt"
    await cli.ok("files", "download", sid, "/workspace/notes.txt", str(back))
    assert back.read_text() == "uploaded by the cli\n"

    started = await cli.json("processes", "start", sid, "--name", "counter", "--", "for i in 1 2 3; do echo n$i; sleep 0.2; done")
    assert isinstance(started, dict)
    pid = started["data"]["pid"]
    followed = await cli.ok("processes", "logs", sid, pid, "--follow")
    assert followed == "n1\nn2\nn3\n"
    assert pid in await cli.ok("processes", "list", sid)
    assert "n3" in await cli.ok("processes", "logs", sid, pid)

    exposed = await cli.json("previews", "expose", sid, "8000")
    assert isinstance(exposed, dict) and "url" in json.dumps(exposed)
    share = await cli.json("previews", "shares", "create", sid)
    assert isinstance(share, dict)
    share_id = share["data"]["id"]
    assert share_id in await cli.ok("previews", "shares", "list", sid)
    await cli.ok("previews", "shares", "delete", sid, share_id)

    token = await cli.json("previews", "token", sid)
    assert isinstance(token, dict) and token["data"]["token"].startswith("mp_")

    stopped = await cli.json("sandboxes", "stop", sid, "--wait")
    assert isinstance(stopped, dict) and stopped["status"] == "stopped"
    code, out, err = await cli("exec", sid, "--", "true")
    assert code == 1 and ERROR_LINE.match(err.strip()) and "SANDBOX_NOT_RUNNING" in err
    started_again = await cli.json("sandboxes", "start", sid, "--wait")
    assert isinstance(started_again, dict) and started_again["status"] == "running"
    assert (await cli("exec", sid, "--", "cat /workspace/notes.txt"))[1] == "uploaded by the cli\n"  # files kept
    await cli.ok("sandboxes", "delete", sid)
    code, out, err = await cli("sandboxes", "get", sid)
    assert code == 1 and out == "" and ERROR_LINE.match(err.strip()) and "NOT_FOUND" in err


async def test_errors_are_one_line_for_every_kind_of_failure(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    other = await runtime_api.create_tenant("Other")
    cli = Cli(runtime_api, tmp_path, owner.key)
    sid = (await cli.json("sandboxes", "create", "--no-wait"))["id"]  # type: ignore[index]
    foreign = Cli(runtime_api, tmp_path, other.key)
    code, _out, err = await foreign("sandboxes", "get", sid)
    assert code == 1 and ERROR_LINE.match(err.strip()), err  # another tenant's sandbox is 404
    code, _out, err = await cli("files", "upload", sid, str(tmp_path / "missing.txt"))
    assert code == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    down = Cli(runtime_api, tmp_path, owner.key)
    down.env["CORRAL_API_URL"] = "http://127.0.0.1:9"
    code, _out, err = await down("sandboxes", "list")
    assert code == 1 and err.startswith("error: CONNECTION_ERROR: ") and len(err.strip().splitlines()) == 1
    code, _out, err = await cli("sandboxes", "list", "--url", "not a url")
    assert code == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


async def test_computer_commands(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    code, out, err = await cli("computers", "create", "cli desktop")
    assert code == 0, err
    cid = re.search(r"^id +(\S+)$", out, re.MULTILINE)[1]  # type: ignore[index]
    assert re.search(rf"^computer {cid}: running \(\d+\.\ds\)$", err, re.MULTILINE), err  # the progress display
    computer = await cli.json("computers", "get", cid)
    assert isinstance(computer, dict) and computer["status"] == "running"
    assert cid in await cli.ok("computers", "list")
    url = (await cli.ok("computers", "open", cid)).strip()
    assert url.startswith(f"http://{computer['slug']}.") and "?auth=" in url
    code, out, err = await cli("computers", "exec", cid, "--", "echo on-the-desktop $DISPLAY")
    assert (code, out) == (0, "on-the-desktop :0\n"), err
    with trio.fail_after(HANG_GUARD):
        shell = await trio.run_process(
            [sys.executable, "-m", "corral", "computers", "shell", cid],
            stdin=b"echo shell-$((6*7))\nexit\n",
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, **cli.env},
            check=False,
        )
    assert shell.returncode == 0, shell.stderr
    assert b"shell-42" in shell.stdout, (shell.stdout, shell.stderr)
    paused = await cli.json("computers", "pause", cid, "--wait")
    assert isinstance(paused, dict) and paused["status"] == "paused"
    resumed = await cli.json("computers", "start", cid, "--wait")
    assert isinstance(resumed, dict) and resumed["status"] == "running"
    stopped = await cli.json("computers", "stop", cid, "--wait")
    assert isinstance(stopped, dict) and stopped["status"] == "stopped"
    await cli.ok("computers", "delete", cid)
    code, _out, err = await cli("computers", "get", cid)
    assert code == 1 and ERROR_LINE.match(err.strip()), err


def test_completion_scripts_cover_every_command(tmp_path: Path) -> None:
    out = io.StringIO()
    parser = build_parser()
    assert commands.run(parser.parse_args(["completion", "bash"]), Console(out, io.StringIO()), {}) == 0
    script = out.getvalue()
    for command in commands.CLIENT_COMMANDS:
        assert command in script
    assert "['corral sandboxes create']=" in script and "--json" in script
    path = tmp_path / "corral.bash"
    path.write_text(script)
    probe = f'source {path}; COMP_WORDS=(corral sandboxes cr); COMP_CWORD=2; _corral; echo "${{COMPREPLY[@]}}"'
    assert subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "create"


def test_the_installed_command_prints_one_line_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "CORRAL_API_URL": "http://127.0.0.1:9", "CORRAL_API_KEY": "msk_x"}
    env.pop("XDG_CONFIG_HOME", None)
    done = subprocess.run([sys.executable, "-m", "corral", "sandboxes", "list"], capture_output=True, text=True, env=env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: CONNECTION_ERROR: "), done.stderr


async def test_ctrl_c_stops_the_command_in_the_sandbox(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    sid = (await cli.json("sandboxes", "create"))["id"]  # type: ignore[index]
    async with corral_process(cli, "exec", sid, "--", "echo ready; sleep 600") as process:
        assert process.stdout is not None and process.stderr is not None
        with trio.fail_after(HANG_GUARD):
            await read_until(process.stdout, b"ready\n")  # the command runs and the CLI follows it
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 130
            err = await read_until(process.stderr, b"\n")
    assert err.decode().strip() == "error: interrupted"
    processes = await cli.json("processes", "list", sid)
    assert isinstance(processes, dict) and [p["status"] for p in processes["data"]] == ["killed"]


async def test_logs_follow_a_sandbox_live(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    cli = Cli(runtime_api, tmp_path, owner.key)
    sid = (await cli.json("sandboxes", "create"))["id"]  # type: ignore[index]
    async with corral_process(cli, "logs", sid) as process:
        assert process.stdout is not None and process.stderr is not None
        with trio.fail_after(HANG_GUARD):
            note = await read_until(process.stderr, b"(Ctrl-C stops)\n")  # subscribed: every later line is shown
            assert f"following the logs of sandbox {sid} (Ctrl-C stops)\n" in note.decode()
            await cli.ok("exec", sid, "--", "echo live-line-1; echo live-line-2 >&2")
            seen = await read_until(process.stdout, b"live-line-1\n", b"live-line-2\n")  # stdout and stderr, in either order
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 130
    assert sorted(seen.decode().splitlines()) == ["live-line-1", "live-line-2"]

"""The guest agent through the client: exec, files, background processes."""

from __future__ import annotations

import base64
from contextlib import aclosing

import pytest
import trio

from corral.vm import (
    AgentClient,
    AgentError,
    DestinationExists,
    ExecEvent,
    ExecResult,
    FileNotFound,
    InvalidMode,
    InvalidPath,
    MissingMode,
    MissingPath,
    PathForbidden,
    ProcessNotFound,
    ProcessStartFailed,
)

# -- exec ------------------------------------------------------------------


async def test_exec_streams_lines(agent: AgentClient) -> None:
    events: list[ExecEvent] = []

    async def on_output(event: ExecEvent) -> None:
        events.append(event)

    result = await agent.exec("for i in 1 2 3; do echo line$i; sleep 0.05; done; echo oops >&2", on_output=on_output)
    assert result.exit_code == 0
    assert [e.data for e in events if e.type == "stdout"] == ["line1\n", "line2\n", "line3\n"]
    assert [e.data for e in events if e.type == "stderr"] == ["oops\n"]
    assert result.duration_ms >= 150


async def test_on_sent_is_called_once_before_any_output(agent: AgentClient) -> None:
    """The caller hears that the command went out before anything it printed."""
    seen: list[str] = []

    async def on_sent() -> None:
        seen.append("sent")

    async def on_output(event: ExecEvent) -> None:
        seen.append(event.data)

    result = await agent.exec("echo first; echo second", on_output=on_output, on_sent=on_sent)
    assert result.stdout == "first\nsecond\n"
    assert seen[0] == "sent" and seen.count("sent") == 1
    assert "".join(seen[1:]) == "first\nsecond\n"


async def test_a_warmed_client_reuses_its_connection(agent: AgentClient) -> None:
    """`warm` leaves one kept-alive connection, which the next call takes: no second handshake."""
    await agent.aclose()
    await agent.warm()
    assert len(agent._idle) == 1
    warmed = agent._idle[0]
    await agent.warm()  # one idle already: nothing sent
    assert agent._idle == [warmed]
    assert (await agent.exec("true")).exit_code == 0
    assert agent._idle == [warmed]


async def test_exec_combined_cwd_env(agent: AgentClient) -> None:
    result = await agent.exec("pwd; echo $FOO; echo e >&2", cwd="/tmp", env={"FOO": "bar"}, combined=True)
    assert result.output == "/tmp\nbar\ne\n" and result.stderr == ""
    with pytest.raises(ProcessStartFailed):
        await agent.exec("true", cwd="/does/not/exist")


async def test_exec_timeout_sends_sigterm(agent: AgentClient) -> None:
    with trio.fail_after(10):
        result = await agent.exec("trap 'echo got TERM; exit 5' TERM; sleep 30 & wait", timeout=1)
    assert result.timed_out and result.exit_code == 5 and "got TERM" in result.stdout
    assert 900 <= result.duration_ms < 3000
    # A command that ignores SIGTERM gets SIGKILL after the grace period.
    result = await agent.exec("trap '' TERM; sleep 30", timeout=0.5)
    assert result.timed_out and result.exit_code == 137


async def test_exec_background_child_does_not_block(agent: AgentClient) -> None:
    with trio.fail_after(5):
        result = await agent.exec("sleep 60 & echo started")
    assert result.stdout == "started\n"


async def test_exec_binary_and_large_output(agent: AgentClient) -> None:
    result = await agent.exec("head -c 3000000 /dev/zero | tr '\\0' 'a'; echo")
    assert len(result.stdout) == 3_000_001
    result = await agent.exec("printf '\\377\\376 bad utf8\\n'")
    assert "bad utf8" in result.stdout


async def test_pip_install_and_python_server(agent: AgentClient) -> None:
    """What a new user does first: Python and pip work, a web server answers."""
    result = await agent.exec("python3 --version && pip --version && git --version && jq --version && curl --version")
    assert result.exit_code == 0, result.stderr
    await agent.write_file("/workspace/app.py", b"print('hi from app')\n")
    assert (await agent.exec("python3 app.py")).stdout == "hi from app\n"
    result = await agent.exec("pip install --no-cache-dir six && python3 -c 'import six; print(six.PY3)'", timeout=120)
    assert result.exit_code == 0 and result.stdout.endswith("True\n"), result.stdout + result.stderr
    server = await agent.spawn("python3 -m http.server 8080 --bind 0.0.0.0", cwd="/workspace")
    probe = "import urllib.request, time\nfor _ in range(50):\n    try:\n        print(urllib.request.urlopen('http://127.0.0.1:8080/app.py').read().decode()); break\n    except OSError:\n        time.sleep(0.1)\n"
    await agent.write_file("/tmp/probe.py", probe.encode())
    assert "hi from app" in (await agent.exec("python3 /tmp/probe.py")).stdout
    await agent.kill(server["pid"], grace=1)


# -- files -----------------------------------------------------------------


async def test_write_read_stat_list(agent: AgentClient) -> None:
    data = bytes(range(256)) * 4096
    written = await agent.write_file("/workspace/dir/sub/blob.bin", data)
    assert written == {"path": "/workspace/dir/sub/blob.bin", "size_bytes": len(data)}
    content = await agent.read_file("/workspace/dir/sub/blob.bin")
    assert content.data == data and content.size_bytes == len(data)
    stat = await agent.stat("/workspace/dir/sub/blob.bin")
    assert stat["type"] == "file" and stat["permissions"] == "-rw-r--r--"
    assert stat["owner"] == "root" and stat["group"] == "root"
    assert stat["modified_at"].endswith("Z") and stat["created_at"].endswith("Z")
    listing = await agent.list_files("/workspace/dir")
    assert listing["path"] == "/workspace/dir"
    assert [(f["name"], f["type"], f["permissions"]) for f in listing["files"]] == [("sub", "directory", "drwxr-xr-x")]
    assert (await agent.list_files("~"))["path"] == "/root"
    with pytest.raises(FileNotFound):
        await agent.read_file("/workspace/nope")
    with pytest.raises(FileNotFound):
        await agent.stat("/workspace/nope")
    with pytest.raises(InvalidPath):
        await agent.read_file("/workspace/dir")
    with pytest.raises(InvalidPath):
        await agent.read_file("relative/path")
    with pytest.raises(MissingPath):
        await agent.stat("")
    with pytest.raises(PathForbidden):
        await agent.write_file("/etc/evil", b"x")
    with pytest.raises(PathForbidden):
        await agent.list_files("/tmpfoo")
    with pytest.raises(PathForbidden):
        await agent.list_files("/")


async def test_mkdir_rename_copy_chmod_delete(agent: AgentClient) -> None:
    assert await agent.mkdir("/workspace/a") == {"path": "/workspace/a"}
    with pytest.raises(DestinationExists):
        await agent.mkdir("/workspace/a")
    with pytest.raises(FileNotFound):
        await agent.mkdir("/workspace/x/y/z")
    await agent.mkdir("/workspace/x/y/z", recursive=True)
    await agent.write_file("/workspace/a/f.txt", b"hello")
    await agent.write_file("/workspace/a/g.txt", b"other")
    assert await agent.rename("/workspace/a/f.txt", "/workspace/a/h.txt") == {
        "source": "/workspace/a/f.txt",
        "destination": "/workspace/a/h.txt",
    }
    with pytest.raises(DestinationExists):
        await agent.rename("/workspace/a/h.txt", "/workspace/a/g.txt")
    with pytest.raises(FileNotFound):
        await agent.rename("/workspace/a/missing", "/workspace/a/new")
    with pytest.raises(PathForbidden):
        await agent.rename("/workspace/a/h.txt", "/etc/h.txt")
    await agent.copy("/workspace/a/h.txt", "/tmp/h-copy.txt")
    assert (await agent.read_file("/tmp/h-copy.txt")).data == b"hello"
    with pytest.raises(InvalidPath):
        await agent.copy("/workspace/x", "/workspace/x2")
    with pytest.raises(DestinationExists):
        await agent.copy("/workspace/a/h.txt", "/workspace/a/g.txt")
    assert await agent.chmod("/workspace/a/h.txt", "755") == {"path": "/workspace/a/h.txt", "mode": "755"}
    assert (await agent.stat("/workspace/a/h.txt"))["permissions"] == "-rwxr-xr-x"
    with pytest.raises(MissingMode):
        await agent.chmod("/workspace/a/h.txt", "")
    with pytest.raises(InvalidMode):
        await agent.chmod("/workspace/a/h.txt", "rwx")
    assert await agent.delete("/workspace/a") == {"path": "/workspace/a"}
    with pytest.raises(FileNotFound):
        await agent.stat("/workspace/a/h.txt")
    with pytest.raises(FileNotFound):
        await agent.delete("/workspace/a")
    with pytest.raises(PathForbidden):
        await agent.delete("/workspace")


async def test_files_roundtrip_base64(agent: AgentClient) -> None:
    payload = base64.b64decode(base64.b64encode(b"\x00\x01binary\xff"))
    await agent.write_file("/srv/bin.dat", payload)
    assert (await agent.read_file("/srv/bin.dat")).data == payload
    await agent.write_file("/opt/empty", b"")
    assert (await agent.read_file("/opt/empty")).size_bytes == 0


# -- background processes --------------------------------------------------


async def test_process_lifecycle(agent: AgentClient) -> None:
    started = await agent.spawn("echo one; echo two >&2; sleep 0.2; exit 4", name="short", process_id="proc_test1")
    assert started["pid"] == "proc_test1" and started["status"] == "running" and started["cwd"] == "/workspace"
    with trio.fail_after(10):
        while (await agent.process("proc_test1"))["status"] == "running":
            await trio.sleep(0.05)
    record = await agent.process("proc_test1")
    assert record["status"] == "exited" and record["exit_code"] == 4 and record["exited_at"]
    logs = await agent.logs("proc_test1")
    assert sorted(line["line"] for line in logs["lines"]) == ["one", "two"]
    assert all(line["ts"].endswith("Z") for line in logs["lines"])
    assert [p["pid"] for p in await agent.processes()] == ["proc_test1"]
    with pytest.raises(ProcessNotFound):
        await agent.process("proc_missing")


async def test_process_stdin_and_exact_output(agent: AgentClient) -> None:
    """What agent runs use: a prompt on stdin, and the first bytes of each stream kept exactly."""
    await agent.spawn(
        "cat; printf 'no newline'; head -c 3000 /dev/zero >&2; exit 2", process_id="proc_capture1", stdin="the prompt\n", capture=1000
    )
    with trio.fail_after(10):
        while (await agent.process("proc_capture1"))["status"] == "running":
            await trio.sleep(0.02)
    kept = await agent.output("proc_capture1")
    assert kept.stdout == b"the prompt\nno newline" and kept.stdout_bytes == 21
    assert kept.stderr == b"\0" * 1000 and kept.stderr_bytes == 3000
    # Without capture nothing is kept; a command that never reads its stdin is not disturbed by it.
    await agent.spawn("exit 0", process_id="proc_capture2", stdin="x" * 200_000)
    with trio.fail_after(10):
        while (await agent.process("proc_capture2"))["status"] == "running":
            await trio.sleep(0.02)
    assert (await agent.process("proc_capture2"))["exit_code"] == 0
    kept = await agent.output("proc_capture2")
    assert (kept.stdout, kept.stderr) == (b"", b"")


async def test_process_kill_and_stream(agent: AgentClient) -> None:
    record = await agent.spawn("i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done", env={"X": "1"})
    pid = record["pid"]
    assert pid.startswith("proc_") and len(pid) == 31
    seen: list[str] = []
    async for event in agent.stream_logs(pid):
        seen.append(event["line"])
        if len(seen) == 3:
            break
    assert seen == ["tick 0", "tick 1", "tick 2"]
    later = await agent.logs_after(pid, after=3, wait=5)
    assert later["lines"] and later["lines"][0]["id"] == 4
    killed = await agent.kill(pid, grace=2)
    assert killed["status"] == "killed"
    events = [event async for event in agent.stream_logs(pid, after=0)]
    assert events[-1]["type"] == "end" and events[-1]["process"]["status"] == "killed"
    assert (await agent.logs(pid, tail=2))["lines"][-1]["line"].startswith("tick")
    # The whole process group is gone (the shell's sleep children too).
    assert "sleep 0.05" not in (await agent.exec("ps -e -o args")).stdout


async def test_process_kill_escalates_to_sigkill(agent: AgentClient) -> None:
    record = await agent.spawn("trap '' TERM; echo ready; while true; do sleep 0.1; done")
    with trio.fail_after(10):
        # Only once the trap is set does SIGTERM go unanswered; before, it would just kill.
        while not any(entry["line"] == "ready" for entry in (await agent.logs(record["pid"]))["lines"]):
            await trio.sleep(0.02)
        killed = await agent.kill(record["pid"], grace=0.5)
    assert killed["status"] == "killed" and killed["exit_code"] == 137


async def test_process_spawn_failure(agent: AgentClient) -> None:
    with pytest.raises(ProcessStartFailed):
        await agent.spawn("true", cwd="/nonexistent")
    with pytest.raises(AgentError):
        await agent.spawn("")


# -- long legitimate durations ---------------------------------------------
# The client's agent timeout bounds how long the agent takes to start answering,
# never how long a command runs or a quiet process stays quiet.


@pytest.mark.slow
async def test_long_silent_calls_outlive_the_agent_timeout(agent: AgentClient) -> None:
    """A silent 12 s exec, a silent process stream and a long log wait, all at once."""
    assert agent.timeout <= 10
    results: dict[str, object] = {}

    async def silent_exec() -> None:
        results["exec"] = await agent.exec("sleep 12; echo done", timeout=30)

    async def quiet_process_stream() -> None:
        process = await agent.spawn("sleep 12; echo finally")
        events = [event async for event in agent.stream_logs(process["pid"])]
        results["stream"] = events

    async def long_poll() -> None:
        process = await agent.spawn("sleep 11; echo late")
        results["poll"] = await agent.logs_after(process["pid"], 0, wait=20)

    with trio.fail_after(40):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(silent_exec)
            nursery.start_soon(quiet_process_stream)
            nursery.start_soon(long_poll)
    exec_result = results["exec"]
    assert isinstance(exec_result, ExecResult)
    assert exec_result.exit_code == 0 and exec_result.stdout == "done\n" and exec_result.duration_ms >= 12000
    stream = results["stream"]
    assert isinstance(stream, list)
    assert [e["line"] for e in stream if e["type"] == "log"] == ["finally"]
    assert stream[-1]["type"] == "end"
    poll = results["poll"]
    assert isinstance(poll, dict)
    assert [line["line"] for line in poll["lines"]] == ["late"]


async def test_ten_megabyte_transfer_both_ways(agent: AgentClient) -> None:
    data = bytes(range(256)) * (10 * 1024 * 1024 // 256)
    await agent.write_file("/workspace/big.bin", data)
    content = await agent.read_file("/workspace/big.bin")
    assert content.size_bytes == len(data) and content.data == data


async def test_special_files_are_refused_without_holding_up_the_agent(agent: AgentClient) -> None:
    """A FIFO or a socket planted in /workspace is no file to read, write or copy: each
    call says so at once (opening a FIFO with nobody on the other end would block), and
    the agent answers the next call."""
    await agent.exec("mkfifo /workspace/fifo && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/workspace/sock\")'")
    with trio.fail_after(10):
        for path in ("/workspace/fifo", "/workspace/sock"):
            with pytest.raises(InvalidPath, match="not a regular file"):
                await agent.read_file(path)
            with pytest.raises(InvalidPath, match="not a regular file"):
                await agent.write_file(path, b"x")
            with pytest.raises(InvalidPath, match="not a regular file"):
                await agent.copy(path, path + "-copy")
        assert (await agent.exec("echo alive")).stdout == "alive\n"
    await agent.exec("printf run > /workspace/tool && chmod 751 /workspace/tool && touch -d 2020-01-02T03:04:05Z /workspace/tool")
    await agent.copy("/workspace/tool", "/workspace/tool-copy")
    copied = await agent.stat("/workspace/tool-copy")
    assert (copied["permissions"], copied["modified_at"]) == ("-rwxr-x--x", "2020-01-02T03:04:05.000Z")
    assert (await agent.read_file("/workspace/tool-copy")).data == b"run"


async def test_many_short_lines_come_in_few_events(agent: AgentClient) -> None:
    """An event carries the complete lines of one read (at most 64 KiB), not one line:
    `seq 1 200000` (1.3 MB, 200,000 lines) is tens of events, not 200,000 (which took
    longer than the exec's default timeout to relay)."""
    counts = {"stdout": 0}
    text: list[str] = []
    async with aclosing(agent.exec_stream("seq 1 200000")) as events:
        async for event in events:
            if event.type == "stdout":
                counts["stdout"] += 1
                text.append(event.data)
    assert "".join(text) == "".join(f"{n}\n" for n in range(1, 200001))
    assert counts["stdout"] <= 1_288_895 // 4096, counts


async def test_what_execve_cannot_take_is_a_400_and_the_agent_answers_on(agent: AgentClient) -> None:
    """A NUL in a command or a variable, or a name with `=`, is the caller's mistake: 400
    INVALID_PARAM before anything runs (before, the agent's connection broke)."""
    for command, env in (("echo a\0b", None), ("true", {"A": "x\0y"}), ("true", {"A=B": "x"}), ("true", {"": "x"})):
        with pytest.raises(AgentError) as caught:
            await agent.exec(command, env=env)
        assert (caught.value.status, caught.value.code) == (400, "INVALID_PARAM")
        with pytest.raises(AgentError) as caught:
            await agent.spawn(command, env=env)
        assert (caught.value.status, caught.value.code) == (400, "INVALID_PARAM")
    assert (await agent.exec("echo alive")).stdout == "alive\n"


async def test_long_log_lines_come_in_answers_the_control_plane_takes(agent: AgentClient) -> None:
    """5,000 lines of 16,384 characters (80 MiB) are more than one answer may carry: the
    tail is the newest lines that fit, and reading on from `next` gets every line."""
    started = await agent.spawn("python3 -c \"for i in range(5000): print(str(i).rjust(16384, 'x'))\"")
    while (await agent.process(started["pid"]))["status"] == "running":
        await trio.sleep(0.1)
    tail = await agent.logs(started["pid"], tail=10_000)
    assert 0 < len(tail["lines"]) < 5000 and tail["lines"][-1]["line"].endswith("x4999")
    seen: list[str] = []
    after = 0
    while len(seen) < 5000:
        page = await agent.logs_after(started["pid"], after)
        assert page["lines"], after
        seen += [entry["line"] for entry in page["lines"]]
        after = page["next"]
    assert [line.lstrip("x") for line in seen] == [str(i) for i in range(5000)]

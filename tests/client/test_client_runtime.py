"""The client's helpers against a real server running real instances: waiting for
states, exec and streamed exec, files, SSE with tickets and Last-Event-ID, terminals."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from corral.client import (
    AsyncClient,
    Conflict,
    CorralError,
    NotFound,
    OutputLine,
    PayloadTooLarge,
    Terminal,
    Unprocessable,
    open_async_terminal,
    unwrap,
)
from tests.client.proxy import cuttable_proxy
from tests.client.support import async_client, in_thread, sync_client
from tests.support import Api, Tenant


async def test_sandbox_lifecycle_exec_and_streamed_exec(runtime_api: Api, owner: Tenant, other_tenant_key: str) -> None:
    async with async_client(runtime_api, owner.key) as corral:
        box = unwrap(await corral.create_sandbox(name="client-test"))
        seen: list[str | None] = []
        running = await corral.wait_for("sandbox", box["id"], "running", on_change=seen.append)
        assert running["status"] == "running" and seen[-1] == "running"
        result = await corral.sandbox_exec(box["id"], command="echo out; echo err >&2; exit 3")
        assert (result["exit_code"], result["stdout"], result["stderr"]) == (3, "out\n", "err\n")
        run = await corral.exec_stream(box["id"], "for i in 1 2 3; do echo line-$i; sleep 0.2; done; echo oops >&2; exit 4")
        lines: list[OutputLine] = []
        assert await run.wait(lines.append) == 4
        assert [(line.stream, line.line) for line in lines] == [
            ("stdout", "line-1"), ("stdout", "line-2"), ("stdout", "line-3"), ("stderr", "oops"),
        ]
        with pytest.raises(NotFound):
            await async_client(runtime_api, other_tenant_key).get_sandbox(box["id"])

    def blocking() -> tuple[list[tuple[str, str]], int | None, str]:
        with sync_client(runtime_api, owner.key) as corral:
            run = corral.exec_stream(box["id"], "echo from-sync; exit 0")
            out = [(line.stream, line.line) for line in run]
            stopped = unwrap(corral.sandbox_stop(box["id"]))
            try:
                corral.sandbox_exec(box["id"], command="true")
            except Conflict as error:
                return out, run.exit_code, error.code
            return out, run.exit_code, stopped["status"]

    out, code, refusal = await in_thread(blocking)
    assert out == [("stdout", "from-sync")] and code == 0
    assert refusal == "SANDBOX_NOT_RUNNING"


async def test_files_up_and_down(runtime_api: Api, owner: Tenant, tmp_path: Path) -> None:
    async with async_client(runtime_api, owner.key) as corral:
        box = unwrap(await corral.create_sandbox())
        await corral.wait_for("sandbox", box["id"], "running")
    local = tmp_path / "data.bin"
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    local.write_bytes(payload)
    target = tmp_path / "back.bin"

    def transfer() -> tuple[object, bytes | Path, bytes | Path]:
        with sync_client(runtime_api, owner.key) as corral:
            uploaded = corral.upload(box["id"], local, "/workspace/data.bin")
            whole = corral.download(box["id"], "/workspace/data.bin")
            streamed = corral.download(box["id"], "/workspace/data.bin", target)
        return uploaded, whole, streamed

    uploaded, whole, streamed = await in_thread(transfer)
    assert whole == payload and streamed == target and target.read_bytes() == payload
    assert "/workspace/data.bin" in str(uploaded)
    async with async_client(runtime_api, owner.key) as corral:
        await corral.upload(box["id"], b"hello", "/workspace/hello.txt")
        assert await corral.download(box["id"], "/workspace/hello.txt") == b"hello"
        with pytest.raises(NotFound):
            await corral.download(box["id"], "/workspace/missing.txt")
        limit = 10 * 1024 * 1024  # the files API's upload limit
        await corral.upload(box["id"], b"x" * limit, "/workspace/max.bin")
        assert len(await corral.download(box["id"], "/workspace/max.bin")) == limit
        with pytest.raises(PayloadTooLarge) as too_large:
            await corral.upload(box["id"], b"x" * (limit + 1), "/workspace/over.bin")
        assert too_large.value.code == "FILE_TOO_LARGE"


async def test_event_streams_with_tickets_and_last_event_id(runtime_api: Api, owner: Tenant) -> None:
    async with async_client(runtime_api, owner.key) as corral:
        box = unwrap(await corral.create_sandbox())
        sid = box["id"]
        await corral.wait_for("sandbox", sid, "running")
        stream = corral.stream_sandbox_events(sid, ticket=True)
        first: list[str] = []
        async with stream:  # connected and subscribed: nothing after this is missed
            await corral.sandbox_exec(sid, command="echo first")
            async for event in stream:
                first.append(event.event)
                if event.event == "sandbox.exec.completed":
                    break
        assert first[-1] == "sandbox.exec.completed" and "sandbox.exec.stdout" in first
        resume_from = stream.last_event_id
        assert resume_from is not None
        await corral.sandbox_exec(sid, command="echo missed")
        resumed = corral.stream_sandbox_events(sid, last_event_id=resume_from)
        replayed = []
        async with resumed:
            async for event in resumed:
                replayed.append(event)
                if event.event == "sandbox.exec.completed":
                    break
        assert [e.data.get("line") for e in replayed if e.event == "sandbox.exec.stdout"] == ["missed"]
        assert all((e.id or "") > resume_from for e in replayed)


async def test_a_computer_terminal_sync_and_async(runtime_api: Api, owner: Tenant) -> None:
    async with async_client(runtime_api, owner.key) as corral:
        computer = await corral.create_computer(name="client terminal", template_type="svc-desktop")
        await corral.wait_for("computer", computer["id"], "running", timeout=300)  # a hang guard

    def blocking() -> bytes:
        with sync_client(runtime_api, owner.key) as corral, corral.terminal(computer["id"], cols=100, rows=30) as term:
            term.read_until(b"# ", timeout=60)
            term.send(b"echo hi-$((6*7)); stty size\n")
            return term.read_until(b"30 100", timeout=60)

    assert b"hi-42" in await in_thread(blocking)

    def refused() -> CorralError:
        with sync_client(runtime_api, owner.key) as corral:
            url = unwrap(corral.computer_terminal(computer["id"]))["ws_url"]
        try:
            Terminal(url.split("?auth=")[0] + "?auth=wrong")
        except CorralError as error:
            return error
        raise AssertionError("a wrong stream token opened a terminal")

    assert (await in_thread(refused)).status == 401  # refused before the upgrade
    async with async_client(runtime_api, owner.key) as corral, corral.terminal(computer["id"]) as term:
        await term.read_until(b"# ", timeout=60)
        await term.resize(120, 40)
        await term.send("stty size\n")
        assert b"40 120" in await term.read_until(b"40 120", timeout=60)
    async with async_client(runtime_api, owner.key) as corral:
        session = unwrap(await corral.computer_terminal(computer["id"]))
    async with open_async_terminal(session["ws_url"]) as term:  # any session's URL
        await term.read_until(b"# ", timeout=60)
        await term.send(b"exit\n")
        with trio.fail_after(180):  # a hang guard
            while await term.recv() is not None:
                pass  # until the shell's exit closes the socket


@pytest.fixture
async def other_tenant_key(runtime_api: Api) -> str:
    return (await runtime_api.create_tenant("Other")).key


async def test_a_dropped_stream_reconnects_with_last_event_id(runtime_api: Api, owner: Tenant) -> None:
    direct = async_client(runtime_api, owner.key)
    box = unwrap(await direct.create_sandbox())
    sid = box["id"]
    await direct.wait_for("sandbox", sid, "running")
    async with cuttable_proxy(runtime_api.platform.settings.port) as proxy:
        through = AsyncClient(f"http://127.0.0.1:{proxy.port}", owner.key)
        seen = []
        with trio.fail_after(180):  # a hang guard
            async with through.stream_sandbox_events(sid) as stream:
                await direct.sandbox_exec(sid, command="echo one")
                async for event in stream:
                    seen.append(event)
                    if event.event != "sandbox.exec.completed":
                        continue
                    if proxy.connections > 1:
                        break
                    proxy.cut()  # the connection drops mid-stream; meanwhile more happens
                    await direct.sandbox_exec(sid, command="echo two")
        await through.aclose()
    assert proxy.connections == 2
    assert [e.data["line"] for e in seen if e.event == "sandbox.exec.stdout"] == ["one", "two"]
    ids = [e.id for e in seen]
    assert all(ids) and ids == sorted(ids) and len(set(ids)) == len(ids)  # nothing lost, nothing twice
    await direct.aclose()


async def test_database_creation_is_idempotent_through_the_client(runtime_api: Api, owner: Tenant) -> None:
    async with async_client(runtime_api, owner.key) as corral:
        first = unwrap(await corral.create_database(name="idem", idempotency_key="client-db-1"))
        replayed = unwrap(await corral.create_database(name="idem", idempotency_key="client-db-1"))
        assert replayed["id"] == first["id"]  # one database: the stored reply
        with pytest.raises(Unprocessable) as reused:
            await corral.create_database(name="other", idempotency_key="client-db-1")
        assert reused.value.code == "IDEMPOTENCY_KEY_REUSED"
        listed = unwrap(await corral.call("GET", "/api/v1/databases"))
        assert [d["id"] for d in listed if d["name"] == "idem"] == [first["id"]]
        await corral.wait_for("database", first["id"], "running", timeout=300)  # a hang guard
        await corral.call("DELETE", "/api/v1/databases/{id}", path={"id": first["id"]})

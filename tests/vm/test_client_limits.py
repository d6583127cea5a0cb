"""The agent client against an agent that is not ours: a tenant is root in its instance
and may put its own server on the agent's port. Whatever it answers, the control plane
holds a bounded amount of it: an exec's output, a file, a JSON answer.

The foreign agent is the agent's own HTTP layer (`httpserver`) with a handler that
misbehaves on purpose, on loopback.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest
import trio

from corral.vm import AgentClient, AgentUnavailable, FileTooLarge
from corral.vm import client as client_module
from corral.vm.agent.httpserver import Request, Response, Send, serve

LIMIT = 1000


def events(*items: dict[str, object]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


async def foreign(request: Request) -> Response:
    if request.path == "/exec" and request.json().get("command") == "junk":
        async def junk(send: Send) -> None:
            await send(b"not json\n", final=True)

        return Response(200, headers={"content-type": "application/x-ndjson"}, writer=junk)
    if request.path == "/exec":
        async def flood(send: Send) -> None:  # ignores `output_limit`
            for _ in range(50):
                await send(events({"type": "stdout", "data": "o" * 100}, {"type": "stderr", "data": "e" * 30}))
            await send(events({"type": "exit", "exit_code": 0, "duration_ms": 1}), final=True)

        return Response(200, headers={"content-type": "application/x-ndjson"}, writer=flood)
    if request.path == "/files/read":
        declared = {"/workspace/small": 10, "/workspace/big": 1_000_000}[request.query["path"]]

        async def other_than_declared(send: Send) -> None:
            await send(b"x" * 5000, final=True)

        headers = {"x-file-size": str(declared), "x-file-path": request.query["path"]}
        return Response(200, headers=headers, writer=other_than_declared)
    return Response(200, b'{"padding": "' + b"p" * 5000 + b'"}', {"content-type": "application/json"})


@pytest.fixture
async def agent(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AgentClient]:
    monkeypatch.setattr(client_module, "MAX_EXEC_OUTPUT", LIMIT)
    monkeypatch.setattr(client_module, "MAX_JSON_ANSWER", LIMIT)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, listeners, foreign)
        async with AgentClient("127.0.0.1", port, "token") as client:
            yield client
        nursery.cancel_scope.cancel()


async def test_an_exec_keeps_no_more_output_than_its_limit(agent: AgentClient) -> None:
    result = await agent.exec("anything")
    assert (len(result.stdout), len(result.stderr), result.truncated) == (LIMIT, LIMIT, True)
    assert set(result.stdout) == {"o"} and set(result.stderr) == {"e"}


async def test_a_file_must_be_the_size_it_was_said_to_be(agent: AgentClient) -> None:
    for path, problem in (("/workspace/small", "more than the file's 10 bytes"), ("/workspace/big", "5000 of its 1000000 bytes")):
        stream = await agent.open_file(path)
        with pytest.raises(AgentUnavailable, match=problem):
            async with aclosing(stream.chunks):
                async for _ in stream.chunks:
                    pass
    with pytest.raises(FileTooLarge, match="1000000 bytes, more than the 10"):
        await agent.read_file("/workspace/big", max_bytes=10)


async def test_a_json_answer_past_the_limit_is_refused(agent: AgentClient) -> None:
    with pytest.raises(AgentUnavailable, match="more than was asked for"):
        await agent.health()


async def test_an_event_that_is_not_json_is_the_agent_failing(agent: AgentClient) -> None:
    with pytest.raises(AgentUnavailable, match="not a JSON object"):
        await agent.exec("junk")

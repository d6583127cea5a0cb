"""SSE on any node sees every event of the resource (issue 30): two real `corral serve`
nodes on one real PostgreSQL; a sandbox lives on node A and is used through A, its
event stream is read from node B, live (LISTEN/NOTIFY beside the event log) and after a
reconnect with `Last-Event-ID` (replay from the shared log)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import httpx
import trio

from corral.storage import open_database
from tests.pg_server import create_database
from tests.serve_process import Served, corral_serve
from tests.sse_client import Frame, SseStream, open_sse
from tests.support import RUNTIME_SETTINGS, cleanup_host, host_names

API = "/api/v1"
_databases = itertools.count()

RUNTIME_VARIABLES = {
    "bridge": "CORRAL_BRIDGE", "subnet": "CORRAL_SUBNET", "nft_table": "CORRAL_NFT_TABLE",
    "link_prefix": "CORRAL_LINK_PREFIX", "netns_prefix": "CORRAL_NETNS_PREFIX", "cgroup_parent": "CORRAL_CGROUP_PARENT",
}
NODE_B_HOST = host_names(
    bridge="corrsev0", subnet_prefix="10.225", nft_table="corral_sev_b", link_letter="v",
    netns_prefix="corrsev", cgroup_parent="corral-sev-b",
)
"""Node B runs no instance, but its runtime must not share node A's host names."""


def runtime_env(names: dict[str, Any]) -> dict[str, str]:
    return {
        "CORRAL_TEMPLATE_DIR": str(RUNTIME_SETTINGS["template_dir"]),
        **{variable: str(names[name]) for name, variable in RUNTIME_VARIABLES.items()},
    }


async def exec_on(client: httpx.AsyncClient, node: Served, key: str, sandbox_id: str, command: str) -> str:
    answer = await client.post(
        f"{node.base}{API}/sandboxes/{sandbox_id}/exec", headers={"Authorization": f"Bearer {key}"}, json={"command": command}
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["exec_id"])


async def frames_of_execs(stream: SseStream, count: int) -> list[Frame]:
    """Frames up to the `count`-th `sandbox.exec.completed`."""
    frames: list[Frame] = []
    for _ in range(count):
        frames += await stream.frames_until("sandbox.exec.completed", timeout=30)
    return frames


def by_exec(frames: list[Frame]) -> list[tuple[str, str]]:
    """The exec frames (the sandbox's other events, such as its activity, may come between)."""
    return [(str(frame.data["exec_id"]), str(frame.event)) for frame in frames if str(frame.event).startswith("sandbox.exec.")]


def expected(exec_ids: list[str]) -> list[tuple[str, str]]:
    """What one `echo` exec publishes, exec after exec."""
    return [(exec_id, what) for exec_id in exec_ids for what in ("sandbox.exec.started", "sandbox.exec.stdout", "sandbox.exec.completed")]


async def nothing_more(stream: SseStream, seconds: float = 1.0) -> None:
    with trio.move_on_after(seconds) as waited:
        extra = await stream.next_frame(timeout=seconds * 2)
        raise AssertionError(f"an event came twice or unasked: {extra}")
    assert waited.cancelled_caught


async def test_an_sse_stream_on_node_b_sees_a_sandbox_used_through_node_a_live_and_after_a_reconnect(
    tmp_path: Path, postgres_url: str, runtime_host: None
) -> None:
    url = create_database(postgres_url, f"shared_events_{os.getpid()}_{next(_databases)}")
    common = {"CORRAL_DATABASE_URL": url, "CORRAL_EGRESS_PROXY": "0", "CORRAL_SSE_HEARTBEAT_SECONDS": "1"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        with corral_serve(tmp_path / "a", {**common, **runtime_env(RUNTIME_SETTINGS)}, "--node-name", "node-a") as a, corral_serve(
            tmp_path / "b", {**common, **runtime_env(NODE_B_HOST)}, "--node-name", "node-b"
        ) as b:
            key = a.owner_key("Shared events", "owner@shared-events.example")
            bearer = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(timeout=60) as client:
                created = await client.post(f"{a.base}{API}/sandboxes", headers=bearer, json={})
                assert created.status_code == 201, created.text
                sandbox = created.json()["data"]
                assert (sandbox["status"], sandbox["node"]) == ("running", "node-a")
                stream_url = f"{b.base}{API}/sandboxes/{sandbox['id']}/events"
                try:
                    async with open_sse(client, stream_url, bearer) as stream:
                        await stream.wait_connected()
                        live = [await exec_on(client, a, key, sandbox["id"], f"echo live {i}") for i in range(5)]
                        seen = await frames_of_execs(stream, 5)
                        assert by_exec(seen) == expected(live)  # every event, in order, once
                        ids = [frame.id for frame in seen]
                        assert ids == sorted(ids) and len(set(ids)) == len(ids)
                        assert [frame.data["line"] for frame in seen if frame.event == "sandbox.exec.stdout"] == [f"live {i}" for i in range(5)]
                        # The creation's events may come too: A's log commits them a few ms after its answer.
                        assert {frame.event for frame in seen if frame.data.get("exec_id") is None} <= {"sandbox.created", "sandbox.ready", "sandbox.started"}
                        await nothing_more(stream)

                    # While nobody listens on B: three more execs through A.
                    missed = [await exec_on(client, a, key, sandbox["id"], f"echo missed {i}") for i in range(3)]
                    async with open_sse(client, stream_url, {**bearer, "Last-Event-ID": str(ids[-1])}) as stream:
                        replayed = await frames_of_execs(stream, 3)
                        assert by_exec(replayed) == expected(missed)
                        again = [await exec_on(client, a, key, sandbox["id"], "echo again")]
                        assert by_exec(await frames_of_execs(stream, 1)) == expected(again)  # then live again
                        await nothing_more(stream)
                finally:
                    destroyed = await client.delete(f"{a.base}{API}/sandboxes/{sandbox['id']}", headers=bearer)
                    assert destroyed.status_code == 200, destroyed.text
            db = open_database(url)
            try:  # and B's listener only read rows: every event was logged once, by A
                logged = await db.fetch_value("SELECT COUNT(*) AS n FROM events WHERE resource_id = ? AND type LIKE 'sandbox.exec.%'", (sandbox["id"],))
                assert logged == 3 * 9
            finally:
                await db.close()
    finally:
        cleanup_host(**{name: NODE_B_HOST[name] for name in ("bridge", "link_prefix", "netns_prefix", "nft_table", "cgroup_parent")})

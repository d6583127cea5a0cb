"""`corral admin top`, `nodes` and `drain` against a real server (contracts §19, §20):
one frame with `--once`, the endpoints' JSON with `--json`, the node listed and
drained, and a tenant's key refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

from corral.commands import admin
from corral.ids import new_uuid
from tests.actors.machine import TABLE, create_machine
from tests.client.test_cli import ERROR_LINE, Cli
from tests.http.test_actor_introspection import Add, MachineActor
from tests.support import ADMIN_KEY, Api, Tenant


async def test_admin_top_once_shows_the_node_and_the_busiest_actors(api: Api, tenant: Tenant, tmp_path: Path) -> None:
    await api.platform.db.execute(TABLE)
    machine_id = new_uuid()
    await create_machine(api.platform.db, machine_id, "running")
    ref = await api.platform.system.get(MachineActor, machine_id)
    assert await ref.ask(Add(1)) == 1

    cli = Cli(api, tmp_path, None)
    cli.env["CORRAL_ADMIN_KEY"] = ADMIN_KEY
    out = await cli.ok("admin", "top", "--once")
    name = (await api.admin("GET", "/api/v1/admin/node")).json()["data"]["node"]["name"]
    assert out.startswith(f"node {name}  up "), out
    assert re.search(r"^cores \d+ ", out, re.MULTILINE), out
    assert re.search(r"^actors \d+ live", out, re.MULTILINE), out
    assert re.search(rf"^{MachineActor.kind} +{machine_id} +running +0", out, re.MULTILINE), out
    assert re.search(rf"^  node {re.escape(name)} active  local  http://127\.0\.0\.1:\d+  0 instances", out, re.MULTILINE), out

    sample = await cli.json("admin", "top", "--once")
    assert isinstance(sample, dict)
    assert sample["node"]["actors"]["by_kind"][MachineActor.kind] == 1
    assert machine_id in [actor["id"] for actor in sample["actors"]]
    assert [node["name"] for node in sample["nodes"]] == [name]
    assert json.dumps(sample)  # plain JSON, as the endpoints answered

    refused = Cli(api, tmp_path, tenant.key)  # a tenant's key (CORRAL_API_KEY), no admin key
    code, _out, err = await refused("admin", "top", "--once")
    assert code == 1 and ERROR_LINE.match(err.strip()), err
    assert "FORBIDDEN" in err


def test_the_busiest_actors_come_first() -> None:
    actors = [
        {"kind": "sandbox", "id": "a", "mailbox_depth": 0, "restarts": 0},
        {"kind": "sandbox", "id": "b", "mailbox_depth": 0, "restarts": 3},
        {"kind": "computer", "id": "c", "mailbox_depth": 5, "restarts": 0},
    ]
    assert [a["id"] for a in admin.top_actors(actors, 2)] == ["c", "b"]


async def test_admin_nodes_lists_the_node_and_admin_drain_drains_it(api: Api, tenant: Tenant, tmp_path: Path) -> None:
    cli = Cli(api, tmp_path, None)
    cli.env["CORRAL_ADMIN_KEY"] = ADMIN_KEY
    name = api.platform.settings.node_name
    listed = (await cli.ok("admin", "nodes")).splitlines()
    assert listed[0].split() == ["NAME", "STATE", "MOVING", "REGION", "ADVERTISE_URL", "HEARTBEAT_AT", "RESOURCES"]
    assert listed[1].split()[:4] == [name, "active", "-", "local"], listed
    drained = (await cli.ok("admin", "drain", name, "--move", "all")).splitlines()
    assert drained[1].split()[:3] == [name, "draining", "all"], drained
    assert [(node["state"], node["moving"]) for node in await cli.json("admin", "nodes")] == [("draining", "all")]
    code, _out, err = await cli("admin", "drain", "no-such-node")
    assert code == 1 and "NODE_NOT_FOUND" in err, err
    refused = Cli(api, tmp_path, tenant.key)
    code, _out, err = await refused("admin", "nodes")
    assert code == 1 and "FORBIDDEN" in err, err

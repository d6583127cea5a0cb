"""`GET /admin/node`: the node's live picture for operators (contract §19), and the
request window it reads its request rate from."""

from __future__ import annotations

from corral.http.request_window import BUCKET_SECONDS, RequestWindow
from corral.ids import new_uuid
from tests.actors.machine import TABLE, create_machine
from tests.http.test_actor_introspection import Add, MachineActor
from tests.http.test_sandboxes import create
from tests.support import Api, Tenant


async def test_the_node_picture_and_its_numbers_moving(api: Api, tenant: Tenant) -> None:
    first = await api.admin("GET", "/api/v1/admin/node")
    assert first.status_code == 200, first.text
    before = first.json()["data"]
    assert set(before) == {"node", "capacity", "load", "actors", "warm_pool", "requests"}
    assert before["node"]["name"]
    assert before["node"]["started_at"].endswith("Z") and before["node"]["uptime_seconds"] >= 0
    capacity = before["capacity"]
    assert capacity["cpu_cores"] >= 1
    assert 0 < capacity["memory_available_mb"] <= capacity["memory_total_mb"]
    assert 0 <= capacity["disk_free_gb"] <= capacity["disk_total_gb"]
    assert before["load"]["instances_running"] == 0  # no runtime on this server: none started to count
    assert set(before["load"]["instances_by_kind"]) == {"sandbox", "computer", "database"}
    assert before["warm_pool"] is None

    # Work: a live actor with a message handled, and more requests answered.
    await api.platform.db.execute(TABLE)
    machine_id = new_uuid()
    await create_machine(api.platform.db, machine_id, "running")
    ref = await api.platform.system.get(MachineActor, machine_id)
    assert await ref.ask(Add(2)) == 2
    for _ in range(5):
        assert (await api.request("GET", "/api/v1/tenant", key=tenant.key)).status_code == 200
    assert (await api.request("GET", f"/api/v1/sandboxes/{new_uuid()}", key=tenant.key)).status_code == 404

    after = (await api.admin("GET", "/api/v1/admin/node")).json()["data"]
    actors = after["actors"]
    assert actors["live"] >= before["actors"]["live"] + 1
    assert actors["by_kind"].get("machine") == 1
    assert actors["by_state"].get("running", 0) >= 1
    assert actors["mailbox_depth"] >= 0 and actors["restarts"] == 0
    requests = after["requests"]
    assert requests["total"] >= before["requests"]["total"] + 7  # the 6 above and the first picture
    assert requests["per_second"] > 0
    assert requests["mean_ms"] is not None and requests["max_ms"] >= requests["mean_ms"]
    assert sum(bucket["requests"] for bucket in requests["buckets"]) == requests["total"]
    assert after["node"]["uptime_seconds"] >= before["node"]["uptime_seconds"]


async def test_only_the_operator_sees_it(api: Api, tenant: Tenant) -> None:
    refused = await api.request("GET", "/api/v1/admin/node", key=tenant.key)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "FORBIDDEN"
    anonymous = await api.request("GET", "/api/v1/admin/node")
    assert anonymous.status_code == 401


class Answered:
    def __init__(self, status: int, duration_seconds: float) -> None:
        self.status = status
        self.duration_seconds = duration_seconds


def test_the_window_keeps_five_minutes_of_ten_second_buckets() -> None:
    now = [1000.0]
    window = RequestWindow(clock=lambda: now[0])
    window(Answered(200, 0.010))
    window(Answered(503, 0.030))
    now[0] += BUCKET_SECONDS
    window(Answered(200, 0.020))
    summary = window.summary()
    assert (summary["total"], summary["errors_total"], summary["errors"]) == (3, 1, 1)
    assert summary["per_second"] == 3 / BUCKET_SECONDS
    assert summary["mean_ms"] == 20.0 and summary["max_ms"] == 30.0
    assert [b["requests"] for b in summary["buckets"]] == [2, 1]

    now[0] += 120  # out of the rate's minute, still in the five minutes' buckets
    later = window.summary()
    assert later["per_second"] == 0 and later["mean_ms"] is None
    assert len(later["buckets"]) == 2
    now[0] += 300
    assert window.summary()["buckets"] == [] and window.summary()["total"] == 3


async def test_a_running_sandbox_counts_in_the_load(runtime_api: Api, owner: Tenant) -> None:
    before = (await runtime_api.admin("GET", "/api/v1/admin/node")).json()["data"]
    sandbox = await create(runtime_api, owner)
    after = (await runtime_api.admin("GET", "/api/v1/admin/node")).json()["data"]
    assert after["load"]["instances_running"] >= before["load"]["instances_running"] + 1
    running = after["load"]["instances_by_kind"]["sandbox"].get("running", 0)
    assert running == before["load"]["instances_by_kind"]["sandbox"].get("running", 0) + 1
    listed = (await runtime_api.admin("GET", "/api/v1/admin/actors?kind=sandbox")).json()["data"]
    if any(actor["id"] == sandbox["id"] for actor in listed):  # live until it passivates
        assert after["actors"]["by_kind"].get("sandbox", 0) >= 1

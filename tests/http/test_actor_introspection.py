"""`GET /admin/actors` and `/admin/actors/{kind}/{id}` show the live actors of the system."""

from dataclasses import dataclass

from corral.actors import Message, RecordActor, TransitionTable, handles
from corral.ids import new_uuid
from tests.actors.machine import MACHINES, TABLE, MachineRecord, create_machine
from tests.support import Api, Tenant


@dataclass(frozen=True)
class Add(Message):
    amount: int


class MachineActor(RecordActor):
    """A record actor over the kernel tests' table, living in the server's own system."""

    kind = "machine"
    store = MACHINES
    record: MachineRecord
    transitions = TransitionTable({("running", Add): "running"})

    @handles(Add)
    async def add(self, message: Add) -> int:
        await self.apply(message, counter=self.record.counter + message.amount)
        return int(self.record.counter)


async def test_operator_sees_live_actors(api: Api, tenant: Tenant) -> None:
    db = api.platform.db
    await db.execute(TABLE)
    machine_id = new_uuid()
    await create_machine(db, machine_id, "running")
    ref = await api.platform.system.get(MachineActor, machine_id)
    assert await ref.ask(Add(3)) == 3

    listing = await api.admin("GET", "/api/v1/admin/actors")
    assert listing.status_code == 200
    mine = [a for a in listing.json()["data"] if a["id"] == machine_id]
    assert len(mine) == 1
    assert mine[0]["kind"] == MachineActor.kind
    assert mine[0]["state"] == "running"
    assert mine[0]["status"] == "alive"
    assert mine[0]["mailbox_depth"] == 0
    assert mine[0]["restarts"] == 0
    assert mine[0]["last_error"] is None
    assert mine[0]["age_seconds"] >= 0

    filtered = await api.admin("GET", f"/api/v1/admin/actors?kind={MachineActor.kind}")
    assert [a["id"] for a in filtered.json()["data"]] == [machine_id]
    assert (await api.admin("GET", "/api/v1/admin/actors?kind=nothing")).json()["data"] == []

    one = await api.admin("GET", f"/api/v1/admin/actors/{MachineActor.kind}/{machine_id}")
    assert one.status_code == 200
    assert one.json()["data"]["id"] == machine_id

    missing = await api.admin("GET", f"/api/v1/admin/actors/{MachineActor.kind}/{new_uuid()}")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "NOT_FOUND"

    refused = await api.request("GET", "/api/v1/admin/actors", key=tenant.key)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "FORBIDDEN"

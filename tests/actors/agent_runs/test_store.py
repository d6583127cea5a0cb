"""The agent-run tables on both stores: runs paged by cursor, events in order, artifacts."""

from __future__ import annotations

from corral.actors.agent_runs import store
from corral.actors.agent_runs.store import AgentRunRecord, ArtifactRecord, RunEvent
from corral.ids import new_ulid, new_uuid
from corral.storage import Database


def _run(tenant_id: str, created_at: str, **fields: object) -> AgentRunRecord:
    values: dict[str, object] = dict(
        id=new_uuid(), tenant_id=tenant_id, user_id=None, workspace_id=None, agent_run_group_id=None,
        parent_agent_run_id=None, orchestration_role=None, target_kind="sandbox", target_id="t1", provider="custom",
        model=None, prompt="p", command="true", cwd="/workspace", timeout_seconds=600, agent_runtime_profile_id=None,
        status="running", exit_code=None, output="", stderr="", output_truncated=0, stderr_truncated=0, error=None,
        metadata={"artifact_paths": ["/a"]}, started_at=created_at, finished_at=None, created_at=created_at,
        updated_at=created_at,
    )
    values.update(fields)
    return AgentRunRecord(**values)  # type: ignore[arg-type]


async def test_runs_events_and_artifacts(db: Database) -> None:
    tenant = new_uuid()
    runs = [_run(tenant, f"2026-01-01T00:00:0{i % 3}.000000Z", status="failed" if i % 2 else "succeeded") for i in range(7)]
    for run in runs:
        await db.transaction(lambda tx, run=run: store.insert_run(tx, run))
    await db.transaction(lambda tx: store.insert_run(tx, _run(new_uuid(), "2026-01-01T00:00:09.000000Z")))  # running
    newest_first = sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)
    seen, before = [], None
    while True:
        page = await store.page(db, tenant, {}, limit=3, before=before)
        seen += page
        if len(page) < 3:
            break
        before = (page[-1].created_at, page[-1].id)
    assert [r.id for r in seen] == [r.id for r in newest_first]
    failed = await store.page(db, tenant, {"status": "failed"}, limit=100, before=None)
    assert {r.id for r in failed} == {r.id for r in runs if r.status == "failed"}
    loaded = await store.load(db, runs[0].id)
    assert loaded == runs[0] and loaded.metadata == {"artifact_paths": ["/a"]}
    assert await store.find(db, new_uuid(), runs[0].id) is None

    run = runs[0]
    events = [RunEvent(new_ulid(), run.id, tenant, "t1", kind, {"n": n}, "2026-01-01T00:00:00Z") for n, kind in enumerate(("created", "command_started", "command_finished"))]

    def write(tx: object) -> None:
        for event in events:
            store.insert_event(tx, event)  # type: ignore[arg-type]
        store.update_run(tx, run.id, {"status": "succeeded", "exit_code": 0, "metadata": {"x": 1}})  # type: ignore[arg-type]

    await db.transaction(write)
    assert [e.type for e in await store.events_of_run(db, run.id)] == ["created", "command_started", "command_finished"]
    assert [e.data for e in await store.events_of_run(db, run.id, after=events[0].id)] == [{"n": 1}, {"n": 2}]
    assert len(await store.events_of_target(db, tenant, "t1", after="")) == 3
    assert await store.events_of_target(db, new_uuid(), "t1", after="") == []
    updated = await store.load(db, run.id)
    assert updated is not None and (updated.status, updated.exit_code, updated.metadata) == ("succeeded", 0, {"x": 1})

    artifact = ArtifactRecord(
        id=new_uuid(), run_id=run.id, tenant_id=tenant, path="/a", name="a", size_bytes=3, content_type="text/plain",
        status="available", sha256="0" * 64, persisted=1, storage_backend="local", persisted_at="2026-01-01T00:00:00Z",
        error=None, created_at="2026-01-01T00:00:00Z",
    )
    await db.transaction(lambda tx: store.insert_artifact(tx, artifact))
    assert await store.artifacts_of_run(db, run.id) == [artifact]
    assert await store.artifact(db, run.id, artifact.id) == artifact
    assert await store.artifact(db, runs[1].id, artifact.id) is None
    assert len(await store.running_ids(db)) == 1  # the other tenant's run; these ones are finished

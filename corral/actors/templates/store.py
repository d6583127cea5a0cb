"""The template tables: `sandbox_templates`, `sandbox_template_builds` and their log lines.

Every SQL statement about them is here, returning frozen records. Template rows are
written by the templates service (create, delete) and by a build's actor when its
build ends (status, size, current layer); build rows and log lines only by the build's
actor (`BuildActor`), except the creation of a build row, which is its actor's
`create_record`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.actors.record import RowStore
from corral.ids import is_uuid
from corral.storage import Database, Transaction

TERMINAL = ("ready", "failed", "cancelled")
ACTIVE = ("queued", "building")


@dataclass(frozen=True, slots=True)
class TemplateRecord:
    id: str
    tenant_id: str
    workspace_id: str
    name: str
    base: str
    packages: list[str] = field(hash=False)
    setup: list[str] = field(hash=False)
    env_keys: list[str] = field(hash=False)
    env_sealed: bytes | None
    default_preview_port: int | None
    status: str
    size_bytes: int | None
    layer_build_id: str | None
    """The build whose layer sandboxes start from (None until a build is ready)."""
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class BuildRecord:
    """One build; the instance-base columns make it a kind of instance actor."""

    id: str
    template_id: str
    tenant_id: str
    workspace_id: str
    project_id: str | None
    external_workspace_id: str | None
    external_user_id: str | None
    external_project_id: str | None
    owner_user_id: str | None
    base: str
    size: str
    slug: str
    status: str
    error: str | None
    size_bytes: int | None
    started_at: str | None
    finished_at: str | None
    last_activity_at: str | None
    created_at: str
    updated_at: str
    archive_sha256: str | None = None
    """The layer as one archive in the blob store, for other nodes (`copies.py`)."""
    node: str | None = None
    """The node that runs the build (`corral.actors.nodes`)."""


@dataclass(frozen=True, slots=True)
class LogLine:
    seq: int
    line: str
    ts: str


TEMPLATES = RowStore("sandbox_templates", TemplateRecord, json_columns=("packages", "setup", "env_keys"))
BUILDS = RowStore("sandbox_template_builds", BuildRecord)


def _template(row: dict[str, Any]) -> TemplateRecord:
    record = TEMPLATES.record(row)
    if record.env_sealed is not None and not isinstance(record.env_sealed, bytes):
        return TEMPLATES.replaced(record, {"env_sealed": bytes(record.env_sealed)})
    return record


# -- reads ------------------------------------------------------------------------------


async def find_template(db: Database, tenant_id: str, ref: str, workspace_id: str | None = None) -> TemplateRecord | None:
    """The tenant's template by id, else by name (the one in `workspace_id` first)."""
    if is_uuid(ref):
        row = await db.fetch_one("SELECT * FROM sandbox_templates WHERE tenant_id = ? AND id = ?", (tenant_id, ref.lower()))
        return None if row is None else _template(row)
    rows = await db.fetch_all(
        "SELECT * FROM sandbox_templates WHERE tenant_id = ? AND name = ? ORDER BY created_at, id", (tenant_id, ref)
    )
    records = [_template(row) for row in rows]
    preferred = [r for r in records if r.workspace_id == workspace_id]
    choices = preferred or records
    return choices[0] if choices else None


async def load_template(db: Database, template_id: str) -> TemplateRecord | None:
    row = await db.fetch_one("SELECT * FROM sandbox_templates WHERE id = ?", (template_id,))
    return None if row is None else _template(row)


async def list_templates(db: Database, tenant_id: str, workspace_id: str | None = None) -> list[TemplateRecord]:
    equal = [("tenant_id", tenant_id)] + ([("workspace_id", workspace_id)] if workspace_id else [])
    rows = await db.fetch_all(
        f"SELECT * FROM sandbox_templates WHERE {' AND '.join(f'{name} = ?' for name, _ in equal)} ORDER BY created_at, id",
        tuple(value for _, value in equal),
    )
    return [_template(row) for row in rows]


async def find_build(db: Database, tenant_id: str, build_id: str) -> BuildRecord | None:
    row = await db.fetch_one("SELECT * FROM sandbox_template_builds WHERE tenant_id = ? AND id = ?", (tenant_id, build_id))
    return None if row is None else BUILDS.record(row)


async def load_build(db: Database, build_id: str) -> BuildRecord | None:
    """Any tenant's build (for the node that runs it and for other nodes' copies)."""
    return await BUILDS.load(db, build_id)


async def latest_build(db: Database, template_id: str) -> BuildRecord | None:
    row = await db.fetch_one(
        "SELECT * FROM sandbox_template_builds WHERE template_id = ? ORDER BY created_at DESC, id DESC LIMIT 1", (template_id,)
    )
    return None if row is None else BUILDS.record(row)


async def unfinished_builds(db: Database, node: str) -> list[BuildRecord]:
    """This node's builds a control-plane stop cut off (another node's run there)."""
    rows = await db.fetch_all(
        "SELECT * FROM sandbox_template_builds WHERE status IN ('queued', 'building') AND (node = ? OR node IS NULL)", (node,)
    )
    return BUILDS.records(rows)


async def log_lines(db: Database, build_id: str, after: int = 0, limit: int = 10_000) -> list[LogLine]:
    rows = await db.fetch_all(
        "SELECT seq, line, ts FROM sandbox_template_build_logs WHERE build_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (build_id, after, limit),
    )
    return [LogLine(int(row["seq"]), str(row["line"]), str(row["ts"])) for row in rows]


async def sandboxes_using(db: Database, template_id: str) -> int:
    """Sandboxes not destroyed that were made from the template (their files need its layers)."""
    value = await db.fetch_value(
        "SELECT COUNT(*) FROM sandboxes WHERE template_id = ? AND status <> 'destroyed'", (template_id,)
    )
    return int(value or 0)


# -- writes -------------------------------------------------------------------------------


def name_taken(tx: Transaction, workspace_id: str, name: str) -> bool:
    return tx.fetch_one("SELECT 1 FROM sandbox_templates WHERE workspace_id = ? AND name = ?", (workspace_id, name)) is not None


def insert_template(tx: Transaction, record: TemplateRecord) -> None:
    TEMPLATES.insert(tx, record)


async def update_template(db: Database, template_id: str, values: dict[str, Any]) -> None:
    await TEMPLATES.update(db, template_id, values)


def delete_template(tx: Transaction, template_id: str) -> None:
    TEMPLATES.delete(tx, template_id)


async def has_builds(db: Database, template_id: str) -> bool:
    """Whether this store built the template (its builds outlive it): a template folder
    without builds here belongs to another node sharing the template directory."""
    return bool(await db.fetch_value("SELECT COUNT(*) FROM sandbox_template_builds WHERE template_id = ?", (template_id,)))


def insert_build(tx: Transaction, record: BuildRecord) -> None:
    BUILDS.insert(tx, record)


def active_builds_of_tenant(tx: Transaction, tenant_id: str) -> int:
    value = tx.fetch_value(
        "SELECT COUNT(*) FROM sandbox_template_builds WHERE tenant_id = ? AND status IN ('queued', 'building')", (tenant_id,)
    )
    return int(value or 0)


def build_active(tx: Transaction, template_id: str) -> bool:
    return tx.fetch_one(
        "SELECT 1 FROM sandbox_template_builds WHERE template_id = ? AND status IN ('queued', 'building')", (template_id,)
    ) is not None


async def append_log(db: Database, build_id: str, lines: list[tuple[str, str]]) -> None:
    """Append `(line, ts)` pairs after the build's last line."""

    def work(tx: Transaction) -> None:
        last = int(tx.fetch_value("SELECT COALESCE(MAX(seq), 0) FROM sandbox_template_build_logs WHERE build_id = ?", (build_id,)) or 0)
        for offset, (line, ts) in enumerate(lines, start=1):
            tx.insert("sandbox_template_build_logs", {"build_id": build_id, "seq": last + offset, "line": line, "ts": ts})

    await db.transaction(work)

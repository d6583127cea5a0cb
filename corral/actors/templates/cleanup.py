"""A deleted template's files go from every node once no sandbox uses them.

A tenant's template lives as a layer on each node that built or fetched it, and as its
builds' archives in the blob store, on two nodes or more (`copies`). Deleting the
template removes its row at once; its files go as soon as no sandbox made from it is
left, wherever they are:

- the node that deleted it removes its own layer and every node's copy of each build
  archive (`forget_archive`: an archive forgotten is struck from its build's row, so it
  is asked of the nodes once);
- the other nodes hear of the deletion (a notice, `TEMPLATE_DELETED`) and remove their
  layers at once;
- and every node looks over its layers every `SWEEP_SECONDS` (and at start), for a
  template deleted while sandboxes used it, or a notice it missed.

A layer this store never built (no build row names it) is another store's, in a
template directory they share, and is left alone.
"""

from __future__ import annotations

import functools
import logging

import trio

from corral.actors.nodes.archives import forget_archive
from corral.actors.periodic import run_periodically
from corral.ids import is_uuid

from . import store
from .services import TemplateServices

log = logging.getLogger("corral.templates")

TEMPLATE_DELETED = "template-deleted"
"""Notice topic: the subject names a template whose row is gone."""
SWEEP_SECONDS = 60.0


async def remove_files_if_unused(services: TemplateServices, template_id: str) -> bool:
    """Remove a deleted template's layer here and its archives everywhere once no
    sandbox made from it is left; True when a layer went from this node."""
    if await store.load_template(services.db, template_id) is not None:
        return False
    if await store.sandboxes_using(services.db, template_id):
        return False
    await _forget_archives(services, template_id)
    if not services.runtime.templates.is_layered(template_id):
        return False
    await (await services.runtime.driver()).remove_template(template_id)
    log.info("template %s: deleted, and no sandbox uses it: its files here are removed", template_id)
    return True


async def _forget_archives(services: TemplateServices, template_id: str) -> None:
    rows = await services.db.fetch_all(
        "SELECT id, archive_sha256 FROM sandbox_template_builds WHERE template_id = ? AND archive_sha256 IS NOT NULL",
        (template_id,),
    )
    for row in rows:
        await forget_archive(services.blobs, str(row["archive_sha256"]))
        await services.db.execute("UPDATE sandbox_template_builds SET archive_sha256 = NULL WHERE id = ?", (row["id"],))


async def sweep_unused_files(services: TemplateServices) -> int:
    """Remove the layers on this node of this store's deleted templates that no sandbox
    uses any more; returns how many went."""
    root = services.runtime.templates.root
    removed = 0
    names = [path.name for path in root.iterdir()] if root.is_dir() else []
    for name in names:
        if is_uuid(name) and await store.has_builds(services.db, name) and await remove_files_if_unused(services, name):
            removed += 1
    return removed


def hear_deletions(services: TemplateServices, nursery: trio.Nursery) -> None:
    """Remove a template's files here when another node says it deleted the template
    (after a missed notice, the next sweep does)."""

    def deleted(template_id: str | None) -> None:
        if template_id is not None and is_uuid(template_id):
            nursery.start_soon(_remove_quietly, services, template_id)

    services.notices.listen(TEMPLATE_DELETED, deleted)


async def _remove_quietly(services: TemplateServices, template_id: str) -> None:
    try:
        await remove_files_if_unused(services, template_id)
    except Exception:
        log.warning("template %s: its files here could not be removed; the next sweep tries again", template_id, exc_info=True)


async def sweep_forever(services: TemplateServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """`sweep_unused_files` every `SWEEP_SECONDS`."""
    await run_periodically(
        functools.partial(sweep_unused_files, services), lambda: SWEEP_SECONDS, "removing deleted templates' files",
        task_status=task_status,
    )

"""A tenant's template on every node (issue 30).

A build keeps its result as a layer on the node that ran it (`corral.vm.templates`).
On a store several nodes share, a sandbox of that template may be placed on any node,
so once the layer is kept its node also packs it into one archive in the blob store,
has one other live node hold a copy (`nodes.archives.keep_on_two_nodes`) before the
build reads `ready`, and writes the archive's digest on the build's row. A node that
makes a sandbox of a template whose current layer it lacks fetches the archive from a
node that holds it and unpacks it first (`here`), once; the layer then stays there as
the building node's does, until the template is deleted.

On one node (SQLite) nothing is packed.
"""

from __future__ import annotations

from pathlib import Path

from corral.actors.nodes.archives import keep_on_two_nodes
from corral.errors import ApiError
from corral.ids import is_uuid
from corral.storage import BlobStore, Database
from corral.vm import RuntimeDriver

from . import store


async def keep_elsewhere(blobs: BlobStore, driver: RuntimeDriver, data_dir: Path, template_id: str, build_id: str) -> str | None:
    """The build's layer (the template's current one) packed and held by another live
    node too; the archive's digest (None on a one-node store)."""
    return await keep_on_two_nodes(
        blobs, data_dir, f"template {template_id} (build {build_id})", lambda path: driver.export_template_layer(template_id, path)
    )


async def here(db: Database, blobs: BlobStore, driver: RuntimeDriver, template_id: str) -> None:
    """Make sure a tenant's template has its current layer on this node: fetched as its
    build's archive from a node that holds it when it does not. A built-in template (a
    recipe, built where it is used) and a template not built yet are left to the
    runtime. A layer no live node has is `503 SERVICE_UNAVAILABLE`, with why."""
    if not is_uuid(template_id):
        return
    template = await store.load_template(db, template_id)
    if template is None or template.layer_build_id is None or driver.has_template_layer(template_id, template.layer_build_id):
        return
    build = await store.load_build(db, template.layer_build_id)
    if build is None or not build.archive_sha256:
        if driver.template_built(template_id):
            return  # built here (its newest layer may have been kept a moment before the row says so)
        raise _unavailable(f"template {template.name} was built on another node before templates were kept for every node; rebuild it")
    try:
        archive = await blobs.verified_path(build.archive_sha256)
    except Exception as exc:
        raise _unavailable(f"the files of template {template.name} are on no live node now ({exc}); rebuild it") from exc
    await driver.import_template_layer(template_id, archive)


def _unavailable(message: str) -> ApiError:
    return ApiError(503, "SERVICE_UNAVAILABLE", message, headers={"Retry-After": "5"})

"""Publish: a running sandbox's files become a new immutable version (contract §12).

Synchronous: the request's own task does the long work (build command, packing,
upload, a service's boot and health check) and reports every step to the
deployment's actor, which alone writes the version rows and the active pointer.
Events `deployment.publish.*` go out on the bus as it goes.

- `static`: `build_command` (if any) runs in the sandbox in `/workspace` (600 s);
  the regular files under `output_path` (default `/workspace`) are packed from the
  host side of the sandbox's root in a worker thread (`artifacts.pack`) into a
  deterministic tar, stored in the blob store, and unpacked once for the router.
- `service`: the same artifact (of `/workspace` or `output_path`) becomes the
  `/workspace` of a new deployment service instance running `run_command`, which
  must answer `health_check_path` on `port` within 60 s.

A failed version answers the error with `details.version_id`; production keeps
serving what it served.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import trio

from corral.actors.nodes import placement
from corral.actors.nodes.blobs import ClusterBlobs
from corral.actors.nodes.placement import Demand
from corral.actors.runtime_errors import public_text
from corral.actors.sandboxes import Connect as SandboxConnect
from corral.actors.sandboxes import SandboxActor, SandboxRecord, agent_for
from corral.actors.sandboxes import store as sandbox_store
from corral.actors.sandboxes.env import resolved_env
from corral.errors import ApiError, not_found
from corral.ids import prefixed
from corral.models import Rule, model
from corral.storage import Event, utc_now_iso
from corral.vm import InstanceInfo

from . import artifacts, service_billing, service_store
from .actor import DeploymentActor
from .messages import (
    Get,
    NewVersion,
    VersionBuilding,
    VersionDone,
    VersionFailed,
)
from .service_boot import boot_where_placed
from .service_store import ServiceRecord
from .services import DeploymentServices
from .sites import public_url, version_url
from .store import DeploymentRecord, VersionRecord

log = logging.getLogger("corral.deployments.publish")

BUILD_TIMEOUT = 600
LOG_TAIL = 4000
SERVICE_SIZE = "small"


OUTPUT_PATH = r"(?![\s\S]*/\.\.(?:/|$))/[\s\S]*"
"""An absolute path without a `..` segment."""
HEALTH_CHECK_PATH = "/[^ ]*"


@model
class PublishRequest:
    """Publish a running sandbox into a new version (contract §12)."""

    source_sandbox_id: Annotated[str, Rule(format="uuid", max_length=64, message="must be a sandbox id")]
    kind: Literal["auto", "static", "service"] = "auto"
    environment: Annotated[str, Rule(max_length=63, message="must be a non-empty string of at most 63 characters")] = "production"
    output_path: Annotated[str | None, Rule(max_length=1024, pattern=OUTPUT_PATH, message="must be an absolute path without '..'")] = None
    build_command: Annotated[str | None, Rule(max_length=10_000, strip=False)] = None
    run_command: Annotated[str | None, Rule(max_length=10_000, strip=False)] = None
    port: Annotated[int | None, Rule(minimum=1, maximum=65535, message="must be an integer from 1 to 65535")] = None
    health_check_path: Annotated[str, Rule(max_length=1024, pattern=HEALTH_CHECK_PATH, message="must be a path starting with /, without spaces")] = "/"
    workspace_id: Annotated[str | None, Rule(max_length=255)] = None
    project_id: Annotated[str | None, Rule(max_length=255)] = None
    external_workspace_id: Annotated[str | None, Rule(max_length=255)] = None


@model
class SandboxPublishRequest(PublishRequest):
    """`POST /sandboxes/{id}/publish`: into `deployment_id`, or a new deployment `name`
    in the sandbox's project. `source_sandbox_id` is the path's."""

    source_sandbox_id: Annotated[str, Rule(max_length=64)] = ""
    deployment_id: Annotated[str | None, Rule(max_length=64)] = None
    name: Annotated[str | None, Rule(max_length=100, message="must be a non-empty string of at most 100 characters")] = None


@dataclass(frozen=True)
class Published:
    deployment: DeploymentRecord
    version: VersionRecord
    promoted: bool


def resolved_kind(request: PublishRequest) -> str:
    if request.kind != "auto":
        return request.kind
    return "service" if request.run_command else "static"


def _validate(request: PublishRequest, kind: str) -> None:
    if kind == "service":
        problems = {}
        if not request.run_command or not request.run_command.strip():
            problems["run_command"] = "is required for a service"
        if request.port is None:
            problems["port"] = "is required for a service"
        if problems:
            raise ApiError(422, "VALIDATION_ERROR", "validation failed", details=problems)


async def _running_sandbox(
    platform: DeploymentServices, deployment: DeploymentRecord, sandbox_id: str, key_workspace_id: str | None
) -> SandboxRecord:
    """The source: a sandbox of the tenant (in the key's workspace for a restricted key; 404 otherwise)."""
    sandbox = await sandbox_of(platform, deployment.tenant_id, sandbox_id, key_workspace_id=key_workspace_id)
    if sandbox.status != "running":
        raise ApiError(409, "SANDBOX_NOT_RUNNING", "sandbox is not running")
    return sandbox


async def _publish_event(platform: DeploymentServices, deployment: DeploymentRecord, what: str, data: dict[str, Any]) -> None:
    event = Event(f"deployment.publish.{what}", "deployment", deployment.id, data, tenant_id=deployment.tenant_id)
    await platform.bus.publish(event)


class _Failure(Exception):
    def __init__(self, code: str, message: str, log_tail: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.log_tail = log_tail


async def publish(
    platform: DeploymentServices, deployment: DeploymentRecord, request: PublishRequest, *, key_workspace_id: str | None = None
) -> Published:
    """Run one publish to its end; raises the version's error when it fails."""
    kind = resolved_kind(request)
    _validate(request, kind)
    sandbox = await _running_sandbox(platform, deployment, request.source_sandbox_id, key_workspace_id)
    ref = await platform.system.get(DeploymentActor, deployment.id)
    output = posixpath.normpath(request.output_path or "/workspace")
    values = {
        "kind": kind, "environment": request.environment, "source_sandbox_id": sandbox.id,
        "runtime_command": request.run_command if kind == "service" else None,
        "runtime_port": request.port if kind == "service" else None,
        "health_check_path": request.health_check_path if kind == "service" else None,
        "runtime_image": "default" if kind == "service" else None,
        **({"external_workspace_id": request.external_workspace_id} if request.external_workspace_id else {}),
    }
    version: VersionRecord = await ref.ask(NewVersion(values))
    try:
        await ref.ask(VersionBuilding(version.id))
        done = await _build_and_store(platform, deployment, version, sandbox, request, kind, output)
    except _Failure as failure:
        await ref.ask(VersionFailed(version.id, failure.code, failure.message))
        details: dict[str, Any] = {"version_id": version.id}
        if failure.log_tail is not None:
            details["log"] = failure.log_tail
        raise ApiError(_status(failure.code), failure.code, failure.message, details=details) from None
    except ApiError as exc:  # the sandbox stopped, its agent did not answer, ...
        with trio.CancelScope(shield=True):
            await ref.ask(VersionFailed(version.id, exc.code, exc.message))
        raise ApiError(exc.status, exc.code, exc.message, details={**(exc.details or {}), "version_id": version.id}) from exc
    except BaseException as exc:
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            public = public_text(exc, f"deployment {deployment.id} publish")
            await ref.ask(VersionFailed(version.id, "INTERNAL_ERROR", f"the publish stopped: {type(exc).__name__}: {public}"))
        raise
    promote = request.environment == "production"
    result: tuple[VersionRecord, bool] = await ref.ask(VersionDone(version.id, done, promote=promote))
    final, promoted = result
    record: DeploymentRecord = await ref.ask(Get())
    url = await (public_url(platform.db, platform.settings, record) if promoted else version_url(platform.db, platform.settings, record, final))
    await _publish_event(platform, record, "completed", {"version_id": final.id, "deployment_id": record.id, "url": url})
    return Published(record, final, promoted)


def _status(code: str) -> int:
    return {"SERVICE_UNAVAILABLE": 503, "RUNTIME_TARGET_UNAVAILABLE": 409, "SANDBOX_NOT_RUNNING": 409}.get(code, 422)


async def _build_and_store(
    platform: DeploymentServices, deployment: DeploymentRecord, version: VersionRecord, sandbox: SandboxRecord,
    request: PublishRequest, kind: str, output: str,
) -> dict[str, Any]:
    if request.build_command:
        await _publish_event(platform, deployment, "building", {"version_id": version.id, "stage": "build"})
        await _run_build(platform, sandbox, request.build_command)
    await _publish_event(platform, deployment, "building", {"version_id": version.id, "stage": "package"})
    # A static site's files are also copied out while they are packed: the router serves
    # that copy, so the first publish of new content does not unpack the tar again.
    staging = Path(platform.settings.data_dir) / "tmp" / f"site-{version.id}" if kind == "static" else None
    try:
        packed = await _pack(platform, sandbox, output, staging)
        try:
            await _publish_event(platform, deployment, "uploading", {"version_id": version.id, "size_bytes": packed.size_bytes})
            try:
                blob = await platform.blobs.put_file(packed.tar_path)
            except OSError as exc:  # the blob store's disk is full or gone
                raise _Failure("SERVICE_UNAVAILABLE", f"the artifact could not be stored: {public_text(exc)}") from exc
            await _keep_elsewhere(platform, blob.sha256)
        finally:
            packed.tar_path.unlink(missing_ok=True)
        if staging is not None:
            assert platform.deployment_sites is not None
            await platform.deployment_sites.adopt(blob.sha256, staging)
        else:
            await _publish_event(platform, deployment, "building", {"version_id": version.id, "stage": "service"})
            await _start_service(platform, deployment, version, request, blob.sha256)
    finally:
        if staging is not None:  # gone already once adopted
            await trio.to_thread.run_sync(functools.partial(shutil.rmtree, staging, ignore_errors=True))
    return {
        "artifact_uri": platform.blobs.uri(blob.sha256), "artifact_sha256": blob.sha256,
        "source_sha256": packed.source_sha256, "artifact_manifest": packed.manifest,
    }


async def _keep_elsewhere(platform: DeploymentServices, sha256: str) -> None:
    """The artifact outlives this node (issue 30): one other live node holds a copy before
    the version is ready, so routers serve it and its service boots again elsewhere when
    this node is lost. No other node (or none answering): logged, the publish goes on."""
    if not isinstance(platform.blobs, ClusterBlobs):
        return
    holder = await platform.blobs.copy_elsewhere(sha256)
    if holder is None:
        log.warning("artifact %s: no other node holds a copy yet", sha256)


async def _run_build(platform: DeploymentServices, sandbox: SandboxRecord, command: str) -> None:
    agent = await agent_for(platform, sandbox.id)
    env = await resolved_env(platform, sandbox)
    result = await agent.exec(command, timeout=BUILD_TIMEOUT, cwd="/workspace", env=env)
    if result.timed_out or result.exit_code != 0:
        what = f"timed out after {BUILD_TIMEOUT} s" if result.timed_out else f"exited with {result.exit_code}"
        tail = (result.output or result.stdout + result.stderr)[-LOG_TAIL:]
        raise _Failure("BUILD_FAILED", f"the build command {what}", tail)


async def _pack(platform: DeploymentServices, sandbox: SandboxRecord, output: str, copy_into: Path | None) -> artifacts.Packed:
    ref = await platform.system.get(SandboxActor, sandbox.id)
    try:
        info: InstanceInfo = await ref.ask(SandboxConnect())
    except ApiError as exc:
        raise _Failure("SANDBOX_NOT_RUNNING", exc.message) from exc
    driver = await platform.runtime.driver()
    root = driver.host_root(info)
    if root is None:
        raise _Failure("RUNTIME_TARGET_UNAVAILABLE", "the runtime cannot read this sandbox's files")
    work = Path(platform.settings.data_dir) / "tmp"
    try:
        packed = await trio.to_thread.run_sync(artifacts.pack, root, output, work, copy_into)
    except artifacts.OutputPathMissing:
        raise _Failure("EMPTY_ARTIFACT", f"output_path {output} is not a directory of the sandbox") from None
    except artifacts.ArtifactTooLarge as exc:
        raise _Failure("ARTIFACT_TOO_LARGE", f"the artifact is too large: {exc}") from None
    if packed is None:
        raise _Failure("EMPTY_ARTIFACT", f"no files under {output}")
    return packed


async def _start_service(
    platform: DeploymentServices, deployment: DeploymentRecord, version: VersionRecord, request: PublishRequest, sha256: str
) -> ServiceRecord:
    """The version's service, on a node with room (placed like a sandbox of its size on a
    store several nodes share; here on one node), booted and healthy, or HEALTH_CHECK_FAILED."""
    assert request.run_command is not None and request.port is not None
    shared = _shared(platform)
    await service_billing.allow_run(platform, deployment.tenant_id, SERVICE_SIZE, deployment.external_user_id, placed=shared)  # 402 / quota 409
    here = platform.settings.node_name
    placed = None
    if shared:  # beside the deployment's service when it has one: its services together
        live = await service_store.live_services_of_deployment(platform.db, deployment.id)
        near = max(live, key=lambda row: row.created_at).node if live else None
        placed = await placement.place(platform.db, here, Demand("deployment_services", SERVICE_SIZE, "default", near=near))
    now = utc_now_iso()
    service = ServiceRecord(
        id=prefixed("svc"), tenant_id=deployment.tenant_id, deployment_id=deployment.id, version_id=version.id,
        type="web_service", status="starting", slug=f"v{version.version_number}-{deployment.slug}", template_id="default",
        size=SERVICE_SIZE, run_command=request.run_command, port=request.port, health_check_path=request.health_check_path,
        artifact_sha256=sha256, process_id=None, restarts=0, owner_user_id=None,
        external_user_id=deployment.external_user_id, error=None, last_activity_at=now, created_at=now, updated_at=now,
        node=placed.node if placed is not None else here,
    )
    current = await boot_where_placed(platform, service, placed.claim_id if placed is not None else None)
    if current is None or current.status != "running":
        reason = (current.error if current is not None else None) or "the service did not start in time"
        raise _Failure("HEALTH_CHECK_FAILED", f"the service did not become healthy: {reason}")
    return current


def _shared(platform: DeploymentServices) -> bool:
    """Whether other nodes may share the store (PostgreSQL): then services are placed."""
    return platform.db.dialect == "postgresql"



async def sandbox_of(
    platform: DeploymentServices, tenant_id: str, sandbox_id: str, *, key_workspace_id: str | None = None
) -> SandboxRecord:
    """The tenant's sandbox (404 otherwise, and outside `key_workspace_id` when given),
    running or not: publish checks that later."""
    sandbox = await sandbox_store.find(platform.db, tenant_id, sandbox_id)
    if sandbox is None or (key_workspace_id is not None and sandbox.workspace_id != key_workspace_id):
        raise not_found("sandbox not found")
    return sandbox


def publish_request_for(body: SandboxPublishRequest, sandbox_id: str) -> PublishRequest:
    """The deployment publish body of a sandbox publish (the path names the source)."""
    values = {item.name: getattr(body, item.name) for item in dataclasses.fields(PublishRequest)}
    return PublishRequest(**{**values, "source_sandbox_id": sandbox_id})

"""`corral deployments`, `corral databases` and `corral agent-runs`, on the routes of
contract §12-§14 (called by path, so they work before and after those routes are in
the generated client)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
from typing import Any

from corral.client import EventStream, WaitTimeout, unwrap
from corral.progress import StageProgress

from .context import Context, key_values, leaf
from .output import StatusProgress
from .waiting import wait_with_logs

__all__ = ["register"]

API = "/api/v1"


def _call(ctx: Context, method: str, path: str, *, body: dict[str, Any] | None = None, query: dict[str, Any] | None = None, idempotent: bool = False) -> Any:
    return ctx.client.call(method, API + path, body=body, query=query, idempotent=idempotent, request_timeout=3700)


def _show(ctx: Context, body: Any, columns: tuple[str, ...] | None = None) -> int:
    data = unwrap(body)
    if columns is not None and isinstance(data, list):
        ctx.console.table(data, columns, raw=body)
    elif isinstance(data, dict):
        ctx.console.record(data, raw=body)
    else:
        ctx.console.json(body)
    return 0


# --- deployments -------------------------------------------------------------

DEPLOYMENT_COLUMNS = ("id", "name", "state", "public_url", "active_version_id", "created_at")
VERSION_COLUMNS = ("id", "version_number", "state", "kind", "url", "created_at")


def _publish_step(event_type: str, data: Any) -> str:
    """`building: package`, `uploading: 2048 bytes`, `completed: http://...`."""
    step = event_type.removeprefix("deployment.publish.")
    if not isinstance(data, dict):
        return step
    if data.get("stage"):
        return f"{step}: {data['stage']}"
    if data.get("size_bytes") is not None:
        return f"{step}: {data['size_bytes']} bytes"
    if data.get("url"):
        return f"{step}: {data['url']}"
    return step


PUBLISH_STAGES: tuple[tuple[str, str], ...] = (
    ("starting", "starting"),
    ("building: build", "running the build command"),
    ("building: package", "packing the artifact"),
    ("uploading", "storing the artifact"),
    ("building: service", "starting the service"),
    ("completed", "done"),
)
"""The steps of a publish (its `deployment.publish.*` events), for the progress bar."""


class _Quiet:
    """No progress display (--json)."""

    def __call__(self, line: str) -> None:
        return None

    def finish(self) -> None:
        return None


def _follow_publish(ctx: Context, deployment_id: str, progress: StageProgress | _Quiet) -> EventStream:
    """Show `deployment.publish.*` events while the publish request runs (in a thread);
    the stream is connected before the publish starts, so no step is missed."""
    stream = ctx.client.events(API + "/deployments/{id}/events", path={"id": deployment_id}).connect()

    def follow() -> None:
        try:
            for event in stream:
                if event.event.startswith("deployment.publish."):
                    progress(_publish_step(event.event, event.data))
        except Exception:
            return

    threading.Thread(target=follow, daemon=True).start()
    return stream


def publish(ctx: Context) -> int:
    """Publish a sandbox's files as a new version, showing the publish's steps live.

    With --name, a deployment of that name is created first in the sandbox's project
    (so its events can be followed from the start)."""
    args = ctx.args
    body: dict[str, Any] = {"source_sandbox_id": args.sandbox}
    for name in ("kind", "environment", "output_path", "build_command", "run_command", "port", "health_check_path"):
        value = getattr(args, name)
        if value is not None:
            body[name] = value
    deployment_id = args.deployment
    if deployment_id is None:
        sandbox = unwrap(ctx.client.get_sandbox(args.sandbox))
        created = unwrap(_call(ctx, "POST", f"/projects/{sandbox['project_id']}/deployments", body={"name": args.name}, idempotent=True))
        deployment_id = created["id"]
        ctx.console.note(f"deployment {deployment_id} ({args.name}) created")
    progress: StageProgress | _Quiet = _Quiet() if ctx.console.as_json else StageProgress(f"publish {deployment_id}", PUBLISH_STAGES, ctx.console.err)
    progress("starting")
    stream = _follow_publish(ctx, deployment_id, progress)
    try:
        result = _call(ctx, "POST", f"/deployments/{deployment_id}/publish", body=body, idempotent=True)
    finally:
        stream.close()
        progress.finish()
    data = unwrap(result)
    version = data.get("version") or {}
    ctx.console.note(f"version {version.get('id')}: {version.get('state', '?')}")
    if ctx.console.as_json:
        ctx.console.json(result)
    else:
        deployment = data.get("deployment") or {}
        ctx.console.record({
            "deployment": deployment.get("id"), "public_url": deployment.get("public_url"),
            "version": version.get("id"), "state": version.get("state"), "promoted": data.get("promoted"),
        })
    return 0


def deployments_list(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", "/deployments"), DEPLOYMENT_COLUMNS)


def deployments_get(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", f"/deployments/{ctx.args.id}"))


def deployments_create(ctx: Context) -> int:
    body = {"name": ctx.args.name}
    return _show(ctx, _call(ctx, "POST", f"/projects/{ctx.args.project}/deployments", body=body, idempotent=True))


def deployments_delete(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "DELETE", f"/deployments/{ctx.args.id}"))


def deployments_versions(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", f"/deployments/{ctx.args.id}/versions"), VERSION_COLUMNS)


def deployments_promote(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "POST", f"/deployments/{ctx.args.id}/versions/{ctx.args.version_id}/promote", body={}, idempotent=True))


def deployments_rollback(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "POST", f"/deployments/{ctx.args.id}/rollback", body={"version_id": ctx.args.version_id}, idempotent=True))


# --- databases ---------------------------------------------------------------

DATABASE_COLUMNS = ("id", "name", "status", "size", "engine_version", "role", "created_at")


def databases_create(ctx: Context) -> int:
    args = ctx.args
    body: dict[str, Any] = {"name": args.name, "engine": "postgresql", "size": args.size}
    database = unwrap(_call(ctx, "POST", "/databases", body=body, idempotent=True))
    if args.wait:
        database = wait_with_logs(ctx, "database", database["id"], "running", args.timeout, API + "/databases/{id}/logs/stream")
    ctx.console.record(database)
    return 0


def databases_list(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", "/databases"), DATABASE_COLUMNS)


def databases_get(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", f"/databases/{ctx.args.id}"))


def databases_delete(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "DELETE", f"/databases/{ctx.args.id}"))


def databases_action(action: str) -> Any:
    def run(ctx: Context) -> int:
        return _show(ctx, _call(ctx, "POST", f"/databases/{ctx.args.id}/{action}", idempotent=True))

    return run


def databases_backup(ctx: Context) -> int:
    """Take a backup; with --wait (the default) show its status until it completes."""
    database_id = ctx.args.id
    backup = unwrap(_call(ctx, "POST", f"/databases/{database_id}/backups", body={}, idempotent=True))
    if ctx.args.wait:
        progress = StatusProgress(ctx.console, f"backup {backup['id']}")
        deadline = time.monotonic() + ctx.args.timeout
        try:
            while backup.get("status") == "running":
                progress.update("running")
                if time.monotonic() > deadline:
                    raise WaitTimeout(f"backup {backup['id']} still running after {ctx.args.timeout:g} s")
                time.sleep(0.5)
                backup = unwrap(_call(ctx, "GET", f"/databases/{database_id}/backups/{backup['id']}"))
        finally:
            progress.finish(str(backup.get("status")))
    ctx.console.record(backup)
    return 0 if backup.get("status") != "failed" else 1


def databases_backups(ctx: Context) -> int:
    columns = ("id", "status", "method", "size_bytes", "started_at", "completed_at")
    return _show(ctx, _call(ctx, "GET", f"/databases/{ctx.args.id}/backups"), columns)


def databases_credentials(ctx: Context) -> int:
    """The connection contract; the password is shown only here, on request."""
    return _show(ctx, _call(ctx, "GET", f"/databases/{ctx.args.id}/credentials"))


def databases_psql(ctx: Context) -> int:
    """Hand the terminal to `psql` with the database's URL (the password through the
    environment, not the command line)."""
    credentials = unwrap(_call(ctx, "GET", f"/databases/{ctx.args.id}/credentials"))
    psql = shutil.which("psql") or next((p for p in ("/usr/lib/postgresql/15/bin/psql",) if os.path.exists(p)), None)
    if psql is None:
        raise ValueError("psql is not installed (Debian: apt-get install postgresql-client)")
    env = {**os.environ, "PGPASSWORD": str(credentials.get("password", "")), "PGSSLMODE": str(credentials.get("sslmode") or "prefer")}
    argv = [psql, "-h", str(credentials["host"]), "-p", str(credentials["port"]), "-U", str(credentials["user"]), "-d", str(credentials["database"]), *ctx.args.psql_args]
    ctx.close()
    os.execvpe(psql, argv, env)
    return 0  # not reached


# --- agent runs --------------------------------------------------------------

RUN_COLUMNS = ("id", "status", "provider", "target_id", "exit_code", "created_at")
TERMINAL_EVENTS = frozenset({"command_finished", "failed", "canceled"})


def _follow_run(ctx: Context, run_id: str) -> int:
    """Print the run's events as they happen, then its output; exit with its exit code
    (0 for a run that finished without one, 1 for a failed or canceled run)."""
    stream = ctx.client.follow_agent_run(run_id)
    kind: str | None = None
    payload: dict[str, Any] = {}
    with stream:
        for event in stream:
            data = event.data if isinstance(event.data, dict) else {"data": event.data}
            kind = str(data.get("type") or event.event)
            inner = data.get("data")
            payload = inner if isinstance(inner, dict) else {}
            if ctx.console.as_json:
                ctx.console.line(json.dumps(event.as_dict()))
            else:
                ctx.console.line(f"{kind}: {json.dumps(payload)}")
            if kind in TERMINAL_EVENTS:
                break
    run = unwrap(_call(ctx, "GET", f"/agent-runs/{run_id}"))
    if not ctx.console.as_json:
        if run.get("output"):
            ctx.console.out.write(str(run["output"]))
        if run.get("stderr"):
            ctx.console.err.write(str(run["stderr"]))
    code = payload.get("exit_code", run.get("exit_code"))
    if isinstance(code, int) and 0 <= code < 256:
        return code
    return 0 if kind == "command_finished" and run.get("status") in ("completed", "succeeded") else 1


def runs_create(ctx: Context) -> int:
    args = ctx.args
    body: dict[str, Any] = {"prompt": args.prompt, "target_id": args.target, "wait": False}
    for name in ("provider", "command", "model", "target_kind"):
        value = getattr(args, name)
        if value is not None:
            body[name] = value
    if args.env:
        body["env"] = key_values(args.env)
    run = unwrap(_call(ctx, "POST", "/agent-runs", body=body))
    if not args.follow:
        ctx.console.record(run)
        return 0
    ctx.console.note(f"agent run {run['id']} ({run.get('status')})")
    return _follow_run(ctx, run["id"])


def runs_list(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", "/agent-runs", query={"target_id": ctx.args.target, "status": ctx.args.status}), RUN_COLUMNS)


def runs_get(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", f"/agent-runs/{ctx.args.id}"))


def runs_cancel(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "POST", f"/agent-runs/{ctx.args.id}/cancel"))


def runs_events(ctx: Context) -> int:
    if ctx.args.follow:
        return _follow_run(ctx, ctx.args.id)
    return _show(ctx, _call(ctx, "GET", f"/agent-runs/{ctx.args.id}/events"), ("id", "type", "created_at"))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("deployments", help="deployments: publish a sandbox, versions, promote, rollback")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "publish", publish, "publish a sandbox's files as a new version (progress live)")
    parser.add_argument("sandbox", help="the source sandbox (running)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--deployment", help="publish to this deployment")
    target.add_argument("--name", help="create a deployment with this name in the sandbox's project")
    parser.add_argument("--kind", choices=["auto", "static", "service"])
    parser.add_argument("--environment")
    parser.add_argument("--output-path")
    parser.add_argument("--build-command")
    parser.add_argument("--run-command")
    parser.add_argument("--port", type=int)
    parser.add_argument("--health-check-path")
    leaf(actions, "list", deployments_list, "the tenant's deployments")
    parser = leaf(actions, "create", deployments_create, "create an empty deployment in a project")
    parser.add_argument("name")
    parser.add_argument("--project", required=True)
    for name, handler, text in (
        ("get", deployments_get, "one deployment"),
        ("delete", deployments_delete, "delete a deployment (its URLs answer 404)"),
        ("versions", deployments_versions, "a deployment's versions"),
    ):
        leaf(actions, name, handler, text).add_argument("id")
    for name, handler, text in (("promote", deployments_promote, "make a version the active one"), ("rollback", deployments_rollback, "go back to a version")):
        parser = leaf(actions, name, handler, text)
        parser.add_argument("id")
        parser.add_argument("version_id")

    group = sub.add_parser("databases", help="managed PostgreSQL databases: create, credentials, psql")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "create", databases_create, "create a database (waits until it runs)")
    parser.add_argument("name")
    parser.add_argument("--size", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timeout", type=float, default=300.0)
    leaf(actions, "list", databases_list, "the tenant's databases")
    for name, handler, text in (
        ("get", databases_get, "one database"),
        ("delete", databases_delete, "delete a database and its data"),
        ("credentials", databases_credentials, "host, port, user, password and URL"),
        ("start", databases_action("start"), "start a stopped database"),
        ("stop", databases_action("stop"), "stop a database"),
    ):
        leaf(actions, name, handler, text).add_argument("id")
    parser = leaf(actions, "backup", databases_backup, "take a backup (waits until it completes)")
    parser.add_argument("id")
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timeout", type=float, default=600.0)
    leaf(actions, "backups", databases_backups, "a database's backups").add_argument("id")
    parser = leaf(actions, "psql", databases_psql, "open psql on the database")
    parser.add_argument("id")
    parser.add_argument("psql_args", nargs=argparse.REMAINDER, help="passed to psql (after --)")

    group = sub.add_parser("agent-runs", help="agent runs: start one, follow its events, cancel")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "create", runs_create, "start an agent run in a sandbox or computer (--follow streams its events)")
    parser.add_argument("target", help="sandbox or computer id")
    parser.add_argument("prompt")
    parser.add_argument("--provider")
    parser.add_argument("--command")
    parser.add_argument("--model")
    parser.add_argument("--target-kind", choices=["sandbox", "computer"])
    parser.add_argument("--env", action="append", metavar="KEY=VALUE")
    parser.add_argument("--follow", "-f", action="store_true")
    parser = leaf(actions, "list", runs_list, "the tenant's agent runs")
    parser.add_argument("--target")
    parser.add_argument("--status")
    for name, handler, text in (("get", runs_get, "one run"), ("cancel", runs_cancel, "cancel a running run")):
        leaf(actions, name, handler, text).add_argument("id")
    parser = leaf(actions, "events", runs_events, "a run's events (--follow: live until it ends)")
    parser.add_argument("id")
    parser.add_argument("--follow", "-f", action="store_true")

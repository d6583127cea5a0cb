"""`corral sandbox-templates`: custom templates built on the server (contract §15), with
the build's log and status followed live. (`corral templates` builds the base
templates on this machine, for operators.)"""

from __future__ import annotations

import argparse
import json
from typing import Any

from corral.client import unwrap

from .context import Context, key_values, leaf
from .output import StatusProgress
from .platform import API, _call, _show

__all__ = ["follow_build", "register"]

TEMPLATE_COLUMNS = ("id", "name", "status", "builtin", "base", "size_bytes", "created_at")
TERMINAL_BUILD_STATES = frozenset({"ready", "failed", "cancelled"})


def follow_build(ctx: Context, build_id: str) -> int:
    """Print the build's log lines as they come, with its status; exit 0 when it is ready."""
    progress = StatusProgress(ctx.console, f"build {build_id}")
    status = None
    stream = ctx.client.events(API + "/sandbox-template-builds/{id}/logs/stream", path={"id": build_id})
    with stream:
        for event in stream:
            data = event.data if isinstance(event.data, dict) else {}
            if ctx.console.as_json:
                ctx.console.line(json.dumps(event.as_dict()))
            elif event.event == "log":
                ctx.console.err.write(f"  {data.get('line', '')}\n")
            if event.event == "status":
                status = str(data.get("status"))
                progress.update(status)
                if status in TERMINAL_BUILD_STATES:
                    break
    if status is None:  # the stream closed first: ask
        status = str(unwrap(_call(ctx, "GET", f"/sandbox-template-builds/{build_id}")).get("status"))
    progress.finish(status)
    return 0 if status == "ready" else 1


def create(ctx: Context) -> int:
    args = ctx.args
    body: dict[str, Any] = {"name": args.name, "base": args.base}
    if args.package:
        body["packages"] = args.package
    if args.setup:
        body["setup"] = args.setup
    if args.env:
        body["env"] = key_values(args.env)
    if args.preview_port is not None:
        body["default_preview_port"] = args.preview_port
    made = unwrap(_call(ctx, "POST", "/sandbox-templates", body=body))
    if not args.follow:
        ctx.console.record(made.get("template", made))
        return 0
    ctx.console.note(f"template {made['template']['id']}: building")
    return follow_build(ctx, made["build"]["id"])


def list_(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", "/sandbox-templates"), TEMPLATE_COLUMNS)


def get(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "GET", f"/sandbox-templates/{ctx.args.id}"))


def delete(ctx: Context) -> int:
    return _show(ctx, _call(ctx, "DELETE", f"/sandbox-templates/{ctx.args.id}"))


def rebuild(ctx: Context) -> int:
    build = unwrap(_call(ctx, "POST", f"/sandbox-templates/{ctx.args.id}/builds"))
    if not ctx.args.follow:
        ctx.console.record(build)
        return 0
    return follow_build(ctx, build["id"])


def build_logs(ctx: Context) -> int:
    if ctx.args.follow:
        return follow_build(ctx, ctx.args.build_id)
    body = _call(ctx, "GET", f"/sandbox-template-builds/{ctx.args.build_id}/logs")
    if ctx.console.as_json:
        ctx.console.json(body)
    else:
        for line in unwrap(body).get("lines", []):
            ctx.console.line(line.get("line", "") if isinstance(line, dict) else str(line))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("sandbox-templates", help="custom sandbox templates built on the server, with live build logs")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "create", create, "create a template and build it (--follow: the build's log live)")
    parser.add_argument("name")
    parser.add_argument("--base", default="default")
    parser.add_argument("--package", action="append", help="a Debian package (repeatable)")
    parser.add_argument("--setup", action="append", help="a shell command run as root (repeatable)")
    parser.add_argument("--env", action="append", metavar="KEY=VALUE")
    parser.add_argument("--preview-port", type=int, default=None)
    parser.add_argument("--follow", "-f", action=argparse.BooleanOptionalAction, default=True)
    leaf(actions, "list", list_, "templates, the built-in ones included")
    for name, handler, text in (("get", get, "one template (id or name)"), ("delete", delete, "delete a template")):
        leaf(actions, name, handler, text).add_argument("id")
    parser = leaf(actions, "rebuild", rebuild, "build a template again")
    parser.add_argument("id")
    parser.add_argument("--follow", "-f", action=argparse.BooleanOptionalAction, default=True)
    parser = leaf(actions, "logs", build_logs, "a build's log (--follow: live until it ends)")
    parser.add_argument("build_id")
    parser.add_argument("--follow", "-f", action="store_true")

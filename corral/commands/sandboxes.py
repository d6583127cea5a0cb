"""`corral sandboxes ...`, `corral exec`, `corral files`, `corral processes`, `corral logs`
and `corral previews`: the everyday work in a sandbox."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from corral.client import UNSET, OutputLine, unwrap

from .context import Context, key_values, leaf
from .output import StatusProgress

__all__ = ["register"]

COLUMNS = ("id", "name", "status", "template_id", "size", "created_at")
PROCESS_COLUMNS = ("pid", "name", "status", "exit_code", "cmd", "started_at")


def command_line(argv: list[str]) -> str:
    """One argument is a shell command line as typed; several are quoted for /bin/sh."""
    if not argv:
        raise ValueError("a command is required (after --)")
    return argv[0] if len(argv) == 1 else shlex.join(argv)


def _wait(ctx: Context, kind: str, id: str, status: str, timeout: float) -> dict[str, object]:
    progress = StatusProgress(ctx.console, f"{kind} {id}")
    try:
        record = ctx.client.wait_for(kind, id, status, timeout=timeout, on_change=progress)
    finally:
        progress.finish()
    return record


def create(ctx: Context) -> int:
    args = ctx.args
    body: dict[str, object] = {"template_id": args.template, "size": args.size}
    if args.name:
        body["name"] = args.name
    if args.env:
        body["env"] = key_values(args.env)
    if args.auto_stop is not None:
        body["auto_stop"] = args.auto_stop
    sandbox = unwrap(ctx.client.create_sandbox(**body))  # type: ignore[arg-type]
    if args.wait:
        sandbox = _wait(ctx, "sandbox", sandbox["id"], "running", args.timeout)
    ctx.console.record(sandbox)
    return 0


def list_(ctx: Context) -> int:
    body = ctx.client.list_sandboxes(status=ctx.args.status)
    ctx.console.table(unwrap(body), COLUMNS, raw=body)
    return 0


def get(ctx: Context) -> int:
    body = ctx.client.get_sandbox(ctx.args.id)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def delete(ctx: Context) -> int:
    body = ctx.client.delete_sandbox(ctx.args.id)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def start(ctx: Context) -> int:
    sandbox = unwrap(ctx.client.sandbox_start(ctx.args.id))
    if ctx.args.wait:
        sandbox = _wait(ctx, "sandbox", ctx.args.id, "running", ctx.args.timeout)
    ctx.console.record(sandbox)
    return 0


def stop(ctx: Context) -> int:
    sandbox = unwrap(ctx.client.sandbox_stop(ctx.args.id))
    if ctx.args.wait:
        sandbox = _wait(ctx, "sandbox", ctx.args.id, "stopped", ctx.args.timeout)
    ctx.console.record(sandbox)
    return 0


def exec_(ctx: Context) -> int:
    """Stream the command's output as it is written; exit with its exit code."""
    args = ctx.args
    command = command_line(args.argv)
    run = ctx.client.exec_stream(args.id, command, cwd=args.cwd, env=key_values(args.env) or None)
    collected: list[dict[str, str]] = []

    def show(line: OutputLine) -> None:
        if ctx.console.as_json:
            collected.append({"stream": line.stream, "line": line.line})
        else:
            target = ctx.console.err if line.stream == "stderr" else ctx.console.out
            target.write(line.line + "\n")
            target.flush()

    try:
        code = run.wait(show)
    except KeyboardInterrupt:
        ctx.client.delete_sandbox_process(args.id, run.pid)  # Ctrl-C stops the command, not only the display
        raise
    if ctx.console.as_json:
        ctx.console.json({"pid": run.pid, "exit_code": code, "status": run.status, "output": collected})
    return code if isinstance(code, int) and 0 <= code < 256 else 1


def _kind(args: argparse.Namespace) -> str:
    return "computer" if getattr(args, "computer", False) else "sandbox"


def upload(ctx: Context) -> int:
    args = ctx.args
    result = ctx.client.upload(args.id, Path(args.local), args.remote, kind=_kind(args))
    ctx.console.record(unwrap(result), raw=result)
    return 0


def download(ctx: Context) -> int:
    args = ctx.args
    target = Path(args.local) if args.local else Path(Path(args.remote).name or "download")
    if args.local == "-":
        data = ctx.client.download(args.id, args.remote, kind=_kind(args))
        assert isinstance(data, bytes)
        if ctx.console.out is sys.stdout:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            ctx.console.out.write(data.decode(errors="replace"))
        return 0
    ctx.client.download(args.id, args.remote, target, kind=_kind(args))
    size = target.stat().st_size
    ctx.console.note(f"{args.remote} -> {target} ({size} bytes)")
    if ctx.console.as_json:
        ctx.console.json({"path": str(target), "size_bytes": size})
    return 0


def ls(ctx: Context) -> int:
    args = ctx.args
    method = ctx.client.get_computer_files if _kind(args) == "computer" else ctx.client.get_sandbox_files
    body = method(args.id, path=args.path)
    entries = body.get("files", body.get("entries", unwrap(body))) if isinstance(body, dict) else body
    ctx.console.table(entries if isinstance(entries, list) else [], ("permissions", "size_bytes", "modified_at", "name"), raw=body)
    return 0


def process_start(ctx: Context) -> int:
    args = ctx.args
    result = ctx.client.create_sandbox_process(
        args.id, cmd=command_line(args.argv), name=args.name or UNSET, cwd=args.cwd or UNSET
    )
    ctx.console.record(unwrap(result), raw=result)
    return 0


def process_list(ctx: Context) -> int:
    body = ctx.client.list_sandbox_processes(ctx.args.id)
    ctx.console.table(unwrap(body), PROCESS_COLUMNS, raw=body)
    return 0


def process_get(ctx: Context) -> int:
    body = ctx.client.get_sandbox_process(ctx.args.id, ctx.args.pid)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def process_kill(ctx: Context) -> int:
    ctx.client.delete_sandbox_process(ctx.args.id, ctx.args.pid)
    ctx.console.note(f"killed {ctx.args.pid}")
    if ctx.console.as_json:
        ctx.console.json({"pid": ctx.args.pid, "killed": True})
    return 0


def process_logs(ctx: Context) -> int:
    """The last lines, or with --follow every line as it is written until the process exits."""
    args = ctx.args
    if not args.follow:
        body = ctx.client.get_sandbox_process_logs(args.id, args.pid, tail=args.tail)
        lines = unwrap(body).get("lines", [])
        if ctx.console.as_json:
            ctx.console.json(body)
        for line in [] if ctx.console.as_json else lines:
            ctx.console.line(line["line"] if isinstance(line, dict) else str(line))
        return 0
    with ctx.client.stream_sandbox_process(args.id, args.pid) as stream:
        for event in stream:
            if ctx.console.as_json:
                ctx.console.line(json.dumps(event.as_dict()))
            elif event.event == "log":
                ctx.console.line(str(event.data.get("line", "")))
            elif event.event == "exit":
                ctx.console.note(f"process exited: {event.data.get('status')} (exit code {event.data.get('exit_code')})")
    return 0


def logs(ctx: Context) -> int:
    """Every output line of the sandbox's execs and processes from now on, live (Ctrl-C stops).

    A note on stderr says when the stream is subscribed: every line written after it is shown."""
    with ctx.client.stream_sandbox_logs(ctx.args.id) as stream:  # returns once the server has subscribed it
        ctx.console.note(f"following the logs of sandbox {ctx.args.id} (Ctrl-C stops)")
        for event in stream:
            if ctx.console.as_json:
                ctx.console.line(json.dumps(event.as_dict()))
            elif isinstance(event.data, dict):
                ctx.console.line(str(event.data.get("line", event.data)))
    return 0


def expose(ctx: Context) -> int:
    body = ctx.client.sandbox_expose(ctx.args.id, port=ctx.args.port)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def preview_token(ctx: Context) -> int:
    body = ctx.client.sandbox_preview_token(ctx.args.id)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def share_create(ctx: Context) -> int:
    body = ctx.client.create_sandbox_share(ctx.args.id, expires_in=ctx.args.expires_in or UNSET)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def share_list(ctx: Context) -> int:
    body = ctx.client.list_sandbox_shares(ctx.args.id)
    ctx.console.table(unwrap(body), ("id", "url", "expires_at", "created_at"), raw=body)
    return 0


def share_delete(ctx: Context) -> int:
    body = ctx.client.delete_sandbox_share(ctx.args.id, ctx.args.share_id)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def _waiting(parser: argparse.ArgumentParser, default: bool) -> None:
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=default, help="wait for the new state with a progress display")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait (default 300)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("sandboxes", help="create, list, inspect, start, stop and delete sandboxes")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "create", create, "create a sandbox (waits until it runs)")
    parser.add_argument("--name")
    parser.add_argument("--template", default="default")
    parser.add_argument("--size", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--env", action="append", metavar="KEY=VALUE")
    parser.add_argument("--auto-stop", type=int, default=None, metavar="SECONDS")
    _waiting(parser, True)
    parser = leaf(actions, "list", list_, "the tenant's sandboxes")
    parser.add_argument("--status")
    for name, handler, text in (("get", get, "one sandbox"), ("delete", delete, "destroy a sandbox")):
        leaf(actions, name, handler, text).add_argument("id")
    for name, handler, text in (("start", start, "start a stopped sandbox"), ("stop", stop, "stop a running sandbox")):
        parser = leaf(actions, name, handler, text)
        parser.add_argument("id")
        _waiting(parser, False)

    parser = leaf(sub, "exec", exec_, "run a command in a sandbox, streaming its output; exits with its exit code")
    parser.add_argument("id")
    parser.add_argument("--cwd")
    parser.add_argument("--env", action="append", metavar="KEY=VALUE")
    parser.add_argument("argv", nargs="*", metavar="COMMAND", help="the command (after --)")

    files = sub.add_parser("files", help="upload, download and list files of a sandbox (or --computer)")
    actions = files.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "upload", upload, "upload a local file (10 MB at most)")
    parser.add_argument("id")
    parser.add_argument("local")
    parser.add_argument("remote", nargs="?", default=None, help="destination path, or a directory ending in /")
    parser.add_argument("--computer", action="store_true", help="ID is a computer")
    parser = leaf(actions, "download", download, "download a file (LOCAL '-' writes to stdout)")
    parser.add_argument("id")
    parser.add_argument("remote")
    parser.add_argument("local", nargs="?", default=None)
    parser.add_argument("--computer", action="store_true", help="ID is a computer")
    parser = leaf(actions, "ls", ls, "list a directory")
    parser.add_argument("id")
    parser.add_argument("path", nargs="?", default="/workspace")
    parser.add_argument("--computer", action="store_true", help="ID is a computer")

    processes = sub.add_parser("processes", help="background processes of a sandbox and their logs")
    actions = processes.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "start", process_start, "start a background process")
    parser.add_argument("id")
    parser.add_argument("--name")
    parser.add_argument("--cwd")
    parser.add_argument("argv", nargs="*", metavar="COMMAND")
    leaf(actions, "list", process_list, "the sandbox's processes").add_argument("id")
    for name, handler, text in (("get", process_get, "one process"), ("kill", process_kill, "kill a process")):
        parser = leaf(actions, name, handler, text)
        parser.add_argument("id")
        parser.add_argument("pid")
    parser = leaf(actions, "logs", process_logs, "a process's output (--follow: live until it exits)")
    parser.add_argument("id")
    parser.add_argument("pid")
    parser.add_argument("--follow", "-f", action="store_true")
    parser.add_argument("--tail", type=int, default=None)

    leaf(sub, "logs", logs, "follow every output line of a sandbox's execs and processes").add_argument("id")

    previews = sub.add_parser("previews", help="preview URLs, preview tokens and share links of a sandbox")
    actions = previews.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "expose", expose, "expose a port at the sandbox's preview URL")
    parser.add_argument("id")
    parser.add_argument("port", type=int, nargs="?", default=None)
    leaf(actions, "token", preview_token, "a preview token for the sandbox's private preview").add_argument("id")
    shares = actions.add_parser("shares", help="share links")
    share_actions = shares.add_subparsers(dest="share_action", required=True, metavar="ACTION")
    parser = leaf(share_actions, "create", share_create, "a share link anyone can open")
    parser.add_argument("id")
    parser.add_argument("--expires-in", type=int, default=None, metavar="SECONDS")
    leaf(share_actions, "list", share_list, "the sandbox's share links").add_argument("id")
    parser = leaf(share_actions, "delete", share_delete, "revoke a share link")
    parser.add_argument("id")
    parser.add_argument("share_id")

"""`corral computers ...`: desktop computers, their desktop URL and a shell."""

from __future__ import annotations

import argparse
import os
import select
import shutil
import sys
import termios
import time
import tty
import webbrowser

from corral.client import Terminal, unwrap

from .context import Context, leaf
from .sandboxes import command_line
from .waiting import wait_with_logs

__all__ = ["register"]

COLUMNS = ("id", "name", "status", "template_type", "size", "created_at")


def _wait(ctx: Context, id: str, status: str, timeout: float) -> dict[str, object]:
    """Wait with the computer's service log (X server, VNC, app installs) as the progress detail."""
    return wait_with_logs(ctx, "computer", id, status, timeout, "/api/v1/computers/{id}/logs/stream")


def create(ctx: Context) -> int:
    args = ctx.args
    extra: dict[str, object] = {"size": args.size}
    if args.resolution:
        extra["resolution"] = args.resolution
    computer = unwrap(ctx.client.create_computer(name=args.name, template_type=args.template, **extra))  # type: ignore[arg-type]
    if args.wait:
        computer = _wait(ctx, computer["id"], "running", args.timeout)
    ctx.console.record(computer)
    return 0


def list_(ctx: Context) -> int:
    body = ctx.client.list_computers()
    rows = body.get("computers", unwrap(body)) if isinstance(body, dict) else body
    ctx.console.table(rows if isinstance(rows, list) else [], COLUMNS, raw=body)
    return 0


def get(ctx: Context) -> int:
    body = ctx.client.get_computer(ctx.args.id)
    ctx.console.record(unwrap(body), raw=body)
    return 0


def delete(ctx: Context) -> int:
    body = ctx.client.delete_computer(ctx.args.id)
    ctx.console.record(unwrap(body) if isinstance(body, dict) else {"id": ctx.args.id}, raw=body)
    return 0


def lifecycle(action: str, settles: str) -> object:
    def run(ctx: Context) -> int:
        computer = unwrap(getattr(ctx.client, f"computer_{action}")(ctx.args.id))
        if ctx.args.wait:
            computer = _wait(ctx, ctx.args.id, settles, ctx.args.timeout)
        ctx.console.record(computer)
        return 0

    return run


def open_(ctx: Context) -> int:
    """The desktop page with a fresh stream token (10 minutes); --browser opens it."""
    credentials = ctx.client.get_computer_vnc_credentials(ctx.args.id)
    url = f"{credentials['desktop_url']}?auth={credentials['token']}"
    if ctx.console.as_json:
        ctx.console.json({**credentials, "open_url": url})
    else:
        ctx.console.line(url)
    if ctx.args.browser:
        webbrowser.open(url)
    return 0


def exec_(ctx: Context) -> int:
    result = ctx.client.computer_exec(ctx.args.id, command=command_line(ctx.args.argv), timeout=ctx.args.exec_timeout)
    if ctx.console.as_json:
        ctx.console.json(result)
    else:
        ctx.console.out.write(result.get("stdout") or result.get("output") or "")
        ctx.console.err.write(result.get("stderr") or "")
    code = result.get("exit_code")
    return code if isinstance(code, int) and 0 <= code < 256 else 1


def shell(ctx: Context) -> int:
    """An interactive shell in the computer: the local terminal in raw mode, bytes both
    ways, resized to the local window's size."""
    size = shutil.get_terminal_size()
    with ctx.client.terminal(ctx.args.id, cols=size.columns, rows=size.lines) as term:
        return _interact(term)


PROMPT_WAIT = 5.0
"""Seconds piped input waits for the shell's first output."""


def _interact(term: Terminal) -> int:
    stdin = sys.stdin.fileno()
    interactive = os.isatty(stdin)
    saved = None
    if interactive:
        saved = termios.tcgetattr(stdin)
        tty.setraw(stdin)
    # Piped input waits for the shell's first output (its prompt): typed-ahead bytes sent
    # before the shell set up its terminal could be flushed away. A shell that prints no
    # prompt gets the input anyway after PROMPT_WAIT seconds.
    sources = [stdin, term.fileno()] if interactive else [term.fileno()]
    stdin_done = False
    waiting_since = time.monotonic()
    try:
        while not term.closed:
            if term.buffered():  # received already (with the handshake): select would not say so
                ready = [term.fileno()]
            else:
                ready, _, _ = select.select(sources, [], [], 1.0)
            if stdin not in sources and not stdin_done and time.monotonic() - waiting_since > PROMPT_WAIT:
                sources.append(stdin)
            if term.fileno() in ready:
                try:
                    data = term.recv(timeout=0.5)
                except TimeoutError:
                    continue  # part of a frame so far
                if data is None:
                    break  # the shell exited
                os.write(sys.stdout.fileno(), data)
                if stdin not in sources and not stdin_done:
                    sources.append(stdin)
            if stdin in ready:
                chunk = os.read(stdin, 4096)
                if chunk:
                    term.send(chunk)
                else:
                    stdin_done = True
                    sources = [term.fileno()]  # end of input: keep showing output until the shell exits
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("computers", help="desktop computers: create, list, start, stop, open the desktop, shell")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "create", create, "create a computer (waits until it runs)")
    parser.add_argument("name")
    parser.add_argument("--template", default="svc-desktop")
    parser.add_argument("--size", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--resolution", default=None, metavar="WxH")
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timeout", type=float, default=300.0)
    leaf(actions, "list", list_, "the tenant's computers")
    for name, handler, text in (("get", get, "one computer"), ("delete", delete, "delete a computer")):
        leaf(actions, name, handler, text).add_argument("id")
    for action, settles in (("start", "running"), ("stop", "stopped"), ("restart", "running"), ("pause", "paused")):
        parser = leaf(actions, action, lifecycle(action, settles), f"{action} a computer")  # type: ignore[arg-type]
        parser.add_argument("id")
        parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=False)
        parser.add_argument("--timeout", type=float, default=300.0)
    parser = leaf(actions, "open", open_, "print the desktop URL with a fresh token (--browser opens it)")
    parser.add_argument("id")
    parser.add_argument("--browser", action="store_true")
    parser = leaf(actions, "exec", exec_, "run a command in a computer (its output when it ends)")
    parser.add_argument("id")
    parser.add_argument("--exec-timeout", type=int, default=None, metavar="SECONDS")
    parser.add_argument("argv", nargs="*", metavar="COMMAND")
    leaf(actions, "shell", shell, "an interactive shell on the computer's terminal").add_argument("id")

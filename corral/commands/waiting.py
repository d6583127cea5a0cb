"""Waiting for a resource with a progress display fed by what it is doing.

`wait_with_logs` polls the resource's status (`Client.wait_for`) and, meanwhile,
follows its log stream when it has one (a computer's desktop services and app
installs, a database server's log), so the display says what is happening, not
only that something is: the newest line on a terminal, every line otherwise."""

from __future__ import annotations

import threading
from typing import Any

from corral.client import EventStream

from .context import Context
from .output import StatusProgress

__all__ = ["wait_with_logs"]


def _follow(stream: EventStream, progress: StatusProgress) -> None:
    try:
        for event in stream:
            if event.event == "log" and isinstance(event.data, dict):
                source = event.data.get("source")
                line = str(event.data.get("line", "")).strip()
                progress.detail(f"{source}: {line}" if source else line)
    except Exception:
        return


def wait_with_logs(
    ctx: Context, kind: str, id: str, status: str, timeout: float, log_stream: str | None = None
) -> dict[str, Any]:
    """The record once its status is `status` (errors as `Client.wait_for`)."""
    progress = StatusProgress(ctx.console, f"{kind} {id}")
    stream = None
    if log_stream is not None and not ctx.console.as_json:
        try:
            stream = ctx.client.events(log_stream, path={"id": id}).connect()
        except Exception:
            stream = None
        if stream is not None:
            threading.Thread(target=_follow, args=(stream, progress), daemon=True).start()
    try:
        return ctx.client.wait_for(kind, id, status, timeout=timeout, on_change=progress)
    finally:
        if stream is not None:
            stream.close()
        progress.finish()

"""The zygote: a warm Python process that forks new instances.

Importing trio costs about 200 ms on these machines, more than the whole budget
for creating an instance. The zygote pays it once: it imports the agent and every
module the agent needs, freezes the garbage collector (so forked children share
its pages instead of copying them), and then forks a fresh instance per request.
Each instance runs the already-loaded agent without reading a single file from the
host after it pivots into its own root, and its memory stays mostly shared with
the zygote (low PSS per idle instance).

Protocol on stdin/stdout: one JSON object per line. Requests: `{"op": "launch",
...}` (see `launcher`) and `{"op": "ping"}`. The zygote exits at end of input, so
it dies with the control plane; instances do not (they are double-forked into
their own sessions).
"""

from __future__ import annotations

# Everything the agent uses, loaded before the first fork (the instance cannot
# import from the host's file system once it has pivoted into its own root).
import encodings.idna  # noqa: F401
import gc
import grp  # noqa: F401
import json
import os
import pwd  # noqa: F401
import select
import shutil  # noqa: F401
import subprocess  # noqa: F401
import sys
import time
import traceback  # noqa: F401
from typing import Any

import h11  # noqa: F401
import trio

from . import app, execution, files, httpserver, launcher, paths, processes  # noqa: F401

LAUNCH_TIMEOUT = 15.0


def _preload() -> None:
    """Touch lazily imported corners of trio and the stdlib once."""
    async def noop() -> None:
        await trio.sleep(0)
        await trio.to_thread.run_sync(lambda: None)

    # Running trio once in a throwaway child loads every lazy import of trio.run
    # without leaving threads or state in the zygote itself.
    pid = os.fork()
    if pid == 0:
        try:
            trio.run(noop)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _collect(read_fd: int, deadline: float) -> dict[str, Any]:
    result: dict[str, Any] = {}
    buffer = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        data = os.read(read_fd, 65536)
        if not data:
            break
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            result.update(message)
            if "error" in result or (result.get("ready") and result.get("init_pid")):
                return result
    result.setdefault("error", "instance did not report ready in time")
    return result


def launch(req: dict[str, Any]) -> dict[str, Any]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            os.setsid()
            if os.fork() == 0:
                launcher.launch(req, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    try:
        return _collect(read_fd, time.monotonic() + float(req.get("timeout", LAUNCH_TIMEOUT)))
    finally:
        os.close(read_fd)


def main() -> None:
    _preload()
    gc.collect()
    gc.freeze()
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            reply = launch(req) if req.get("op") == "launch" else {"ok": True, "pid": os.getpid()}
        except Exception as exc:  # a bad request must not kill the zygote
            reply = {"error": f"zygote: {exc!r}"}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()

"""The control plane's handle on the zygote process (see `agent/zygote.py`).

The zygote is started lazily with the control plane's own interpreter (which has
trio and h11), with a minimal environment so nothing of the host's environment
reaches an instance. Requests go over a `SOCK_SEQPACKET` socket, one message each,
and each carries a reply channel of its own (a socket pair made per request, one end
passed with `SCM_RIGHTS`): a reply can only ever be read by the request it answers,
whatever happened to earlier requests. A caller cancelled while it waits closes its
end, and the zygote's waiter for that launch stops.

Requests do not queue behind each other: the zygote hands each launch to a process
of its own at once. A zygote that died or whose socket broke is restarted, once per
request; a request that may have reached it is never sent twice (a launch could
then happen twice).

Given a `respawn_dir`, instances get a native PID 1 (`agent/reaper.c`, compiled here
once per source with the system's C compiler, static): it holds no Python, and asks
the zygote, through `respawn.sock` in that directory, for a new agent when its agent
dies. Without a C compiler, or without the directory, PID 1 stays in Python.
"""

from __future__ import annotations

import array
import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from itertools import count
from pathlib import Path
from typing import Any

import trio

from .errors import LaunchFailed

AGENT_DIR = Path(__file__).resolve().parent / "agent"
REAPER_SOURCE = AGENT_DIR / "reaper.c"

logger = logging.getLogger(__name__)


def build_reaper(directory: Path) -> Path | None:
    """The native reaper, compiled into `directory` once per source; None if it cannot be.

    Static (it runs in the instance's root, with none of the host's libraries) and
    mode 0711: executable by the instance's users, readable by none of them, so the
    exec into it leaves PID 1 not dumpable."""
    try:
        source = REAPER_SOURCE.read_bytes()
    except OSError as exc:  # an installation without the source
        logger.warning("no reaper source (%s): instances keep a Python PID 1", exc)
        return None
    target = directory / f"reaper-{hashlib.sha256(source).hexdigest()[:16]}"
    if target.exists():
        return target
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        logger.warning("no C compiler: instances keep a Python PID 1 (about 1.3 MB more each)")
        return None
    scratch = directory / f".{target.name}.{os.getpid()}"
    result = subprocess.run(
        [compiler, "-static", "-Os", "-s", "-o", str(scratch), str(REAPER_SOURCE)], capture_output=True, text=True
    )
    if result.returncode != 0:
        logger.warning("the native reaper did not build, instances keep a Python PID 1: %s", result.stderr[-2000:])
        with contextlib.suppress(OSError):
            scratch.unlink()
        return None
    os.chmod(scratch, 0o711)
    os.rename(scratch, target)
    return target


def prepare_respawns(directory: Path) -> Path | None:
    """The respawn directory (searchable by instances' PID 1, listable by nobody else)
    and the reaper built in it; None if there is no reaper."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o711)
        return build_reaper(directory)
    except OSError as exc:
        logger.warning("no respawn directory %s (%s): instances keep a Python PID 1", directory, exc)
        return None

BOOT = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location(
    "corral_agent", {init!r}, submodule_search_locations=[{pkg!r}])
module = importlib.util.module_from_spec(spec)
sys.modules["corral_agent"] = module
spec.loader.exec_module(module)
from corral_agent.zygote import main
main()
"""

ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
MAX_REPLY = 1 << 20
CONTROL_BUFFER = 2 << 20
"""Send buffer of the control socket: one message must fit (a launch carries the
instance's environment and the egress CA)."""
SO_SNDBUFFORCE = 32
"""Linux's `SO_SNDBUFFORCE`, which the socket module does not name: past `wmem_max`, as root."""


class Zygote:
    def __init__(self, python: str = sys.executable, respawn_dir: Path | None = None) -> None:
        self.python = python
        self.respawn_dir = respawn_dir
        self._reaper: Path | None = None
        self._process: trio.Process | None = None
        self._control: trio.socket.SocketType | None = None
        self._start_lock = trio.Lock()
        self._send_lock = trio.Lock()
        self._ids = count(1)

    @property
    def pid(self) -> int | None:
        """The running zygote's process id (None before the first request)."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    async def _ensure(self) -> trio.socket.SocketType:
        async with self._start_lock:
            if self._process is not None and self._process.returncode is None and self._control is not None:
                return self._control
            await self._kill()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with contextlib.suppress(OSError):  # not root: the default buffer (about 200 KB)
                ours.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, CONTROL_BUFFER)
            boot = BOOT.format(init=str(AGENT_DIR / "__init__.py"), pkg=str(AGENT_DIR))
            native: list[str] = []
            try:
                if self.respawn_dir is not None:
                    if self._reaper is None or not self._reaper.exists():
                        self._reaper = await trio.to_thread.run_sync(prepare_respawns, self.respawn_dir)
                    if self._reaper is not None:
                        native = [str(self.respawn_dir), str(self._reaper)]
                self._process = await trio.lowlevel.open_process(
                    [self.python, "-I", "-c", boot, str(theirs.fileno()), *native],
                    stdin=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(),),
                    env=ENV,
                    cwd="/",
                )
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            self._control = trio.socket.from_stdlib_socket(ours)
            return self._control

    async def request(
        self, request: dict[str, Any], handoff: Callable[[], Awaitable[int]] | None = None
    ) -> dict[str, Any]:
        """Send `request`, wait for its own reply. Raises `LaunchFailed` if the zygote
        cannot take it or died before answering.

        `handoff`, awaited once the request is on its way, gives a descriptor the launch
        waits for (the network namespace, made while the launch starts): it follows on
        the request's own channel. If it raises, the launch is abandoned."""
        request = {**request, "id": next(self._ids)}
        payload = json.dumps(request).encode()
        for attempt in (1, 2):
            control = await self._ensure()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            reply_channel = trio.socket.from_stdlib_socket(ours)
            try:
                try:
                    async with self._send_lock:
                        await control.sendmsg(
                            [payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))]
                        )
                except OSError as exc:
                    # Not sent (a message is whole or not at all): safe to try again.
                    await self._kill()
                    if attempt == 2 or exc.errno == errno.EMSGSIZE:
                        raise LaunchFailed(f"zygote failed: cannot send the request: {exc}") from exc
                    continue
                finally:
                    theirs.close()
                if handoff is not None:
                    fd = await handoff()
                    try:
                        await reply_channel.sendmsg(
                            [b"handoff"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
                        )
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the launch gave up before the handoff (its time ran out): its reply says why
                    finally:
                        os.close(fd)
                try:
                    data = await reply_channel.recv(MAX_REPLY)
                except ConnectionResetError:
                    # The waiter left with the handoff unread (its launch had given up
                    # first): the kernel reports that once, and the reply it sent
                    # before leaving is still queued behind it (or nothing: b"").
                    data = await reply_channel.recv(MAX_REPLY)
            finally:
                reply_channel.close()
            if not data:
                # Its waiter ended without a word (killed): the request may have been
                # carried out in part, so it is not sent again.
                if self._process is not None and self._process.returncode is not None:
                    await self._kill()
                raise LaunchFailed("zygote failed: the request ended without a reply")
            try:
                reply = dict(json.loads(data))
            except ValueError as exc:
                await self._kill()  # it cannot be trusted
                raise LaunchFailed(f"zygote failed: unreadable reply {data[:200]!r}") from exc
            if reply.get("id") not in (request["id"], None):
                await self._kill()
                raise LaunchFailed(f"zygote failed: reply {reply.get('id')} to request {request['id']}")
            return reply
        raise AssertionError("unreachable")

    async def warm(self) -> None:
        """Start the zygote ahead of the first launch."""
        await self.request({"op": "ping"})

    async def _kill(self) -> None:
        process, self._process = self._process, None
        control, self._control = self._control, None
        if control is not None:
            control.close()
        if process is None:
            return
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()

    async def aclose(self) -> None:
        process, self._process = self._process, None
        control, self._control = self._control, None
        if control is not None:
            control.close()  # the zygote exits when its end reads as closed
        if process is None:
            return
        with trio.move_on_after(2) as scope:
            scope.shield = True
            await process.wait()
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()

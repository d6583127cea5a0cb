"""The zygote: a warm Python process that forks new instances.

Importing trio costs about 200 ms on these machines, more than the whole budget
for creating an instance. The zygote pays it once: it imports the agent and every
module the agent needs, freezes the garbage collector (so forked children share
its pages instead of copying them), and then forks a fresh instance per request.
Each instance runs the already-loaded agent without reading a single file from the
host after it pivots into its own root, and its memory stays mostly shared with
the zygote (low PSS per idle instance).

Protocol: the control plane holds the other end of a `SOCK_SEQPACKET` socket (the
file descriptor named on the command line). Each request is one message, a JSON
object (`{"op": "launch", ...}`, see `launcher`, or `{"op": "ping"}`), carrying one
file descriptor: the request's own reply channel, another `SOCK_SEQPACKET` socket.
The reply is one message on that channel and nothing else ever is, so a reply can
only reach the request it answers: a launch whose caller gave up (its end closed)
cannot leave an answer behind for the next one. (A line protocol on one pipe did:
a cancelled launch's reply was read by the next launch, and every launch after it
read the one before's.)

A launch is handed to a waiter process at once, so one slow launch does not hold up
the others: the zygote forks the waiter, the waiter forks the launcher (see
`launcher`) and relays its progress. While the launcher joins its cgroups (which
waits on the kernel for milliseconds), the waiter makes its id-mapping namespace,
and the control plane its network namespace, which follows on the request's channel
(a request with no `netns`) and which the waiter passes on. The deadline is one of progress, not of the
whole launch: each stage (`namespaces` joined, `root` file system mounted and
entered, `init_pid` with its user namespace mapped, `ready`: the agent listens) has `timeout` seconds from
the one before, so an agent that hangs is caught while a launch slowed by a busy
disk is not failed for it. A waiter whose reply channel closes (its caller was
cancelled) stops waiting; the control plane removes what was started.

The zygote exits when the control plane's end closes, so it dies with the control
plane; instances do not (they are double-forked into their own sessions).

Respawns: given a respawn directory and the native reaper (see `launcher`), the
zygote listens on `respawn.sock` there and hands each connection to a child of its
own (`launcher.respawn`), which starts a new agent in the caller's instance if the
caller is an instance's reaper. The directory's path is stable, so a zygote started
by a new control plane serves the instances of the previous one too.
"""

from __future__ import annotations

# Everything the agent uses, loaded before the first fork (the instance cannot
# import from the host's file system once it has pivoted into its own root).
import array  # noqa: F401
import contextlib
import encodings.idna  # noqa: F401
import gc
import grp  # noqa: F401
import json
import os
import pwd  # noqa: F401
import select
import shutil  # noqa: F401
import socket
import subprocess  # noqa: F401
import sys
import time
import traceback  # noqa: F401
from typing import Any

import h11  # noqa: F401
import trio

from . import app, execution, files, httpserver, launcher, paths, processes  # noqa: F401

LAUNCH_TIMEOUT = 15.0
MAX_REQUEST = 2 << 20
STAGES = ("namespaces", "root", "init_pid", "ready")
RESPAWN_SOCKET = "respawn.sock"
WARM_UP_TOKEN = "zygote-warm-up"
WARM_UP_SECONDS = 5.0
WARM_UP_REQUEST = b"GET /health HTTP/1.1\r\nhost: zygote\r\nauthorization: Bearer " + WARM_UP_TOKEN.encode() + b"\r\n\r\n"


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


def _warm_up() -> None:
    """Run an agent once in the zygote itself, answering one request over loopback.

    What only a first run does (lazy imports, caches such as `re`'s compiled routes,
    the interpreter's specialisation of hot bytecode) then happens once here, in pages
    every instance shares, instead of being copied into each instance. No thread is
    started (trio resolves numeric addresses in place), so the zygote stays fit to fork.
    """

    async def once() -> None:
        listener = await app.open_listener("127.0.0.1", 0)
        port = listener.socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            agent = app.Agent(app.AgentConfig("127.0.0.1", port, WARM_UP_TOKEN), nursery)
            nursery.start_soon(httpserver.serve, [listener], agent.handle)
            with trio.move_on_after(WARM_UP_SECONDS):  # never the zygote's start held up by it
                for _ in range(2):
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    await stream.send_all(WARM_UP_REQUEST)
                    head = b""
                    while b"\r\n\r\n" not in head:
                        chunk = await stream.receive_some(65536)
                        if not chunk:  # closed before a whole head: warm enough
                            break
                        head += chunk
                    await stream.aclose()
            nursery.cancel_scope.cancel()

    with contextlib.suppress(Exception):  # a warm-up is worth having, never worth failing for
        trio.run(once)


_BALLAST: list[object] = []
"""Objects that fill the free blocks of the zygote's small-object pools (`_fill_holes`)."""


def _free_blocks() -> dict[int, int]:
    """Free blocks per size class of CPython's small-object allocator, read from
    `sys._debugmallocstats` (which writes to file descriptor 2)."""
    read_fd, write_fd = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(write_fd, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    blocks = {}
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) == 5 and all(field.isdigit() for field in fields):
            blocks[int(fields[1])] = int(fields[4])
    return blocks


def _fill_holes() -> None:
    """Fill the free blocks left in the zygote's pools, so that an instance allocates
    its new objects in pools of its own instead of writing into one free block of each
    of hundreds of shared pages (and copying every such page)."""
    for _ in range(3):
        for size, free in _free_blocks().items():
            if size == 32:
                _BALLAST.append([float(n) + 0.5 for n in range(free)])
            elif size >= 48:
                _BALLAST.append([bytes(size - 33) for _ in range(free)])  # a bytes object is 33 bytes + its length


def _send(reply_fd: int, message: dict[str, Any]) -> None:
    """One message on the request's own channel; a caller that left is no error."""
    with contextlib.suppress(OSError):
        os.write(reply_fd, json.dumps(message).encode())


def collect(read_fd: int, reply_fd: int, timeout: float) -> dict[str, Any] | None:
    """The launcher's reports merged, until ready or an error; None if the caller left.

    `timeout` bounds each stage, not the whole: the clock restarts with every report.
    """
    result: dict[str, Any] = {}
    stages: dict[str, float] = {}
    started = last = time.monotonic()
    buffer = b""
    while True:
        remaining = last + timeout - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([read_fd, reply_fd], [], [], remaining)
        if reply_fd in ready:
            if _dropped_late_handoff(reply_fd):
                continue
            return None  # the caller's end closed: nobody waits for this launch
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
            last = time.monotonic()
            for stage in STAGES:
                if stage in message and stage not in stages:
                    stages[stage] = round(last - started, 4)
            result["stages"] = stages
            if "error" in result or (result.get("ready") and result.get("init_pid")):
                return result
    waiting_for = next((stage for stage in STAGES if stage not in stages), "ready")
    result.setdefault(
        "error",
        f"instance did not report ready in time: no progress for {timeout:g} s waiting for {waiting_for!r}"
        f" (stages reached: {', '.join(f'{k} {v:.2f}s' for k, v in stages.items()) or 'none'})",
    )
    result["stages"] = stages
    return result


_NATIVE: dict[str, str] = {}
"""`reaper` and `respawn_dir`, when this zygote has them: added to each launch."""


def _wait_for_launch(req: dict[str, Any], reply_fd: int) -> None:
    """The waiter: runs the launcher in a child, relays its reply. Never returns."""
    try:
        os.setsid()
        req.update(_NATIVE)
        read_fd, write_fd = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if launcher.fork() == 0:
            os.close(read_fd)
            os.close(reply_fd)
            ours.close()
            launcher.launch(req, write_fd, theirs.detach())  # never returns
        os.close(write_fd)
        theirs.close()
        timeout = float(req.get("timeout", LAUNCH_TIMEOUT))
        if launcher.needs_idmap(req):  # made beside the launcher, not in its way
            launcher.send_idmap(req, ours.fileno())
        if not req.get("netns") and not _forward_handoff(reply_fd, ours, timeout):
            # The caller left, or its network namespace did not come in time: the
            # launcher finds its channel closed, and a caller still there learns why.
            _send(reply_fd, {"id": req.get("id"), "error": f"its network namespace did not come within {timeout:g} s"})
            return
        ours.close()
        reply = collect(read_fd, reply_fd, timeout)
        if reply is not None:
            reply["id"] = req.get("id")
            _send(reply_fd, reply)
    except BaseException as exc:
        _send(reply_fd, {"id": req.get("id"), "error": f"zygote waiter: {exc!r}"})
    finally:
        os._exit(0)


def _forward_handoff(reply_fd: int, launcher_channel: socket.socket, timeout: float) -> bool:
    """The network namespace the control plane sends on the request's channel once it
    has made it, passed on to the launcher; False if none came in time."""
    ready, _, _ = select.select([reply_fd], [], [], timeout)
    if not ready:
        return False
    with socket.socket(fileno=os.dup(reply_fd)) as channel:
        _message, fds, _, _ = socket.recv_fds(channel, 64, 1)
    if not fds:
        return False
    try:
        socket.send_fds(launcher_channel, [b"netns"], fds[:1])
    finally:
        for fd in fds:
            os.close(fd)
    return True


def _dropped_late_handoff(reply_fd: int) -> bool:
    """True if what made the caller's channel readable was a message (a handoff this
    launch does not wait for: it named its namespace), now dropped with its
    descriptors; False if the caller left."""
    with socket.socket(fileno=os.dup(reply_fd)) as channel:
        try:
            message, fds, _, _ = socket.recv_fds(channel, 64, 4, socket.MSG_DONTWAIT)
        except OSError:
            return False
    for fd in fds:
        os.close(fd)
    return bool(message)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _handle(control: socket.socket, message: bytes, reply_fd: int) -> None:
    try:
        req = json.loads(message)
        if req.get("op") != "launch":
            _send(reply_fd, {"id": req.get("id"), "ok": True, "pid": os.getpid()})
            return
        if launcher.fork() == 0:
            control.close()
            _wait_for_launch(req, reply_fd)
    except Exception as exc:  # a bad request must not kill the zygote
        _send(reply_fd, {"error": f"zygote: {exc!r}"})


def _respawn(control: socket.socket, listener: socket.socket) -> None:
    """A reaper rang: a child of ours answers it (see `launcher.respawn`)."""
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    with conn:
        if launcher.fork() == 0:
            control.close()
            listener.close()
            launcher.respawn(conn.detach())  # never returns


class RespawnListener:
    """`respawn.sock` in the respawn directory, which any instance's reaper may connect
    to (it reaches it through a descriptor of the directory; who it is is checked then).

    Bound again when the name no longer leads to it: a zygote of another control plane
    on the same data directory took it, and may since have gone with its control plane."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.inode = 0
        self._bind()

    def _bind(self) -> None:
        dir_fd = os.open(self.directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(RESPAWN_SOCKET, dir_fd=dir_fd)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            path = f"/proc/self/fd/{dir_fd}/{RESPAWN_SOCKET}"  # any length of directory path
            listener.bind(path)
            os.chmod(path, 0o666)
            listener.listen(64)
            self.inode = os.stat(path).st_ino
        finally:
            os.close(dir_fd)
        self.socket.close()
        self.socket = listener

    def keep(self) -> None:
        """Bind again if the name leads elsewhere (or nowhere)."""
        try:
            current = os.stat(os.path.join(self.directory, RESPAWN_SOCKET)).st_ino
        except OSError:
            current = 0
        if current != self.inode:
            with contextlib.suppress(OSError):
                self._bind()


def serve(control: socket.socket, respawns: RespawnListener | None = None) -> None:
    while True:
        watched = [control] if respawns is None else [control, respawns.socket]
        ready, _, _ = select.select(watched, [], [], 1.0)
        _reap()
        if respawns is not None:
            if respawns.socket in ready:
                _respawn(control, respawns.socket)
            elif not ready:
                respawns.keep()
        if control not in ready:
            continue
        message, fds, _flags, _address = socket.recv_fds(control, MAX_REQUEST, 1)
        if not message and not fds:
            return  # the control plane's end closed
        for fd in fds[1:]:
            os.close(fd)
        if not fds:
            continue  # nowhere to answer
        try:
            _handle(control, message, fds[0])
        finally:
            os.close(fds[0])


def main(control_fd: int | None = None) -> None:
    """`argv`: the control socket's descriptor, then optionally the respawn directory
    and the native reaper's path (both, or neither)."""
    respawns = None
    if control_fd is None:
        control_fd = int(sys.argv[1])
        if len(sys.argv) > 3 and sys.argv[2] and sys.argv[3]:
            try:
                respawns = RespawnListener(sys.argv[2])
            except OSError as exc:  # instances then keep a Python PID 1, which needs no zygote
                sys.stderr.write(f"corral zygote: no respawn socket in {sys.argv[2]}: {exc}\n")
            else:
                _NATIVE.update(respawn_dir=sys.argv[2], reaper=sys.argv[3])
    _preload()
    _warm_up()
    gc.collect()
    _fill_holes()
    gc.freeze()
    serve(socket.socket(fileno=control_fd), respawns)


if __name__ == "__main__":
    main()

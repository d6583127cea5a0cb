"""The control plane's handle on the zygote process (see `agent/zygote.py`).

The zygote is started lazily with the control plane's own interpreter (which has
trio and h11), with a minimal environment so nothing of the host's environment
reaches an instance. Requests are serialized: the zygote forks one instance at a
time, which takes a few milliseconds. If it has died, it is restarted once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from .errors import LaunchFailed

AGENT_DIR = Path(__file__).resolve().parent / "agent"

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


class Zygote:
    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self._process: trio.Process | None = None
        self._buffer = b""
        self._lock = trio.Lock()

    async def _start(self) -> trio.Process:
        boot = BOOT.format(init=str(AGENT_DIR / "__init__.py"), pkg=str(AGENT_DIR))
        process = await trio.lowlevel.open_process(
            [self.python, "-I", "-c", boot],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=ENV,
            cwd="/",
        )
        self._process = process
        self._buffer = b""
        return process

    async def _exchange(self, process: trio.Process, request: dict[str, Any]) -> dict[str, Any]:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send_all(json.dumps(request).encode() + b"\n")
        while b"\n" not in self._buffer:
            data = await process.stdout.receive_some(65536)
            if not data:
                raise trio.BrokenResourceError("zygote exited")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    async def request(self, request: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            for attempt in (1, 2):
                process = self._process
                if process is None or process.returncode is not None:
                    process = await self._start()
                try:
                    return await self._exchange(process, request)
                except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError) as exc:
                    await self._kill()
                    if attempt == 2:
                        raise LaunchFailed(f"zygote failed: {exc!r}") from exc
            raise AssertionError("unreachable")

    async def warm(self) -> None:
        """Start the zygote ahead of the first launch."""
        await self.request({"op": "ping"})

    async def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()

    async def aclose(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            await process.stdin.aclose()
        with trio.move_on_after(2) as scope:
            scope.shield = True
            await process.wait()
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()

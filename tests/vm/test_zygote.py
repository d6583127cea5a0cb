"""The zygote: every reply belongs to its request, a slow or cancelled launch holds up
no other, a hung launch is caught by its progress deadline.

A launch is made to hang, deterministically, by naming a FIFO as its network
namespace: the launcher blocks opening it until the test opens the other end.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from corral.vm import (
    AgentClient,
    InstanceInfo,
    LaunchFailed,
    Limits,
    NamespaceDriver,
    TemplateStore,
)

from .conftest import new_spec


class HangingLaunch:
    """A launch request whose launcher blocks opening a FIFO named as its network
    namespace, until `release` opens the other end (then it fails at `setns`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fifo = directory / "netns"
        os.mkfifo(self.fifo)
        self.released = False

    def request(self, timeout: float = 60.0) -> dict[str, Any]:
        return {
            "op": "launch",
            "timeout": timeout,
            "instance_id": "hanging",
            "log_path": str(self.directory / "console.log"),
            "cgroup_procs": [],
            "netns": str(self.fifo),
        }

    async def started(self) -> None:
        """The launcher runs: it opens its log first, then blocks on the FIFO."""
        while not (self.directory / "console.log").exists():
            await trio.sleep(0.01)

    async def release(self) -> None:
        if self.released:
            return
        while True:
            try:
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # its reader is not there yet
                    raise
            await trio.sleep(0.01)
        self.released = True


@pytest.fixture
async def hanging(tmp_path: Path) -> AsyncIterator[HangingLaunch]:
    launch = HangingLaunch(tmp_path)
    try:
        yield launch
    finally:
        if (tmp_path / "console.log").exists():
            with trio.fail_after(30):
                await launch.release()


async def assert_own_instance(info: InstanceInfo) -> None:
    """The reply was this launch's: its init is alive, and its agent answers with its hostname."""
    assert info.init_pid and Path(f"/proc/{info.init_pid}").exists()
    async with AgentClient.for_instance(info) as agent:
        result = await agent.exec("hostname")
    assert result.stdout.strip() == f"sbx-{info.id[:8]}"


async def test_a_cancelled_launch_leaves_no_reply_for_the_next(driver: NamespaceDriver, hanging: HangingLaunch) -> None:
    cancelled = False
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def launch() -> None:
            nonlocal cancelled
            with scope:
                await driver.zygote.request(hanging.request())
            cancelled = scope.cancelled_caught

        nursery.start_soon(launch)
        await hanging.started()
        scope.cancel()
    assert cancelled
    await hanging.release()  # the abandoned launcher now fails; its reply has no one to go to
    zygote_pid = driver.zygote.pid
    for _ in range(3):
        info = await driver.create(new_spec())
        await assert_own_instance(info)
    assert driver.zygote.pid == zygote_pid  # no restart was needed


async def test_a_slow_launch_holds_up_no_other(driver: NamespaceDriver, hanging: HangingLaunch) -> None:
    reply: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:

        async def slow() -> None:
            reply.update(await driver.zygote.request(hanging.request()))

        nursery.start_soon(slow)
        await hanging.started()
        info = await driver.create(new_spec())
        await assert_own_instance(info)
        assert not reply  # still waiting on its FIFO
        await hanging.release()
    # Released: the slow launch got its own answer, the failure of its own setns.
    assert "setns" in reply["error"] or "Errno" in reply["error"], reply
    assert "init_pid" not in reply


async def test_a_launch_without_progress_fails_naming_its_stage(driver: NamespaceDriver, hanging: HangingLaunch) -> None:
    reply = await driver.zygote.request(hanging.request(timeout=0.5))
    assert "did not report ready in time" in reply["error"]
    assert "'namespaces'" in reply["error"]
    assert reply["stages"] == {}
    info = await driver.create(new_spec())
    await assert_own_instance(info)


async def test_a_dead_zygote_is_restarted(driver: NamespaceDriver) -> None:
    await driver.zygote.warm()
    old = driver.zygote.pid
    assert old is not None
    os.kill(old, 9)
    with trio.fail_after(30):
        while Path(f"/proc/{old}").exists() and Path(f"/proc/{old}/status").read_text().find("State:\tZ") < 0:
            await trio.sleep(0.01)
    info = await driver.create(new_spec())
    await assert_own_instance(info)
    assert driver.zygote.pid not in (None, old)


async def test_a_request_too_large_is_refused_clearly(driver: NamespaceDriver) -> None:
    with pytest.raises(LaunchFailed, match="cannot send the request"):
        await driver.zygote.request({"op": "ping", "padding": "x" * (4 << 20)})
    await driver.zygote.warm()


async def test_a_desktop_starts_on_a_busy_node(driver: NamespaceDriver, template_store: TemplateStore, tmp_path: Path) -> None:
    """The first desktop from its (1.3 GB) template while the disk is flooded and both
    cores are busy, as during other instances' teardown: within the default limit."""
    await trio.to_thread.run_sync(lambda: template_store.ensure_sync("desktop", progress=lambda line: None))
    hogs = [
        subprocess.Popen(
            ["sh", "-c", f"while :; do dd if=/dev/zero of={tmp_path}/hog bs=1M count=500 conv=fsync status=none; rm -f {tmp_path}/hog; done"]
        ),
        *(subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)),
    ]
    try:
        for _ in range(2):
            info = await driver.create(new_spec(template="desktop", limits=Limits(2, 4096, 1024)))
            await assert_own_instance(info)
            await driver.destroy(info.id)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


async def test_a_launch_whose_time_ran_out_before_its_handoff_says_why(driver: NamespaceDriver, hanging: HangingLaunch) -> None:
    """The network namespace comes after the launch gave up (a node too busy to make
    it in time): the reply says the launch ran out of time, not that a pipe broke."""

    async def late_handoff() -> int:
        await trio.sleep(1.0)
        return os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)

    reply = await driver.zygote.request(hanging.request(timeout=0.2), late_handoff)
    assert "did not report ready in time" in reply["error"], reply
    info = await driver.create(new_spec())
    await assert_own_instance(info)


async def test_a_launch_whose_network_namespace_came_too_late_says_why(driver: NamespaceDriver, tmp_path: Path) -> None:
    """The launch waits for its network namespace on its channel, and the namespace
    is not there within the launch's time: the reply says so (before, the waiter left
    without a word, and the launch failed as "the request ended without a reply")."""

    async def late_handoff() -> int:
        await trio.sleep(1.0)
        return os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)

    request = {"op": "launch", "timeout": 0.2, "instance_id": "late", "log_path": str(tmp_path / "console.log"), "cgroup_procs": []}
    reply = await driver.zygote.request(request, late_handoff)
    assert reply["error"] == "its network namespace did not come within 0.2 s", reply
    info = await driver.create(new_spec())
    await assert_own_instance(info)


async def test_a_handoff_the_launch_does_not_wait_for_is_not_taken_for_a_caller_gone(
    driver: NamespaceDriver, hanging: HangingLaunch
) -> None:
    """The handoff arrives while the launch waits for progress, and the launch named its
    namespace itself: the message is dropped, the launch still runs out of time and says
    so (before, its waiter took the message for a caller that left, and ended without a
    reply, which the caller read as a reset connection on a busy machine)."""

    async def early_handoff() -> int:
        return os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)

    reply = await driver.zygote.request(hanging.request(timeout=1.0), early_handoff)
    assert "did not report ready in time" in reply["error"], reply

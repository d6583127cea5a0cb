"""Instance disks: a size-limited writable layer per instance (contract §18).

An instance's writable layer (the `upper/` and `work/` of its overlay) lives on a file
system of its own: an ext4 image file `<instance dir>/disk.img`, attached to a loop
device and mounted on `<instance dir>/disk/`. The kernel holds the size:

- writing past it is `ENOSPC` inside, and nothing else happens: the node's file
  system never holds more of an instance than its size (the image is sparse, and
  `discard` hands blocks the instance frees back to it);
- `df /` inside shows it: statfs on an overlay answers for its upper layer's file
  system, mounted with `minixdf` so that the size is the whole image (ext4's own
  metadata counts as used);
- the node's own files (its store, `state.json`, logs, snapshots) are on the node's
  file system, never on an instance's disk, so a full instance stops nothing else.

Why not project quotas on one file system: XFS and ext4 project quotas need quota
support this kernel is built without (`CONFIG_XFS_QUOTA`, `CONFIG_QFMT_V2`); an
image per instance needs only loop devices and ext4.

Speed: formatting an image (mke2fs, about 15 ms) and mounting it (1 to 10 ms) are
done ahead of time. The store keeps `SPARES` images formatted and mounted but not
attached anywhere (the new mount API: `fsmount` makes a mount with no place yet,
held by a file descriptor), of the sandboxes' size; a create takes one and
attaches it where the instance wants it (`move_mount`, microseconds). A spare dies
with the process that holds it (its descriptor closes, its loop device detaches):
nothing of a spare outlives a control plane but its image file, which the next
store removes.

Mounts of instances' disks stay while their instances exist, like the instances
themselves (a control plane restart adopts them; after a reboot `ensure` mounts the
image again). An image is only ever mounted through one loop device: before
attaching one, the store looks for a loop device already backed by that image (a
running instance keeps its disk's alive after the mount on the node is gone), and
mounts that device again (the same superblock).

A restore (or anything else that replaces the whole layer) builds the new layer on a
new disk (`disk.next.img` on `disk.next/`), so it needs no room on the old one, and
commits it by renaming the image over `disk.img`; `settle` finishes or undoes one a
dead control plane left half-done.

`<data dir>/disks/owner` names the node that made these disks (its cgroup parent),
so that test clean-ups (`release_mounts`) unmount only their own node's leftovers.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import secrets
import shutil
import struct
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import trio

from .errors import DiskReserveReached, InvalidInstanceState, LaunchFailed

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
IMAGE, MOUNT = "disk.img", "disk"
NEXT_IMAGE, NEXT_MOUNT = "disk.next.img", "disk.next"
SPARES = 2
"""Formatted, mounted, unattached disks kept ready (of the sandboxes' size)."""
MIN_MB = 16
"""The smallest disk (ext4 with a journal needs a few MiB of its own)."""
MOUNT_OPTIONS = ("discard", "minixdf", "noinit_itable")
"""`discard`: blocks freed inside go back to the node; `minixdf`: statfs counts the
whole image as the size; `noinit_itable`: no background zeroing of inode tables (the
sparse image reads as zeros already)."""

# Loop devices (linux/loop.h).
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_AUTOCLEAR = 4
LO_FLAGS_DIRECT_IO = 16
# The new mount API (the same numbers on every architecture).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 428, 429, 430, 431, 432
FSOPEN_CLOEXEC = FSMOUNT_CLOEXEC = 1
FSCONFIG_SET_FLAG, FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 0, 1, 6
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH = 4
AT_FDCWD = -100
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _fsmount(device: str) -> int:
    """A detached ext4 mount of `device` (a descriptor of its root)."""
    fs = _check(_libc.syscall(SYS_FSOPEN, b"ext4", FSOPEN_CLOEXEC), "fsopen")
    try:
        _check(_libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_SET_STRING, b"source", device.encode(), 0), "fsconfig source")
        for option in MOUNT_OPTIONS:
            _check(_libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_SET_FLAG, option.encode(), None, 0), f"fsconfig {option}")
        _check(_libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0), "fsconfig create")
        return _check(_libc.syscall(SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC, 0), "fsmount")
    finally:
        os.close(fs)


def _move_mount(mount_fd: int, target: Path) -> None:
    """Attach the detached mount `mount_fd` on `target`."""
    _check(
        _libc.syscall(SYS_MOVE_MOUNT, mount_fd, b"", AT_FDCWD, str(target).encode(), MOVE_MOUNT_F_EMPTY_PATH),
        "move_mount",
    )


def _clone_mount(source: Path) -> int:
    """A detached copy of the mount on `source` (attach it elsewhere with `_move_mount`)."""
    return _check(_libc.syscall(SYS_OPEN_TREE, AT_FDCWD, str(source).encode(), OPEN_TREE_CLONE | os.O_CLOEXEC), "open_tree")


def unmount(path: Path) -> None:
    """Detach whatever is mounted on `path` (lazily: the file system goes once unused);
    nothing mounted there is fine."""
    while _libc.umount2(str(path).encode(), MNT_DETACH) == 0:
        pass  # mounted twice over: every layer goes
    code = ctypes.get_errno()
    if code not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not (or no longer) a mount point
        raise OSError(code, f"umount: {os.strerror(code)}")


def _is_mount(path: Path) -> bool:
    return os.path.ismount(path)


def _loop_config(file_fd: int, flags: int) -> bytes:
    # struct loop_config { u32 fd; u32 block_size; struct loop_info64 info; u64 reserved[8]; }
    info = struct.pack("=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0, flags, b"", b"", b"", 0, 0)
    return struct.pack("=II", file_fd, 0) + info + bytes(64)


def _attach(image: Path) -> tuple[str, int]:
    """A new loop device over `image`: (its path, an open descriptor of it). The device
    detaches itself once nothing holds it (the descriptor closed, the file system unmounted)."""
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO
        for _ in range(32):
            number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            device = f"/dev/loop{number}"
            loop_fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            file_fd = os.open(image, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(loop_fd, LOOP_CONFIGURE, _loop_config(file_fd, flags))
                return device, loop_fd
            except OSError as exc:
                os.close(loop_fd)
                if exc.errno == errno.EBUSY:  # taken by someone else meanwhile
                    continue
                if exc.errno == errno.EINVAL and flags & LO_FLAGS_DIRECT_IO:  # no direct I/O on this file system
                    flags &= ~LO_FLAGS_DIRECT_IO
                    continue
                raise
            finally:
                os.close(file_fd)
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(control)


def _attached_loops() -> dict[str, tuple[str, int]]:
    """Backing file -> (device, device number) of every attached loop device."""
    found: dict[str, tuple[str, int]] = {}
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir("/sys/block"):
            if not entry.name.startswith("loop"):
                continue
            try:
                with open(f"/sys/block/{entry.name}/loop/backing_file") as f:
                    backing = f.read().strip()
                with open(f"/sys/block/{entry.name}/dev") as f:
                    major, minor = f.read().strip().split(":")
            except (OSError, ValueError):
                continue  # not attached, or detaching
            found[backing] = (f"/dev/{entry.name}", os.makedev(int(major), int(minor)))
    return found


DETACH_WAIT_SECONDS = 30.0
"""How long an offline resize waits for the stopped instance's loop device to detach.
It detaches only when the last user of the file system is gone: the instance's last
process exiting, and any mount namespace that copied the mount (an instance launched
at that moment, until it pivots into its own root). On a loaded machine that took
more than 5 s (CI, three test workers); the resize of a stopped instance can wait."""


def _loop_of(image: Path) -> tuple[str, int] | None:
    """(device, device number) of the loop device over `image`, if one is attached."""
    return _attached_loops().get(os.path.realpath(image))


def _tool(name: str) -> str:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), name)


def _run(argv: list[str], ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode not in ok:
        raise LaunchFailed(f"{os.path.basename(argv[0])} failed", detail=f"{argv}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def format_image(image: Path, size_mb: int) -> None:
    """A sparse `size_mb` MiB file at `image` holding an empty ext4 (about 4 MiB written)."""
    with open(os.open(image, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb") as f:
        f.truncate(size_mb * MIB)
    _run([
        _tool("mke2fs"), "-q", "-F", "-t", "ext4", "-m", "0",
        "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", str(image),
    ])  # fmt: skip


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding `path`."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


@dataclass
class Spare:
    """A formatted disk, mounted but attached nowhere: `mount_fd` is its root."""

    image: Path
    size_mb: int
    mount_fd: int

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.mount_fd)
        with contextlib.suppress(OSError):
            self.image.unlink()


class DiskStore:
    """The disks of one node's instances; spares live under `root` (`<data dir>/disks`)."""

    def __init__(
        self,
        root: Path,
        *,
        owner: str,
        size_mb: int | None = None,
        reserve_bytes: int = 0,
        spares: int = SPARES,
        layer_dirs: bool = True,
    ) -> None:
        self.root = Path(root)
        self.owner = owner
        self.layer_dirs = layer_dirs
        """Whether a new disk holds an overlay layer's empty `upper/` and `work/` (an
        instance's; a database server's holds its cluster instead)."""
        self.spare_mb = None if size_mb is None else max(MIN_MB, int(size_mb))
        """The size spares are made of (the sandboxes' default; None: the first one asked
        for). Disks of other sizes (computers') are formatted when asked for."""
        self.reserve_bytes = reserve_bytes
        """A new disk is refused while the node's file system has less than this free."""
        self.spares_wanted = spares
        self._spares: list[Spare] = []
        self._guard = threading.Lock()
        """Guards the spares, which a thread of the store's own makes."""
        self._refilling = False
        self._closed = False
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.root / "owner").write_text(owner + "\n")
        attached = _attached_loops()
        for leftover in self.root.glob("spare-*.img"):  # a dead store's (a live one's are attached)
            if os.path.realpath(leftover) not in attached:
                leftover.unlink(missing_ok=True)

    # -- where an instance's layer is ------------------------------------------------

    @staticmethod
    def has_disk(directory: Path) -> bool:
        return (directory / IMAGE).exists()

    def layer(self, directory: Path) -> Path:
        """The directory holding the instance's `upper/` and `work/`: its disk, or the
        instance's own directory for an instance made before disks (no limit)."""
        return directory / MOUNT if self.has_disk(directory) else directory

    # -- node-wide ------------------------------------------------------------------

    def check_reserve(self, need: int = 0) -> None:
        """DiskReserveReached unless the node's file system keeps its reserve free after
        `need` more bytes."""
        if self.reserve_bytes and free_bytes(self.root) - need < self.reserve_bytes:
            raise DiskReserveReached(
                "node disk reserve reached", detail=f"{self.root}: {need} bytes more would leave less than {self.reserve_bytes} free"
            )

    def used_bytes(self, directory: Path) -> int:
        """Bytes in use on the instance's disk (0 for an instance without one)."""
        if not self.has_disk(directory):
            return 0
        stat = os.statvfs(directory / MOUNT)
        return (stat.f_blocks - stat.f_bfree) * stat.f_frsize

    # -- one instance's disk --------------------------------------------------------

    async def create(self, directory: Path, size_mb: int) -> Path:
        """A new disk of `size_mb` MiB for the instance at `directory`, mounted on
        `directory/disk` and holding empty `upper/` and `work/` (owned by root); returns
        that (its layer directory)."""
        self.check_reserve()
        spare = await self._take(size_mb)
        self._place(spare, directory / IMAGE, directory / MOUNT)  # a rename and a move_mount: well under 1 ms
        return directory / MOUNT

    async def ensure(self, directory: Path, *, verify: bool = True) -> None:
        """The instance's disk mounted on `directory/disk` (after a reboot, or when the
        mount there is not its image's); unless `verify`, a mount there is trusted."""
        if not self.has_disk(directory):
            return
        if not verify and _is_mount(directory / MOUNT):
            return
        await trio.to_thread.run_sync(self._ensure_sync, directory)

    async def settle(self, directory: Path) -> None:
        """After a restart: a replacement cut short is finished or undone, and the disk is mounted."""
        await trio.to_thread.run_sync(self._settle_sync, directory)

    async def remove(self, directory: Path) -> None:
        """Unmount the instance's disks (their files go with the instance's directory)."""
        await trio.to_thread.run_sync(self._remove_sync, directory)

    async def resize(self, directory: Path, size_mb: int) -> None:
        """A stopped instance's disk to `size_mb` MiB: grown in place, or shrunk when its
        files fit (else InvalidInstanceState, and the disk stays as it was)."""
        if self.has_disk(directory):
            await trio.to_thread.run_sync(self._resize_sync, directory, size_mb)

    @contextlib.asynccontextmanager
    async def replacing(self, directory: Path, size_mb: int) -> AsyncIterator[Path]:
        """A new disk (empty `upper/` and `work/`) on `directory/disk.next` for the caller to fill; when the
        block ends without error it becomes the instance's disk (the old one goes), else
        it goes. The instance must be stopped."""
        self.check_reserve()
        await trio.to_thread.run_sync(self._discard_next, directory)
        spare = await self._take(size_mb)
        self._place(spare, directory / NEXT_IMAGE, directory / NEXT_MOUNT)
        try:
            yield directory / NEXT_MOUNT
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._discard_next, directory)
            raise
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._commit_next, directory)

    async def aclose(self) -> None:
        """Let the spares go (instances' disks stay mounted, like the instances)."""
        with self._guard:
            self._closed = True
            spares, self._spares = self._spares, []
        for spare in spares:
            spare.close()

    # -- spares ---------------------------------------------------------------------

    async def _take(self, size_mb: int) -> Spare:
        size_mb = max(MIN_MB, int(size_mb))
        with self._guard:
            if self.spare_mb is None:
                self.spare_mb = size_mb
            spare = self._spares.pop() if size_mb == self.spare_mb and self._spares else None
        self._refill_later()
        if spare is not None:
            return spare
        return await trio.to_thread.run_sync(self._make_spare, size_mb)

    def warm(self) -> None:
        """Make spares now, in the background (when a size is known)."""
        self._refill_later()

    def _refill_later(self) -> None:
        with self._guard:
            if self._refilling or self._closed or self.spare_mb is None or len(self._spares) >= self.spares_wanted:
                return
            self._refilling = True
        threading.Thread(target=self._refill, name="corral-spare-disks", daemon=True).start()

    def _refill(self) -> None:
        """In a thread of its own: spares up to `spares_wanted`."""
        try:
            while True:
                with self._guard:
                    if self._closed or self.spare_mb is None or len(self._spares) >= self.spares_wanted:
                        return
                    size_mb = self.spare_mb
                spare = self._make_spare(size_mb)
                with self._guard:
                    if not self._closed:
                        self._spares.append(spare)
                        continue
                spare.close()
        except Exception:  # a create formats its own disk then, and reports what fails
            logger.exception("could not make a spare instance disk")
        finally:
            with self._guard:
                self._refilling = False

    def _make_spare(self, size_mb: int) -> Spare:
        image = self.root / f"spare-{secrets.token_hex(8)}.img"
        try:
            format_image(image, size_mb)
            device, loop_fd = _attach(image)
            try:
                mount_fd = _fsmount(device)
            finally:
                os.close(loop_fd)
        except BaseException:
            image.unlink(missing_ok=True)
            raise
        try:  # the layer's directories, made here: the first writes to a new file system are slow
            for name in ("upper", "work") if self.layer_dirs else ():
                os.mkdir(name, 0o755, dir_fd=mount_fd)
            warm = os.open("warm", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=mount_fd)
            try:  # the first block written loads the allocator's bitmaps: here, not in a launch
                os.write(warm, bytes(4096))
                os.fsync(warm)
            finally:
                os.close(warm)
            os.unlink("warm", dir_fd=mount_fd)
        except BaseException:
            Spare(image, size_mb, mount_fd).close()
            raise
        return Spare(image, size_mb, mount_fd)

    def _place(self, spare: Spare, image: Path, mount: Path) -> None:
        """The spare's image at `image`, its file system mounted on `mount`."""
        try:
            mount.mkdir(exist_ok=True)
            os.rename(spare.image, image)
            _move_mount(spare.mount_fd, mount)
        except OSError as exc:
            raise LaunchFailed("the instance's disk could not be mounted", detail=f"{mount}: {exc}") from exc
        finally:
            with contextlib.suppress(OSError):
                os.close(spare.mount_fd)

    # -- synchronous parts (worker threads) ------------------------------------------

    def _mount_image(self, image: Path, mount: Path) -> None:
        """Mount `image` on `mount` through its loop device (the one already attached, if any)."""
        mount.mkdir(exist_ok=True)
        for _ in range(3):
            existing = _loop_of(image)
            try:
                if existing is not None:
                    mount_fd = _fsmount(existing[0])  # the same superblock as its other mounts
                else:
                    device, loop_fd = _attach(image)
                    try:
                        mount_fd = _fsmount(device)
                    finally:
                        os.close(loop_fd)
            except OSError as exc:
                if existing is not None and exc.errno in (errno.ENXIO, errno.ENODEV, errno.ENOENT, errno.EINVAL):
                    time.sleep(0.05)  # that loop device was detaching: try again
                    continue
                raise
            try:
                _move_mount(mount_fd, mount)
            finally:
                os.close(mount_fd)
            return
        raise OSError(errno.EBUSY, f"could not mount {image}")

    def _ensure_sync(self, directory: Path) -> None:
        image, mount = directory / IMAGE, directory / MOUNT
        loop = _loop_of(image)
        if _is_mount(mount):
            if loop is not None and os.stat(mount).st_dev == loop[1]:
                return
            unmount(mount)  # another file system (an old image's) is there
        self._mount_image(image, mount)

    def _settle_sync(self, directory: Path) -> None:
        self._discard_next(directory)
        if self.has_disk(directory):
            self._ensure_sync(directory)

    def _discard_next(self, directory: Path) -> None:
        """A replacement disk that was not committed goes."""
        unmount(directory / NEXT_MOUNT)
        (directory / NEXT_IMAGE).unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (directory / NEXT_MOUNT).rmdir()

    def _commit_next(self, directory: Path) -> None:
        """`disk.next` becomes the instance's disk: the rename of its image is the commit
        (`settle` mounts whatever `disk.img` is after a crash anywhere in here)."""
        mount, next_mount = directory / MOUNT, directory / NEXT_MOUNT
        unmount(mount)
        os.replace(directory / NEXT_IMAGE, directory / IMAGE)
        mount.mkdir(exist_ok=True)
        clone = _clone_mount(next_mount)
        try:
            _move_mount(clone, mount)
        finally:
            os.close(clone)
        unmount(next_mount)
        next_mount.rmdir()

    def _remove_sync(self, directory: Path) -> None:
        for name in (MOUNT, NEXT_MOUNT):
            unmount(directory / name)

    def _resize_sync(self, directory: Path, size_mb: int) -> None:
        """Offline (online growth needs CAP_SYS_RESOURCE, which a node in a container may
        lack, and the instance is stopped anyway): unmounted, checked, resized, mounted."""
        image, mount = directory / IMAGE, directory / MOUNT
        size = max(MIN_MB, int(size_mb)) * MIB
        current = image.stat().st_size
        if size == current:
            return
        unmount(mount)
        deadline = time.monotonic() + DETACH_WAIT_SECONDS
        while _loop_of(image) is not None:  # its loop device detaches once the file system is gone
            if time.monotonic() > deadline:
                self._mount_image(image, mount)
                raise InvalidInstanceState("the instance's disk is busy; try again")
            time.sleep(0.02)
        try:
            _run([_tool("e2fsck"), "-f", "-p", str(image)], ok=(0, 1))
            if size > current:
                with open(image, "r+b") as f:
                    f.truncate(size)
            resized = subprocess.run(
                [_tool("resize2fs"), str(image), f"{size // 1024}K"], capture_output=True, text=True, check=False
            )
            if resized.returncode != 0:
                if size > current:
                    with open(image, "r+b") as f:
                        f.truncate(current)
                    raise LaunchFailed("the instance's disk could not be grown", detail=resized.stderr.strip())
                raise InvalidInstanceState(
                    f"the instance's files do not fit in {size_mb / 1024:g} GB", detail=resized.stderr.strip()
                )
            if size < current:
                with open(image, "r+b") as f:
                    f.truncate(size)
        finally:
            self._mount_image(image, mount)


def release_mounts(owner: str) -> int:
    """Unmount every disk of the store named `owner` (its node's cgroup parent) still
    mounted on this machine: test clean-ups after a crash. Returns how many."""
    released = 0
    for point in mount_points():
        if point.name not in (MOUNT, NEXT_MOUNT):
            continue
        # <data dir>/instances/<id>/disk (instances), <root>/<id>/disk (database servers)
        owners = (point.parent.parent.parent / "disks" / "owner", point.parent.parent / "disks" / "owner")
        if not any(_read(path) == owner for path in owners):
            continue
        with contextlib.suppress(OSError):
            unmount(point)
            released += 1
    return released


def mount_points() -> list[Path]:
    """Where something is mounted on this machine (as this process sees it)."""
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    return [Path(line.split(" ")[4].encode().decode("unicode_escape")) for line in lines]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None

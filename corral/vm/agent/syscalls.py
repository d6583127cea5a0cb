"""The Linux system calls Python 3.11 does not wrap: unshare, setns, mount, pivot_root, prctl.

Called through libc with ctypes; every failure raises OSError with the errno.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_NO_NEW_PRIVS = 38
SYS_PIVOT_ROOT = 155  # x86_64

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _b(value: str | None) -> bytes | None:
    return value.encode() if value is not None else None


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(fd, nstype), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(_b(target), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    _check(_libc.syscall(SYS_PIVOT_ROOT, _b(new_root), _b(put_old)), "pivot_root")


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    _check(_libc.prctl(option, arg2, arg3, 0, 0), "prctl")


def set_process_title(title: str) -> None:
    """What `ps` shows for this process and its future children.

    The zygote's command line names host paths, which an instance should not see.
    PR_SET_MM would need CAP_SYS_RESOURCE (not granted everywhere), so the original
    argument area is overwritten in place instead, as setproctitle does.
    """
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])  # fields 48 and 49 of stat(5)
    data = title.encode()[: max(0, arg_end - arg_start - 1)]
    ctypes.memset(arg_start, 0, arg_end - arg_start)
    ctypes.memmove(arg_start, data, len(data))
    set_comm(title)


def set_comm(name: str) -> None:
    """The short process name (`comm`, 15 bytes); needs no privilege."""
    buffer = ctypes.create_string_buffer(name.encode()[:15])
    _check(_libc.prctl(PR_SET_NAME, ctypes.addressof(buffer), 0, 0, 0), "prctl")


PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def limit_capabilities(keep: set[int]) -> None:
    """Only `keep`, for this process and everything it will execute: the rest leave the
    bounding set (which bounds what an executed program gets, root or not), and the
    effective, permitted and inheritable sets become `keep`; no ambient ones."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if cap not in keep:
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    mask = sum(1 << cap for cap in keep)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for index in (0, 1):
        word = (mask >> (32 * index)) & 0xFFFFFFFF
        data[index] = _CapData(word, word, word)
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def install_seccomp(program: bytes) -> None:
    """Load a seccomp filter (BPF instructions, 8 bytes each) for this process and
    every descendant; needs `no_new_privs`."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp")


SYS_OPEN_TREE = 428  # x86_64
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = 0o2000000
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 0x00000004
MOUNT_ATTR_IDMAP = 0x00100000


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _syscall(number: int, *args: object, what: str) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def idmapped_bind(source: str, target: str, userns_fd: int) -> None:
    """Bind `source` on `target` with the ids of its files mapped through the user
    namespace `userns_fd` (an idmapped mount: a file owned on disk by an id `k` that the
    namespace maps to `k'` outside appears owned by `k'`, and is written back as `k`)."""
    tree = _syscall(SYS_OPEN_TREE, AT_FDCWD, _b(source), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC, what=f"open_tree {source}")
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
        _syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr), what="mount_setattr")
        _syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, _b(target), MOVE_MOUNT_F_EMPTY_PATH, what=f"move_mount {target}")
    finally:
        os.close(tree)

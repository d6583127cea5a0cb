"""File operations of the files API, each one behind the path rules of `paths`.

Every function takes the caller's path strings, resolves them with `paths.resolve`
(which raises FORBIDDEN_PATH, INVALID_PATH or MISSING_PATH) and answers plain
JSON-ready dictionaries; failures are `AgentError`s carrying the API's codes.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import shutil
import stat
import time
from typing import Any

from . import paths
from .errors import AgentError, file_not_found, forbidden_path


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def kind(mode: int) -> str:
    return "directory" if stat.S_ISDIR(mode) else "file"


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise file_not_found(path) from None
    except NotADirectoryError:
        raise file_not_found(path) from None


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _birth_time(path: str, st: os.stat_result) -> float:
    """Creation time where the file system records it (statx), else the change time."""
    birth = getattr(st, "st_birthtime", None)
    return float(birth) if birth else st.st_ctime


def entry(name: str, st: os.stat_result) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind(st.st_mode),
        "size_bytes": st.st_size,
        "permissions": stat.filemode(st.st_mode),
        "modified_at": iso(st.st_mtime),
    }


def stat_path(path: str | None) -> dict[str, Any]:
    resolved = paths.resolve(path)
    st = _stat(resolved)
    return {
        "path": resolved,
        "type": kind(st.st_mode),
        "size_bytes": st.st_size,
        "permissions": stat.filemode(st.st_mode),
        "owner": _user(st.st_uid),
        "group": _group(st.st_gid),
        "modified_at": iso(st.st_mtime),
        "created_at": iso(_birth_time(resolved, st)),
    }


def list_directory(path: str | None) -> dict[str, Any]:
    resolved = paths.resolve(path or "/workspace")
    st = _stat(resolved)
    if not stat.S_ISDIR(st.st_mode):
        raise AgentError(400, "INVALID_PATH", f"not a directory: {resolved}")
    files = []
    with os.scandir(resolved) as it:
        for item in it:
            try:
                item_stat = item.stat(follow_symlinks=True)
            except OSError:
                item_stat = item.stat(follow_symlinks=False)
            files.append(entry(item.name, item_stat))
    files.sort(key=lambda f: (f["type"] != "directory", f["name"]))
    return {"path": resolved, "files": files}


def not_a_regular_file(path: str) -> AgentError:
    return AgentError(400, "INVALID_PATH", f"not a regular file: {path}")


def open_regular(resolved: str, flags: int, mode: int = 0o644) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file `resolved`, and its status.

    Opened non-blocking: a FIFO the tenant planted, with nobody at its other end,
    would otherwise hold the agent up for good. What is not a regular file (a FIFO, a
    socket, a directory) is refused by what the descriptor is, not by a check before
    the open that a swap could beat."""
    try:
        fd = os.open(resolved, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO nobody reads
            raise not_a_regular_file(resolved) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise not_a_regular_file(resolved)
    return fd, st


def open_for_read(path: str | None) -> tuple[str, int, os.stat_result]:
    """An open descriptor of a regular file; anything else is INVALID_PATH."""
    resolved = paths.resolve(path)
    try:
        fd, st = open_regular(resolved, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        raise file_not_found(resolved) from None
    except OSError as exc:
        raise AgentError(400, "INVALID_PATH", f"cannot open {resolved}: {exc.strerror}") from exc
    return resolved, fd, st


def write_file(path: str | None, data: bytes, make_parents: bool = True) -> dict[str, Any]:
    resolved = paths.resolve(path)
    if paths.is_prefix_root(resolved):
        raise AgentError(400, "INVALID_PATH", f"is a directory: {resolved}")
    parent = os.path.dirname(resolved)
    if make_parents:
        try:
            os.makedirs(parent, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise AgentError(400, "INVALID_PATH", f"parent is not a directory: {parent}") from None
    try:
        fd, _ = open_regular(resolved, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    except FileNotFoundError:
        raise file_not_found(parent) from None
    except IsADirectoryError:
        raise AgentError(400, "INVALID_PATH", f"is a directory: {resolved}") from None
    except OSError as exc:
        raise AgentError(400, "INVALID_PATH", f"cannot write {resolved}: {exc.strerror}") from exc
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)
    return {"path": resolved, "size_bytes": len(data)}


def make_directory(path: str | None, recursive: bool = False) -> dict[str, Any]:
    resolved = paths.resolve(path)
    try:
        if recursive:
            os.makedirs(resolved, exist_ok=True)
        else:
            os.mkdir(resolved)
    except FileExistsError:
        raise AgentError(409, "DESTINATION_EXISTS", f"already exists: {resolved}") from None
    except FileNotFoundError:
        raise file_not_found(os.path.dirname(resolved)) from None
    except NotADirectoryError:
        raise AgentError(400, "INVALID_PATH", f"a parent is not a directory: {resolved}") from None
    if not os.path.isdir(resolved):
        raise AgentError(409, "DESTINATION_EXISTS", f"exists and is not a directory: {resolved}")
    return {"path": resolved}


def _existing_pair(source: str | None, destination: str | None) -> tuple[str, str]:
    src = paths.resolve(source)
    dst = paths.resolve(destination)
    if paths.is_prefix_root(src):
        raise forbidden_path(src)
    if not os.path.lexists(src):
        raise file_not_found(src)
    if os.path.lexists(dst):
        raise AgentError(409, "DESTINATION_EXISTS", f"destination exists: {dst}")
    if not os.path.isdir(os.path.dirname(dst)):
        raise file_not_found(os.path.dirname(dst))
    return src, dst


def rename(source: str | None, destination: str | None) -> dict[str, Any]:
    src, dst = _existing_pair(source, destination)
    try:
        os.rename(src, dst)
    except OSError as exc:
        raise AgentError(400, "INVALID_PATH", f"cannot rename: {exc.strerror}") from exc
    return {"source": src, "destination": dst}


def copy(source: str | None, destination: str | None) -> dict[str, Any]:
    """One regular file to a new name, with its mode and times (as `cp -p` would).
    The destination is created exclusively, and removed again if the copy fails."""
    src, dst = _existing_pair(source, destination)
    if os.path.isdir(src):
        raise AgentError(400, "INVALID_PATH", "only single files can be copied, not directories")
    try:
        source_fd, st = open_regular(src, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        raise file_not_found(src) from None
    try:
        try:
            target_fd, _ = open_regular(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(st.st_mode))
        except FileExistsError:
            raise AgentError(409, "DESTINATION_EXISTS", f"destination exists: {dst}") from None
        try:
            while os.sendfile(target_fd, source_fd, None, 1 << 30):
                pass
            os.fchmod(target_fd, stat.S_IMODE(st.st_mode))
            os.utime(target_fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.unlink(dst)
            raise
        finally:
            os.close(target_fd)
    finally:
        os.close(source_fd)
    return {"source": src, "destination": dst}


def parse_mode(mode: object) -> int:
    if mode is None or mode == "":
        raise AgentError(400, "MISSING_MODE", "mode is required")
    text = str(mode).strip().lower()
    if text.startswith("0o"):
        text = text[2:]
    if not text or len(text) > 4 or any(c not in "01234567" for c in text):
        raise AgentError(400, "INVALID_MODE", f"mode must be an octal string such as 755: {mode}")
    return int(text, 8)


def chmod(path: str | None, mode: object) -> dict[str, Any]:
    value = parse_mode(mode)
    resolved = paths.resolve(path)
    try:
        os.chmod(resolved, value)
    except FileNotFoundError:
        raise file_not_found(resolved) from None
    return {"path": resolved, "mode": format(value, "o").zfill(3)}


def delete(path: str | None) -> dict[str, Any]:
    resolved = paths.resolve(path)
    if paths.is_prefix_root(resolved):
        raise forbidden_path(resolved)
    try:
        st = os.lstat(resolved)
    except (FileNotFoundError, NotADirectoryError):
        raise file_not_found(resolved) from None
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(resolved)
    else:
        os.unlink(resolved)
    return {"path": resolved}

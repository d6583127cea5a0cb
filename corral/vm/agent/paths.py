"""The path rules of the files API, enforced inside the instance.

A path is expanded (`~`, `..`, symlinks) before it is judged, and it must then lie
under one of the allowed prefixes by whole path components: `/tmpfoo` is not under
`/tmp`. For a file that does not exist yet the nearest existing parent is resolved,
which `os.path.realpath` does for us (it resolves what exists and keeps the rest).
A symlink planted in /workspace that points at /etc/passwd therefore resolves to
/etc/passwd and is refused.
"""

from __future__ import annotations

import os

from .errors import AgentError, forbidden_path, invalid_path, missing_path

ALLOWED_PREFIXES: tuple[str, ...] = ("/workspace", "/home", "/root", "/tmp", "/opt", "/srv")
HOME = "/root"


def expand(path: str | None) -> str:
    """Expand `~` (the root user's home inside the instance) and require an absolute path."""
    if path is None or path == "":
        raise missing_path()
    if path == "~" or path.startswith("~/"):
        path = HOME + path[1:]
    if not path.startswith("/") or "\0" in path:
        raise invalid_path(path)
    return path


def is_allowed(resolved: str, prefixes: tuple[str, ...] = ALLOWED_PREFIXES) -> bool:
    return any(resolved == p or resolved.startswith(p + "/") for p in prefixes)


def resolve(path: str | None, prefixes: tuple[str, ...] = ALLOWED_PREFIXES) -> str:
    """The real path that `path` names, or FORBIDDEN_PATH when it escapes the prefixes."""
    expanded = expand(path)
    try:
        resolved = os.path.realpath(expanded)
    except PermissionError:
        # A link that cannot even be read (`/proc/1/root`: PID 1 is not dumpable)
        # leads nowhere a tenant's path may go.
        raise forbidden_path(expanded) from None
    except OSError as exc:
        raise AgentError(400, "INVALID_PATH", f"cannot resolve {expanded}: {exc.strerror}") from None
    if not is_allowed(resolved, prefixes):
        raise forbidden_path(expanded)
    return resolved


def is_prefix_root(resolved: str, prefixes: tuple[str, ...] = ALLOWED_PREFIXES) -> bool:
    """True for an allowed prefix itself (deleting or renaming /workspace is refused)."""
    return resolved in prefixes

"""Templates: read-only root file systems that instances start from.

The default template is Debian 12 built with mmdebstrap from Debian's packages.
It is built once into `<root>/<name>/rootfs` (with `manifest.json` beside it) and
reused; a build in progress holds a lock so concurrent callers wait for it instead
of building twice.

Ownership is shifted by `uid_base` after the build: uid 0 inside an instance maps
to `uid_base` outside, so the template's root-owned files must be owned by
`uid_base` on the host for the instance's root to own them (for `apt`, `pip
install` into /usr/local, ...). The overlay's lower layer is never written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from .disk import mount_points, unmount
from .errors import TemplateBuildFailed, TemplateNotFound
from .snapshots import tar_keeping_everything

log = logging.getLogger("corral.vm.templates")

Progress = Callable[[str], None]

DEFAULT_UID_BASE = 100_000
UID_COUNT = 65_536
#: Bumped when what a build produces changes, so cached templates are rebuilt.
BUILD_REVISION = 2
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


def host_ca_certificates() -> list[Path]:
    """The extra CA certificates this host trusts (Debian's local CA directory).

    Instances get them too: where egress goes through a TLS-inspecting proxy, `pip
    install` inside an instance must trust what the host trusts.
    """
    return sorted(HOST_CA_DIR.glob("**/*.crt")) if HOST_CA_DIR.is_dir() else []


@dataclass(frozen=True)
class Recipe:
    suite: str
    variant: str
    packages: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    """(path relative to the root, text) written into the root file system."""
    revision: int = 1
    """Bumped when this recipe changes, so only its cached template is rebuilt."""


DEFAULT_PACKAGES = (
    "python3", "python3-pip", "python3-venv", "curl", "wget", "git", "vim", "jq", "htop",
    "tree", "zip", "unzip", "ca-certificates", "procps", "iproute2", "less",
)

#: A desktop: TigerVNC's X server (Xvnc is the X server and the VNC server in one
#: process), openbox, the X tools desktop control drives (xdotool, wmctrl, xwd,
#: xdpyinfo, xprop), xterm, Firefox ESR and fonts; Debian's noVNC and websockify,
#: which serve the desktop page and bridge its WebSocket to the VNC socket.
DESKTOP_PACKAGES = (
    *DEFAULT_PACKAGES,
    "tigervnc-standalone-server", "openbox", "xterm", "xdotool", "wmctrl", "x11-utils",
    "x11-xserver-utils", "x11-apps", "firefox-esr", "fonts-dejavu-core", "dbus-x11",
    "novnc", "websockify",
)

#: Where the desktop's VNC server listens: a unix socket, never a TCP port.
VNC_SOCKET = "/run/corral/vnc.sock"
#: Openbox runs its `--startup` command once it manages windows (it claims the screen
#: earlier, and a window mapped in between is never managed): this file says so.
WM_READY = "/run/corral/wm-ready"
#: websockify on the instance's loopback: noVNC's files and the RFB WebSocket, which
#: only the preview router reaches from outside (through the instance's namespace).
DESKTOP_GATEWAY = ("127.0.0.1", 6080)

#: The guest agent starts these when it comes up (`corral.vm.agent.services`). The
#: X server's size comes from `CORRAL_RESOLUTION` in the instance's environment.
DESKTOP_SERVICES = [
    {
        "name": "xserver",
        "command": (
            "rm -f /tmp/.X0-lock /tmp/.X11-unix/X0 && mkdir -p /run/corral && "
            'exec Xvnc :0 -geometry "${CORRAL_RESOLUTION:-1280x800}" -depth 24 -desktop corral '
            f"-rfbport -1 -rfbunixpath {VNC_SOCKET} -rfbunixmode 0600 -SecurityTypes None "
            "-AlwaysShared -nolisten tcp -ac"
        ),
    },
    {
        "name": "wm",
        "command": (
            f"rm -f {WM_READY}; mkdir -p /run/corral; "
            # Until X answers (a socket file alone may be a stale one from a snapshot's files).
            "for i in $(seq 1200); do xdpyinfo -display :0 >/dev/null 2>&1 && break; sleep 0.05; done; "
            f"xsetroot -solid '#30506e'; exec openbox --startup 'touch {WM_READY}'"
        ),
    },
    {
        "name": "gateway",
        "command": (
            f"exec websockify --web /usr/share/novnc {DESKTOP_GATEWAY[0]}:{DESKTOP_GATEWAY[1]} "
            f"--unix-target={VNC_SOCKET}"
        ),
    },
]
SERVICES_FILE = "etc/corral/services.json"

RECIPES: dict[str, Recipe] = {
    "default": Recipe(suite="bookworm", variant="minbase", packages=DEFAULT_PACKAGES),
    "desktop": Recipe(
        suite="bookworm",
        variant="minbase",
        packages=DESKTOP_PACKAGES,
        files=((SERVICES_FILE, json.dumps(DESKTOP_SERVICES, indent=1)),),
        revision=5,
    ),
}

USER_DIRS = ("workspace", "home", "root", "tmp", "opt", "srv")

ALIASES = {"svc-desktop": "desktop"}
"""Template names the API uses for a recipe of another name."""
LAYERED = "layered"
"""A layered template's manifest says so: it is a layer (files a template build made) over
another template; its layers live under `<template dir>/layers/<layer id>/`, and the
manifest names the current one, so instances made from an older layer keep theirs."""


def _tree_size(root: Path) -> int:
    """Bytes of the regular files under `root` (apparent sizes; links not followed)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(directory, name)).st_size
    return total


def known_templates() -> list[str]:
    return sorted(RECIPES)


def _emit(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def shift_ownership(root: Path, uid_base: int) -> int:
    """Add `uid_base` to every file's uid and gid, keeping setuid/setgid bits."""
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            if st.st_uid >= UID_COUNT or st.st_gid >= UID_COUNT:
                continue
            os.lchown(path, st.st_uid + uid_base, st.st_gid + uid_base)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(st.st_mode))
            count += 1
    return count


def install_ca_certificates(rootfs: Path, certificates: list[Path]) -> None:
    if not certificates:
        return
    dest = rootfs / "usr" / "local" / "share" / "ca-certificates"
    dest.mkdir(parents=True, exist_ok=True)
    for cert in certificates:
        shutil.copyfile(cert, dest / cert.name)
    result = subprocess.run(["chroot", str(rootfs), "update-ca-certificates"], capture_output=True, text=True)
    if result.returncode != 0:
        raise TemplateBuildFailed(f"update-ca-certificates failed: {result.stderr.strip()}")


def _prepare_rootfs(rootfs: Path) -> None:
    for name in USER_DIRS:
        (rootfs / name).mkdir(mode=0o1777 if name == "tmp" else 0o755, exist_ok=True)
    (rootfs / "workspace").chmod(0o755)
    (rootfs / "etc" / "hostname").write_text("instance\n")
    resolv = rootfs / "etc" / "resolv.conf"
    if resolv.is_symlink():
        resolv.unlink()
    resolv.write_text("")
    # pip refuses to install system-wide on Debian 12 without this; inside a
    # disposable sandbox a global `pip install` is what users expect.
    external = rootfs / "usr" / "lib" / "python3.11" / "EXTERNALLY-MANAGED"
    if external.exists():
        external.unlink()
    apt_cache = rootfs / "var" / "cache" / "apt" / "archives"
    if apt_cache.is_dir():
        for item in apt_cache.glob("*.deb"):
            item.unlink()


def build_template(
    name: str,
    dest: Path,
    progress: Progress | None = None,
    uid_base: int = DEFAULT_UID_BASE,
    ca_certificates: list[Path] | None = None,
) -> Path:
    """Build template `name` into `dest` (replacing what is there); return `dest`.

    Blocking (about 30 s); the CLI calls it directly, the runtime through a thread.
    `progress` receives human-readable lines as the build advances.
    `ca_certificates` are added to the template's trust store (default: the host's
    extra CAs, see `host_ca_certificates`).
    """
    certificates = host_ca_certificates() if ca_certificates is None else list(ca_certificates)
    recipe = RECIPES.get(name)
    if recipe is None:
        raise TemplateNotFound(f"unknown template: {name}")
    if shutil.which("mmdebstrap") is None:
        raise TemplateBuildFailed("mmdebstrap is not installed (apt-get install mmdebstrap)")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_builds(dest)
    work = dest.parent / f".{dest.name}.build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    started = time.monotonic()
    command = [
        "mmdebstrap",
        f"--variant={recipe.variant}",
        "--include=" + ",".join(recipe.packages),
        "--aptopt=Acquire::Retries \"3\"",
        recipe.suite,
        str(work / "rootfs"),
    ]
    _emit(progress, f"building template {name!r}: {' '.join(command)}")
    try:
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None
            tail: list[str] = []
            for line in proc.stdout:
                line = line.rstrip()
                tail = [*tail, line][-20:]
                _emit(progress, line)
        if proc.returncode != 0:
            raise TemplateBuildFailed(f"mmdebstrap failed ({proc.returncode}): " + "\n".join(tail))
        _emit(progress, "preparing root file system")
        _prepare_rootfs(work / "rootfs")
        for relative, text in recipe.files:
            target = work / "rootfs" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if certificates:
            _emit(progress, f"trusting {len(certificates)} extra CA certificate(s)")
            install_ca_certificates(work / "rootfs", certificates)
        _emit(progress, f"shifting ownership to uid {uid_base}")
        shift_ownership(work / "rootfs", uid_base)
        manifest = {
            "name": name,
            "suite": recipe.suite,
            "packages": list(recipe.packages),
            "uid_base": uid_base,
            "revision": BUILD_REVISION,
            "recipe_revision": recipe.revision,
            "ca_certificates": [c.name for c in certificates],
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.monotonic() - started, 1),
        }
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
        if dest.exists():
            # Running instances may have the old rootfs mounted as their lower layer:
            # move it aside instead of deleting it under them.
            dest.rename(dest.parent / f".{dest.name}.old-{int(time.time())}")
        work.rename(dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _emit(progress, f"template {name!r} ready in {time.monotonic() - started:.1f} s at {dest}")
    return dest


def remove_abandoned_builds(dest: Path) -> list[Path]:
    """Remove what builds of `dest` left that stopped with their process: a server
    stopped while it built a template in the background leaves its `.<name>.build-<pid>`
    directory (1.7 GB for a desktop), and an mmdebstrap that died with it (its output
    pipe broken) leaves the chroot's mounts (proc, sys, devpts, a tmpfs). Each one whose
    process is gone and in which no process still works (an orphaned mmdebstrap
    finishing: its command line names the directory) has its mounts detached, deepest
    first, then is removed. Returns what was removed."""
    removed = []
    for work in sorted(dest.parent.glob(f".{dest.name}.build-*")):
        pid = work.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or _alive(int(pid)) or _worked_in(work):
            continue
        try:
            for point in sorted(_mounted_in(work), key=lambda point: len(point.parts), reverse=True):
                unmount(point)
        except OSError as exc:
            log.warning("an abandoned template build at %s keeps its mounts (%s); left in place", work, exc)
            continue
        if _mounted_in(work):
            log.warning("an abandoned template build at %s keeps its mounts; left in place", work)
            continue
        shutil.rmtree(work, ignore_errors=True)
        removed.append(work)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _worked_in(work: Path) -> bool:
    """Whether a running process names `work` (or a path in it) on its command line."""
    needle = str(work).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes()
            if needle + b"\0" in arguments or needle + b"/" in arguments:  # not `.x.build-12` for `.x.build-123`
                return True
        except OSError:  # it ended meanwhile
            continue
    return False


def _mounted_in(work: Path) -> list[Path]:
    return [point for point in mount_points() if point == work or work in point.parents]


class TemplateStore:
    """Built templates under `root`; builds a known template on first use."""

    def __init__(
        self,
        root: Path,
        uid_base: int = DEFAULT_UID_BASE,
        build_missing: bool = True,
        ca_certificates: list[Path] | None = None,
    ) -> None:
        self.root = Path(root)
        self.uid_base = uid_base
        self.build_missing = build_missing
        self.ca_certificates = ca_certificates

    def template_dir(self, name: str) -> Path:
        return self.root / ALIASES.get(name, name)

    def rootfs(self, name: str) -> Path:
        return self.template_dir(name) / "rootfs"

    def manifest(self, name: str) -> dict[str, object] | None:
        try:
            return dict(json.loads((self.template_dir(name) / "manifest.json").read_text()))
        except (OSError, ValueError):
            return None

    def is_layered(self, name: str) -> bool:
        manifest = self.manifest(name)
        return manifest is not None and bool(manifest.get(LAYERED))

    def is_built(self, name: str) -> bool:
        name = ALIASES.get(name, name)
        manifest = self.manifest(name)
        if manifest is not None and manifest.get(LAYERED):
            layer = self.template_dir(name) / "layers" / str(manifest.get("layer"))
            return manifest.get("uid_base") == self.uid_base and layer.is_dir()
        recipe = RECIPES.get(name)
        return (
            manifest is not None
            and manifest.get("uid_base") == self.uid_base
            and manifest.get("revision") == BUILD_REVISION
            and (recipe is None or manifest.get("recipe_revision", 1) == recipe.revision)
        )

    def exists(self, name: str) -> bool:
        """True for a template that is built or can be built."""
        return ALIASES.get(name, name) in RECIPES or self.is_built(name)

    async def lower(self, name: str) -> str:
        """The overlay lower directories of an instance made from `name` (building a recipe
        template if needed): a layered template's layer, then its base's, colon-separated."""
        name = ALIASES.get(name, name)
        manifest = self.manifest(name)
        if manifest is not None and manifest.get(LAYERED):
            if not self.is_built(name):
                raise TemplateNotFound(f"template {name} has no layer")
            layer = self.template_dir(name) / "layers" / str(manifest["layer"])
            return f"{layer}:{await self.lower(str(manifest['base']))}"
        return str(await self.ensure(name))

    def add_layer_sync(self, name: str, base: str, layer_id: str, files: Path) -> int:
        """Keep `files` (an instance's writable layer, copied with everything: owners, modes,
        xattrs and overlay whiteouts) as layer `layer_id` of template `name` over `base`, and
        make it the current one. Returns the layer's size in bytes."""
        directory = self.root / name
        layers = directory / "layers"
        layers.mkdir(parents=True, exist_ok=True)
        work = layers / f".{layer_id}.partial"
        shutil.rmtree(work, ignore_errors=True)
        result = subprocess.run(["cp", "-a", "--reflink=auto", str(files), str(work)], capture_output=True, text=True)
        if result.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            raise TemplateBuildFailed(f"keeping the build's files failed: {result.stderr.strip()}")
        size = _tree_size(work)
        os.replace(work, layers / layer_id)
        manifest = {
            "name": name,
            LAYERED: True,
            "base": base,
            "layer": layer_id,
            "uid_base": self.uid_base,
            "revision": BUILD_REVISION,
            "size_bytes": size,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tmp = directory / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2))
        os.replace(tmp, directory / "manifest.json")
        return size

    def has_layer(self, name: str, layer_id: str) -> bool:
        """Whether layered template `name` is here with `layer_id` as its current layer."""
        manifest = self.manifest(name)
        return manifest is not None and manifest.get("layer") == layer_id and self.is_built(name)

    async def pack_layer(self, name: str, dest: Path) -> None:
        """Layered template `name` (its manifest and current layer) as one tar at `dest`,
        for another node (`unpack_layer`), everything kept as `add_layer_sync` keeps it."""
        manifest = self.manifest(name)
        if manifest is None or not manifest.get(LAYERED) or not self.is_built(name):
            raise TemplateNotFound(f"template {name} has no layer here")
        layer = f"layers/{manifest['layer']}"
        await tar_keeping_everything("packing the template", "-C", str(self.root / name), "-cf", str(dest), "manifest.json", layer)

    async def unpack_layer(self, name: str, archive: Path) -> None:
        """Keep the layer `pack_layer` made (on another node) and make it the template's
        current one. The archive is one this platform packed, verified by its digest; it
        is unpacked into a fresh directory (GNU tar refuses members outside it), checked,
        and its layer renamed into place, so a template's layer is always whole."""
        self.root.mkdir(parents=True, exist_ok=True)
        partial = Path(await trio.to_thread.run_sync(lambda: tempfile.mkdtemp(prefix=f".{name}.", suffix=".partial", dir=self.root)))
        try:
            await tar_keeping_everything(
                "unpacking the template", "-C", str(partial), "--same-permissions", "--same-owner", "-xf", str(archive)
            )
            await trio.to_thread.run_sync(self._take_layer, name, partial)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, partial, True)

    def _take_layer(self, name: str, unpacked: Path) -> None:
        try:
            manifest = dict(json.loads((unpacked / "manifest.json").read_text()))
        except (OSError, ValueError):
            raise TemplateBuildFailed(f"the archive of template {name} has no manifest") from None
        layer_id = str(manifest.get("layer"))
        layer = unpacked / "layers" / layer_id
        if manifest.get("name") != name or not manifest.get(LAYERED) or not layer.is_dir() or str(manifest.get("base")) not in RECIPES:
            raise TemplateBuildFailed(f"the archive is not a layer of template {name}")
        if manifest.get("uid_base") != self.uid_base:
            raise TemplateBuildFailed(
                f"template {name} was built for files owned from uid {manifest.get('uid_base')}; this node keeps them from {self.uid_base}"
            )
        layers = self.root / name / "layers"
        layers.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError, OSError):  # another import of it won
            os.rename(layer, layers / layer_id)
        if not (layers / layer_id).is_dir():
            raise TemplateBuildFailed(f"the layer of template {name} could not be kept")
        current = self.manifest(name)
        newer_here = current is not None and str(current.get("built_at", "")) > str(manifest.get("built_at", ""))
        if (current is None or current.get("layer") != layer_id) and not newer_here:  # the newest layer stays current
            tmp = self.root / name / f"manifest.json.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(manifest, indent=2))
            os.replace(tmp, self.root / name / "manifest.json")

    def remove_sync(self, name: str) -> None:
        """Remove a layered template and every layer it has (a recipe template is kept)."""
        if self.is_layered(name):
            shutil.rmtree(self.root / name, ignore_errors=True)

    def remove_abandoned_builds(self) -> list[Path]:
        """`remove_abandoned_builds` for every template with a recipe (a node's start)."""
        return [work for name in RECIPES for work in remove_abandoned_builds(self.template_dir(name))]

    def ensure_sync(self, name: str, progress: Progress | None = None) -> Path:
        """The template's rootfs, building it (once, under a lock) if needed."""
        if self.is_built(name):
            return self.rootfs(name)
        if name not in RECIPES or not self.build_missing:
            raise TemplateNotFound(f"unknown template: {name}")
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.is_built(name):
                build_template(name, self.template_dir(name), progress, self.uid_base, self.ca_certificates)
        return self.rootfs(name)

    async def ensure(self, name: str, progress: Progress | None = None) -> Path:
        if self.is_built(name):
            return self.rootfs(name)
        if name not in RECIPES:
            raise TemplateNotFound(f"unknown template: {name}")
        return await trio.to_thread.run_sync(self.ensure_sync, name, progress)

"""Computer templates: what a `template_type` names, and the apps it offers.

A computer template says which runtime template (root file system, `corral.vm`) its
instances start from, which applications that root file system already has, and
which optional applications `selected_apps` may name (installed after boot). The
specification's identifier is `svc-desktop`: the runtime template `desktop`, Debian
with an X server, a window manager, VNC, xterm, xdotool and Firefox ESR, whose
session the guest agent starts at boot (contract §10). A template with
`desktop=True` gets `DISPLAY` and its resolution in the instance's environment, and
the computer is `running` only once its desktop answers.

An app is a named set of Debian packages from Debian's archive (the only package
source instances can reach); it counts as installed when all its packages are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .records import DEFAULT_RESOLUTION


@dataclass(frozen=True)
class App:
    name: str
    packages: tuple[str, ...]
    """Debian packages; the first one's version is the app's version."""
    description: str = ""


@dataclass(frozen=True)
class ComputerTemplate:
    template_type: str
    runtime_template: str
    """The `corral.vm` template the instance's root file system comes from."""
    description: str
    base_apps: tuple[App, ...] = ()
    """Applications the root file system has from the start."""
    catalog: dict[str, App] = field(default_factory=dict)
    """Applications `selected_apps` may name, by name."""
    desktop: bool = False
    """Whether the template runs a desktop session (X on `:0`, VNC for the control plane)."""
    resolution: str = DEFAULT_RESOLUTION


def _apps(*entries: tuple[str, tuple[str, ...], str]) -> dict[str, App]:
    return {name: App(name, packages, description) for name, packages, description in entries}


BASE_APPS: tuple[App, ...] = tuple(
    App(name, (package,), description)
    for name, package, description in (
        ("python3", "python3", "Python 3"),
        ("pip", "python3-pip", "pip for Python 3"),
        ("curl", "curl", "curl"),
        ("wget", "wget", "GNU Wget"),
        ("git", "git", "Git"),
        ("vim", "vim", "Vim"),
        ("jq", "jq", "jq"),
        ("htop", "htop", "htop"),
        ("tree", "tree", "tree"),
        ("zip", "zip", "Info-ZIP zip"),
        ("unzip", "unzip", "Info-ZIP unzip"),
    )
)
"""The specification's default template: Python 3 with pip, curl, wget, git, vim, jq, htop, tree, zip, unzip."""

DESKTOP_APPS: tuple[App, ...] = (
    App("xterm", ("xterm",), "xterm terminal emulator"),
    App("openbox", ("openbox",), "Openbox window manager"),
    App("xdotool", ("xdotool",), "xdotool"),
    App("firefox", ("firefox-esr",), "Firefox ESR"),
)
"""What the desktop template adds (contract §10)."""

DEFAULT_CATALOG: dict[str, App] = _apps(
    ("nodejs", ("nodejs", "npm"), "Node.js with npm"),
    ("build-essential", ("build-essential",), "gcc, g++, make"),
    ("golang", ("golang-go",), "Go"),
    ("rust", ("rustc", "cargo"), "Rust with Cargo"),
    ("java", ("default-jdk-headless",), "OpenJDK"),
    ("ruby", ("ruby",), "Ruby"),
    ("php", ("php-cli",), "PHP"),
    ("sqlite3", ("sqlite3",), "SQLite command-line shell"),
    ("postgresql-client", ("postgresql-client",), "psql"),
    ("redis", ("redis-server",), "Redis"),
    ("ffmpeg", ("ffmpeg",), "FFmpeg"),
    ("imagemagick", ("imagemagick",), "ImageMagick"),
    ("tmux", ("tmux",), "tmux"),
    ("nano", ("nano",), "GNU nano"),
    ("emacs", ("emacs-nox",), "GNU Emacs"),
    ("chromium", ("chromium",), "Chromium"),
    ("libreoffice", ("libreoffice",), "LibreOffice"),
    ("gimp", ("gimp",), "GIMP"),
    ("vlc", ("vlc",), "VLC"),
)

SVC_DESKTOP = ComputerTemplate(
    template_type="svc-desktop",
    runtime_template="desktop",
    description="Debian 12 desktop (X server, Openbox, xterm, Firefox ESR) with the specification's default tools",
    base_apps=(*BASE_APPS, *DESKTOP_APPS),
    catalog=DEFAULT_CATALOG,
    desktop=True,
)

_TEMPLATES: dict[str, ComputerTemplate] = {SVC_DESKTOP.template_type: SVC_DESKTOP}


def register_template(template: ComputerTemplate) -> None:
    """Add or replace a computer template (the desktop template calls this)."""
    _TEMPLATES[template.template_type] = template


def get_template(template_type: str) -> ComputerTemplate | None:
    return _TEMPLATES.get(template_type)


def template_types() -> list[str]:
    return sorted(_TEMPLATES)

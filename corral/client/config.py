"""Where the client finds its server and key: arguments, then the environment
(`CORRAL_API_URL`, `CORRAL_API_KEY`), then the file `corral login` writes
(`$XDG_CONFIG_HOME/corral/config.json`, else `~/.config/corral/config.json`, mode 0600)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ._base import DEFAULT_URL

__all__ = ["Credentials", "config_path", "load_credentials", "save_credentials"]


@dataclass(frozen=True)
class Credentials:
    url: str
    api_key: str | None
    source: str
    """`arguments`, `environment`, a file path, or `default`: shown by `corral whoami`."""


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "corral" / "config.json"


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {key: str(value) for key, value in data.items() if isinstance(value, str)} if isinstance(data, dict) else {}


def load_credentials(url: str | None = None, api_key: str | None = None, env: Mapping[str, str] | None = None) -> Credentials:
    env = os.environ if env is None else env
    path = config_path(env)
    stored = _read(path)
    chosen_url = url or env.get("CORRAL_API_URL") or stored.get("url") or DEFAULT_URL
    chosen_key = api_key or env.get("CORRAL_API_KEY") or stored.get("api_key")
    if api_key or url:
        source = "arguments"
    elif env.get("CORRAL_API_KEY"):
        source = "environment"
    elif stored.get("api_key"):
        source = str(path)
    else:
        source = "default"
    return Credentials(chosen_url.rstrip("/"), chosen_key, source)


def save_credentials(url: str, api_key: str, env: Mapping[str, str] | None = None) -> Path:
    """Write the file readable by its owner only."""
    path = config_path(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": url.rstrip("/"), "api_key": api_key}, handle, indent=2)
        handle.write("\n")
    os.chmod(path, 0o600)
    return path

"""The TLS edge: Caddy (Debian's package) in front of the preview router (contract §12).

`corral edge` writes Caddy's JSON configuration and supervises the `caddy` process:

- HTTPS on `--https-port` (443) for every host, with on-demand TLS: before Caddy
  gets or loads a certificate for a name it asks `GET /api/v1/tls/ask?domain=`,
  which answers from memory and fails closed;
- certificates from `CORRAL_ACME_CA`: Let's Encrypt by default, `internal` for
  Caddy's own CA (its root stays in the edge's storage, nothing is installed in the
  system's trust store), or any ACME directory URL (Pebble in tests), whose HTTPS
  roots may be given in `CORRAL_ACME_CA_ROOTS`;
- HTTP on `--http-port` (80): ACME HTTP-01 challenges and redirects to HTTPS;
- every request goes to the preview router with `X-Corral-Edge: <secret>` and
  `X-Forwarded-Proto: https`. The router trusts the request came over HTTPS
  through the edge only with that secret (a client cannot forge it), marks a
  verified custom domain `active` on its first such request, and never passes the
  header on to an app.

The secret is shared through the data directory (`<data-dir>/edge-secret`, made by
whichever of `corral serve` and `corral edge` starts first) or `CORRAL_EDGE_SECRET`.
Caddy is restarted with backoff if it exits; its log goes to `<data-dir>/edge/caddy.log`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from corral.config import Settings

log = logging.getLogger("corral.edge")

EDGE_HEADER = "X-Corral-Edge"
LETS_ENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)


def edge_secret(data_dir: Path, configured: str | None = None) -> str:
    """The secret the edge adds and the router checks: configured, else `<data-dir>/edge-secret`."""
    if configured:
        return configured
    path = Path(data_dir) / "edge-secret"
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if text:
            return text
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # the other process made it meanwhile
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(fresh + "\n")
    return fresh


@dataclass(frozen=True)
class EdgeConfig:
    ask_url: str
    """`http://127.0.0.1:8080/api/v1/tls/ask`."""
    router: str
    """The preview router's `host:port`."""
    secret: str
    storage: Path
    """Caddy's certificates, keys and its internal CA."""
    https_port: int = 443
    http_port: int = 80
    listen_host: str = ""
    """Address to listen on; empty: every interface."""
    acme_ca: str = ""
    acme_ca_roots: str | None = None
    acme_email: str | None = None


def _issuer(config: EdgeConfig) -> dict[str, Any]:
    if config.acme_ca.strip().lower() == "internal":
        return {"module": "internal"}
    issuer: dict[str, Any] = {
        "module": "acme",
        "ca": config.acme_ca.strip() or LETS_ENCRYPT,
        # The challenges are answered where the ACME server reaches us: the ports we listen on.
        "challenges": {
            "http": {"alternate_port": config.http_port},
            "tls-alpn": {"alternate_port": config.https_port},
        },
    }
    if config.acme_ca_roots:
        issuer["trusted_roots_pem_files"] = [config.acme_ca_roots]
    if config.acme_email:
        issuer["email"] = config.acme_email
    return issuer


def caddy_config(config: EdgeConfig) -> dict[str, Any]:
    """Caddy's JSON configuration for the edge."""
    host = config.listen_host
    proxy = {
        "handler": "reverse_proxy",
        "upstreams": [{"dial": config.router}],
        "headers": {"request": {"set": {EDGE_HEADER: [config.secret], "X-Forwarded-Proto": ["https"]}}},
        "flush_interval": -1,  # event streams and slow chunks reach the browser as they come
    }
    return {
        "admin": {"disabled": True},
        "logging": {"logs": {"default": {"level": "INFO"}}},
        "storage": {"module": "file_system", "root": str(config.storage)},
        "apps": {
            "http": {
                "http_port": config.http_port,
                "https_port": config.https_port,
                "servers": {
                    "edge": {
                        "listen": [f"{host}:{config.https_port}"],
                        "routes": [{"handle": [proxy]}],
                        "tls_connection_policies": [{}],
                        "automatic_https": {"disable": False},
                    },
                },
            },
            "tls": {
                "automation": {
                    "policies": [{"issuers": [_issuer(config)], "on_demand": True}],
                    "on_demand": {"ask": config.ask_url},
                },
            },
            "pki": {"certificate_authorities": {"local": {"install_trust": False}}},
        },
    }


def caddy_binary() -> str:
    found = shutil.which("caddy")
    if found is None:
        raise FileNotFoundError("caddy is not installed (Debian package `caddy`; tools/install installs it)")
    return found


def write_config(config: EdgeConfig) -> Path:
    config.storage.mkdir(parents=True, exist_ok=True)
    path = config.storage / "caddy.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the secret
    with os.fdopen(fd, "w") as handle:
        json.dump(caddy_config(config), handle, indent=2)
    return path


def internal_root(config: EdgeConfig) -> Path:
    """Where Caddy's internal CA keeps its root certificate (`CORRAL_ACME_CA=internal`)."""
    return config.storage / "pki" / "authorities" / "local" / "root.crt"


async def _listening(host: str, port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream(host or "127.0.0.1", port)
    except OSError:
        return False
    await stream.aclose()
    return True


async def run_edge_process(config: EdgeConfig, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run Caddy until cancelled, restarting it with backoff; started once it listens."""
    binary = caddy_binary()
    path = write_config(config)
    log_path = config.storage / "caddy.log"
    env = {**os.environ, "HOME": str(config.storage), "XDG_DATA_HOME": str(config.storage),
           "XDG_CONFIG_HOME": str(config.storage)}
    command = [binary, "run", "--config", str(path)]
    attempt = 0
    started = False
    while True:
        log.info("starting caddy on :%d (https) and :%d (http), ACME %s", config.https_port, config.http_port,
                 config.acme_ca or "Let's Encrypt")
        with open(log_path, "ab") as log_file:
            async with trio.open_nursery() as nursery:
                run = partial(trio.run_process, command, check=False, stdout=log_file, stderr=log_file, env=env)
                process: trio.Process = await nursery.start(run)
                with trio.move_on_after(30):
                    while process.returncode is None and not await _listening(config.listen_host, config.https_port):
                        await trio.sleep(0.05)
                if process.returncode is None and not started:
                    started = True
                    attempt = 0
                    task_status.started()
                await process.wait()
        delay = RESTART_BACKOFF[min(attempt, len(RESTART_BACKOFF) - 1)]
        attempt += 1
        log.warning("caddy exited with %s; restarting in %.1f s (log: %s)", process.returncode, delay, log_path)
        await trio.sleep(delay)


def edge_config(settings: Settings, *, https_port: int | None = None, http_port: int | None = None) -> EdgeConfig:
    """The edge in front of this node's router, asking this node's API."""
    api_host = "127.0.0.1" if settings.host in ("", "0.0.0.0", "::") else settings.host
    router_host = api_host if ":" not in api_host else f"[{api_host}]"
    return EdgeConfig(
        ask_url=f"http://{router_host}:{settings.port}/api/v1/tls/ask",
        router=f"{router_host}:{settings.preview_port}",
        secret=edge_secret(settings.data_dir, settings.edge_secret),
        storage=Path(settings.data_dir) / "edge",
        https_port=https_port if https_port is not None else settings.edge_https_port,
        http_port=http_port if http_port is not None else settings.edge_http_port,
        acme_ca=settings.acme_ca,
        acme_ca_roots=settings.acme_ca_roots,
        acme_email=settings.acme_email,
    )

"""Settings: every `corral serve` option with its environment variable (contract §1)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path


def _env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = field(default_factory=lambda: Path("./.corral"))
    database_url: str = ""
    preview_port: int = 8081
    public_domain: str = "corral.localhost"
    admin_key: str | None = None
    allow_private_destinations: bool = False
    ca_bundle: str | None = None
    webhook_retry_scale: float = 1.0
    smtp_url: str | None = None
    # Not in contract §1: internal knobs with safe defaults.
    shutdown_grace_seconds: float = 10.0
    access_token_ttl: int = 3600
    refresh_token_ttl: int = 7 * 24 * 3600
    sse_ticket_ttl: int = 60
    event_retention_seconds: int = 15 * 60
    jwt_secret: str | None = None
    # The instance runtime (issue 3): where templates are cached, and the host network
    # of this node's instances. Nodes (and test servers) on one machine need distinct
    # bridges, subnets and nftables tables.
    template_dir: Path | None = None
    bridge: str = "corral0"
    subnet: str = "10.88.0.0/16"
    nft_table: str = "corral"
    link_prefix: str = "cv"
    netns_prefix: str = "corral-"
    cgroup_parent: str = "corral"
    sandbox_ready_wait: float = 10.0
    agent_timeout: float = 10.0
    """How long a call to a guest agent (other than exec's own timeout) may take."""

    def __post_init__(self) -> None:
        # Absolute, because instances are launched from processes with other working
        # directories (the zygote), and the default `./.corral` is relative.
        self.data_dir = Path(self.data_dir).absolute()
        if self.template_dir is None:
            self.template_dir = self.data_dir / "templates"
        self.template_dir = Path(self.template_dir).absolute()
        if not self.database_url:
            self.database_url = f"sqlite:///{(self.data_dir / 'corral.db').absolute()}"

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Settings from the environment, with explicit (non-None) overrides winning."""
        env = os.environ
        values: dict[str, object] = {
            "host": env.get("CORRAL_HOST", "127.0.0.1"),
            "port": int(env.get("CORRAL_PORT", "8080")),
            "data_dir": Path(env.get("CORRAL_DATA_DIR", "./.corral")),
            "database_url": env.get("CORRAL_DATABASE_URL", ""),
            "preview_port": int(env.get("CORRAL_PREVIEW_PORT", "8081")),
            "public_domain": env.get("CORRAL_PUBLIC_DOMAIN", "corral.localhost"),
            "admin_key": env.get("CORRAL_ADMIN_KEY") or None,
            "allow_private_destinations": _env_flag("CORRAL_ALLOW_PRIVATE_DESTINATIONS"),
            "ca_bundle": env.get("CORRAL_CA_BUNDLE") or None,
            "webhook_retry_scale": float(env.get("CORRAL_WEBHOOK_RETRY_SCALE", "1.0")),
            "smtp_url": env.get("CORRAL_SMTP_URL") or None,
            "template_dir": Path(env["CORRAL_TEMPLATE_DIR"]) if env.get("CORRAL_TEMPLATE_DIR") else None,
            "bridge": env.get("CORRAL_BRIDGE", "corral0"),
            "subnet": env.get("CORRAL_SUBNET", "10.88.0.0/16"),
            "nft_table": env.get("CORRAL_NFT_TABLE", "corral"),
            "link_prefix": env.get("CORRAL_LINK_PREFIX", "cv"),
            "netns_prefix": env.get("CORRAL_NETNS_PREFIX", "corral-"),
            "cgroup_parent": env.get("CORRAL_CGROUP_PARENT", "corral"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        return cls.from_env(
            host=args.host,
            port=args.port,
            data_dir=Path(args.data_dir) if args.data_dir else None,
            database_url=args.database_url,
            preview_port=args.preview_port,
            public_domain=args.public_domain,
        )

    @property
    def uses_postgres(self) -> bool:
        return self.database_url.startswith(("postgresql://", "postgres://"))

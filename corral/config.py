"""Settings: every `corral serve` option with its environment variable (contract §1)."""

from __future__ import annotations

import argparse
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit


def _env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


MIN_DISK_MB = 16
"""The smallest instance disk (`corral.vm.disk.MIN_MB`): fractions of a GiB are fine (tests use 0.05)."""

MAX_WARM_POOL = 64


def default_warm_pool() -> int:
    """Pooled instances per template and size when `CORRAL_WARM_POOL` is unset: two per
    core, from 2 to 8. An idle pooled sandbox costs a few MB; enough are kept that a
    burst of creates one after another finds one ready while the taken ones are
    replaced in the background."""
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def _env_int(name: str, default: int | None) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, not {value!r}") from None


NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
"""What a node's name may be (a host name fits)."""
ADMIN_KEY_PREFIX = "msk_a_"
MIN_ADMIN_KEY_LENGTH = 32


class SettingsError(ValueError):
    """A setting that cannot work; `corral serve` prints it and exits instead of starting."""


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
    """`CORRAL_ALLOW_PRIVATE_DESTINATIONS`: webhooks reach loopback and private addresses; instances (every
    port, the egress proxy too) RFC 1918 and CGNAT; never other instances, the node, link-local (§18)."""
    ca_bundle: str | None = None
    webhook_retry_scale: float = 1.0
    smtp_url: str | None = None
    invite_ttl_seconds: int = 7 * 24 * 3600
    """How long workspace and org invites stay valid (`CORRAL_INVITE_TTL_SECONDS`)."""
    # Not in contract §1: internal knobs with safe defaults.
    shutdown_grace_seconds: float = 10.0
    access_token_ttl: int = 3600
    refresh_token_ttl: int = 7 * 24 * 3600
    sse_ticket_ttl: int = 60
    sse_heartbeat_seconds: float = 15.0
    """A comment line on every idle stream this often (`CORRAL_SSE_HEARTBEAT_SECONDS`)."""
    event_retention_seconds: int = 15 * 60
    jwt_secret: str | None = None
    webhook_timeout: float = 30.0
    """A webhook attempt that has no complete response within this many seconds fails."""
    webhook_lease_seconds: float = 60.0
    """How long a node's claim on a queued delivery lasts (longer than the timeout)."""
    webhook_poll_interval: float = 2.0
    """How often the delivery worker looks for due deliveries queued by other nodes."""
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
    idle_check_seconds: float = 5.0
    """How often auto-stop looks for idle sandboxes (`CORRAL_IDLE_CHECK_SECONDS`)."""
    agent_timeout: float = 10.0
    """How long a call to a guest agent (other than exec's own timeout) may take."""
    instance_launch_timeout: float = 15.0
    """How long each stage of a launch may take after the one before, up to the agent listening (`CORRAL_INSTANCE_LAUNCH_TIMEOUT`)."""
    # Disks (contract §18; docs/api.md "Disks").
    sandbox_disk_gb: float = 10.0
    """GiB of a sandbox's (and a deployment service's, and a template build's) writable layer (`CORRAL_SANDBOX_DISK_GB`)."""
    computer_disk_gb: float | None = None
    """GiB of every computer's writable layer (`CORRAL_COMPUTER_DISK_GB`); None: its size's (small 20, medium 50, large 100)."""
    database_disk_gb: float | None = None
    """GiB of every database server's disk (`CORRAL_DATABASE_DISK_GB`); None: its size's, as a computer's."""
    disk_reserve_gb: float = 5.0
    """New instances are refused (503) while the data directory has less free (`CORRAL_DISK_RESERVE_GB`)."""
    # The warm pool (contract §19; docs/api.md "Warm pool").
    warm_pool: int = 0
    """Booted, unassigned sandbox instances kept per template and size (`CORRAL_WARM_POOL`;
    `corral serve` defaults to `default_warm_pool()`, a bare `Settings` to none)."""
    memory_reserve_mb: int | None = None
    """The pool boots no instance while the node has less memory available than this
    (`CORRAL_MEMORY_RESERVE_MB`); None: a tenth of the machine's, at least 512 MiB."""
    # Credits and metering (issue 5; docs/api.md "Credits, metering and quotas").
    default_tenant_credits: int = 100
    """Credits granted to a tenant created without `credits` (`CORRAL_DEFAULT_TENANT_CREDITS`)."""
    credit_low_threshold: int = 10
    """`billing.credit_low` when a balance falls below this (`CORRAL_CREDIT_LOW_THRESHOLD`)."""
    meter_interval: float = 10.0
    """Seconds between metering rounds (`CORRAL_METER_INTERVAL`)."""
    meter_rate_scale: float = 1.0
    """Multiplies metered running time, for tests and demos (`CORRAL_METER_RATE_SCALE`)."""
    # Computers (issue 8; docs/api.md "Computers").
    regions: str = "local"
    """Region slugs computers may live in, comma-separated; the first is the default (`CORRAL_REGIONS`)."""
    computer_metrics_seconds: float = 30.0
    """How often running computers' cgroups are sampled for metrics (`CORRAL_COMPUTER_METRICS_SECONDS`)."""
    computer_app_install_timeout: float = 900.0
    """How long installing a computer's `selected_apps` may take."""

    # Previews (issue 6; docs/api.md "Previews").
    preview_url_scheme: str = "http"
    """Scheme of generated preview URLs (`CORRAL_PREVIEW_URL_SCHEME`; `https` behind a TLS edge)."""
    preview_url_port: int | None = None
    """Port written into preview URLs (`CORRAL_PREVIEW_URL_PORT`); None: the preview port; 0: none."""
    preview_router_host: str = ""
    """CNAME target of preview domains (`CORRAL_PREVIEW_ROUTER_HOST`); empty: `preview.<public-domain>`."""
    dns_servers: str = ""
    """Name servers for DNS checks, `host[:port]` comma-separated (`CORRAL_DNS_SERVERS`); empty: the system's."""
    preview_dns_recheck_seconds: float = 60.0
    #: Build the default and desktop templates at start if they are missing (`corral serve`: on,
    #: `CORRAL_PREPARE_TEMPLATES=0` turns it off; embedded nodes and tests: off).
    prepare_templates: bool = False
    """How often pending preview domains are checked again (`CORRAL_PREVIEW_DNS_RECHECK_SECONDS`)."""
    preview_ready_timeout: float = 300.0
    """How long an exposed port is polled for `sandbox.preview.ready`."""
    # The egress proxy (issue 15; contract §11).
    egress_proxy: bool = True
    """Run the egress proxy and send instances' ports 80 and 443 through it (`CORRAL_EGRESS_PROXY`)."""
    egress_port: int = 3128
    """The egress proxy's port on the bridge address (`CORRAL_EGRESS_PORT`)."""
    egress_allowed_destinations: tuple[str, ...] = ()
    """Test-only: private CIDRs the egress proxy may reach without `CORRAL_ALLOW_PRIVATE_DESTINATIONS`
    (`CORRAL_EGRESS_ALLOWED_DESTINATIONS`, comma-separated), e.g. a test's stand-in internet; loopback
    and the node's own addresses too when named, never the instance subnet. Instances reach its private
    networks on other ports too (`corral.net.firewall`)."""
    oauth_providers: str | None = None
    """The operator's OAuth providers: a JSON file path (`CORRAL_OAUTH_PROVIDERS`; contract §11)."""
    public_api_url: str | None = None
    """How the outside world reaches this API (`CORRAL_PUBLIC_API_URL`), e.g. for OAuth redirect URIs;
    unset: the Host of each request."""
    # The TLS edge (`corral edge`, contract §12).
    acme_ca: str = ""
    """ACME directory of the edge (`CORRAL_ACME_CA`): empty is Let's Encrypt, `internal` Caddy's own CA, else a URL."""
    acme_ca_roots: str | None = None
    """PEM file of roots the edge trusts for the ACME directory's HTTPS (`CORRAL_ACME_CA_ROOTS`), e.g. Pebble's."""
    acme_email: str | None = None
    """Contact address for the ACME account (`CORRAL_ACME_EMAIL`)."""
    edge_https_port: int = 443
    edge_http_port: int = 80
    edge_secret: str | None = None
    """Shared by the edge and the router (`CORRAL_EDGE_SECRET`); unset: `<data-dir>/edge-secret`, made once."""
    # Managed databases (issue 17; contract §13; docs/api.md "Managed databases").
    database_dir: Path | None = None
    """Where database servers live (`CORRAL_DATABASE_DIR`); None: `<data-dir>/databases` when
    every directory above it lets the servers' own users through, else
    `/var/lib/corral/databases-<hash of the data dir>`."""
    database_ports: str = "15432-16431"
    """The proxy ports handed to databases, `first-last` (`CORRAL_DATABASE_PORTS`)."""
    database_host: str = ""
    """The host in a database's `url` (`CORRAL_DATABASE_HOST`); empty: `--host` (127.0.0.1 for 0.0.0.0)."""
    database_check_seconds: float = 1.0
    """How often servers are checked for crashes and idleness (`CORRAL_DATABASE_CHECK_SECONDS`)."""
    # Operations (contract §19; docs/api.md "Metrics").
    metrics_port: int | None = None
    """Prometheus metrics at `GET /metrics` on this port of `host`, without authentication
    (`CORRAL_METRICS_PORT`); None: no metrics listener."""
    # Several nodes (contract §20; docs/api.md "Nodes").
    node_name: str = ""
    """This node's name in the cluster (`--node-name`, `CORRAL_NODE_NAME`); empty: the host name."""
    advertise_url: str = ""
    """Where the other nodes reach this one (`--advertise`, `CORRAL_ADVERTISE_URL`); empty:
    `http://<host>:<port>` (the host name for a wildcard `host`)."""
    node_region: str = ""
    """This node's region (`CORRAL_NODE_REGION`), one of `regions`; empty: the first."""
    advertise_preview_url: str = ""
    """Where the other nodes' preview routers reach this node's (`--advertise-preview`,
    `CORRAL_ADVERTISE_PREVIEW_URL`), an http:// URL; empty: the advertised URL's host
    and `preview_port` (none when that port is 0, chosen at start)."""
    node_max_instances: int = 0
    """Instance-backed resources placement may put on this node (`CORRAL_NODE_MAX_INSTANCES`); 0: no limit."""
    node_max_memory_mb: int = 0
    """The sum of their sizes' memory placement may put on this node (`CORRAL_NODE_MAX_MEMORY_MB`); 0: no limit."""
    def __post_init__(self) -> None:
        # Absolute, because instances are launched from processes with other working
        # directories (the zygote), and the default `./.corral` is relative.
        self.data_dir = Path(self.data_dir).absolute()
        if self.template_dir is None:
            self.template_dir = self.data_dir / "templates"
        self.template_dir = Path(self.template_dir).absolute()
        if not self.database_url:
            self.database_url = f"sqlite:///{(self.data_dir / 'corral.db').absolute()}"
        for name in ("sandbox_disk_gb", "computer_disk_gb", "database_disk_gb"):
            value = getattr(self, name)
            if value is not None and not value * 1024 >= MIN_DISK_MB:
                raise SettingsError(f"CORRAL_{name.upper()} must be at least {MIN_DISK_MB / 1024:g} (GiB)")
        if not self.disk_reserve_gb >= 0:
            raise SettingsError("CORRAL_DISK_RESERVE_GB must be a non-negative number (GiB)")
        if not 0 <= self.warm_pool <= MAX_WARM_POOL:
            raise SettingsError(f"CORRAL_WARM_POOL must be an integer from 0 (no pool) to {MAX_WARM_POOL}")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            raise SettingsError("CORRAL_METRICS_PORT must be a TCP port from 1 to 65535 (or unset: no metrics listener)")
        if self.metrics_port is not None and self.metrics_port in (self.port, self.preview_port):
            raise SettingsError("CORRAL_METRICS_PORT must differ from the API and preview ports")
        self._settle_node()
        if self.node_max_instances < 0 or self.node_max_memory_mb < 0:
            raise SettingsError("CORRAL_NODE_MAX_INSTANCES and CORRAL_NODE_MAX_MEMORY_MB must be non-negative integers (0: no limit)")
        if self.memory_reserve_mb is not None and self.memory_reserve_mb < 0:
            raise SettingsError("CORRAL_MEMORY_RESERVE_MB must be a non-negative number of MiB")
        if self.admin_key is not None and (
            not self.admin_key.startswith(ADMIN_KEY_PREFIX) or len(self.admin_key) < MIN_ADMIN_KEY_LENGTH
        ):
            # Admin tokens are recognised by their prefix; any other key would be
            # accepted here and then refused on every request as an invalid token.
            raise SettingsError(
                f"CORRAL_ADMIN_KEY must start with {ADMIN_KEY_PREFIX} and be at least"
                f" {MIN_ADMIN_KEY_LENGTH} characters long (or leave it unset to have one generated)"
            )

    def _settle_node(self) -> None:
        """Defaults and checks of the node's name, address and region."""
        self.node_name = self.node_name or socket.gethostname()
        if not NODE_NAME.fullmatch(self.node_name):
            raise SettingsError(
                "CORRAL_NODE_NAME (--node-name) must be 1 to 63 letters, digits, dots, dashes or underscores,"
                " starting with a letter or digit"
            )
        if not self.advertise_url:
            host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
            self.advertise_url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
        parsed = urlsplit(self.advertise_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/") or parsed.query:
            raise SettingsError("CORRAL_ADVERTISE_URL (--advertise) must be an http:// or https:// URL of a host (and port), e.g. http://10.0.0.5:8080")
        self.advertise_url = self.advertise_url.rstrip("/")
        self._settle_preview_address(parsed.hostname)
        regions = [region.strip() for region in self.regions.split(",") if region.strip()]
        self.node_region = self.node_region or (regions[0] if regions else "local")
        if regions and self.node_region not in regions:
            raise SettingsError(f"CORRAL_NODE_REGION {self.node_region!r} is not one of CORRAL_REGIONS ({', '.join(regions)})")

    def _settle_preview_address(self, advertised_host: str) -> None:
        """The default and check of `advertise_preview_url` (plain HTTP: routers relay
        to each other without TLS, as the edge reaches its own node's router)."""
        if not self.advertise_preview_url and self.preview_port:
            host = f"[{advertised_host}]" if ":" in advertised_host else advertised_host
            self.advertise_preview_url = f"http://{host}:{self.preview_port}"
        if self.advertise_preview_url:
            parsed = urlsplit(self.advertise_preview_url)
            if parsed.scheme != "http" or not parsed.hostname or parsed.path not in ("", "/") or parsed.query:
                raise SettingsError(
                    "CORRAL_ADVERTISE_PREVIEW_URL (--advertise-preview) must be an http:// URL of a host and port,"
                    " e.g. http://10.0.0.5:8081"
                )
            self.advertise_preview_url = self.advertise_preview_url.rstrip("/")

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
            "invite_ttl_seconds": int(env.get("CORRAL_INVITE_TTL_SECONDS", str(7 * 24 * 3600))),
            "template_dir": Path(env["CORRAL_TEMPLATE_DIR"]) if env.get("CORRAL_TEMPLATE_DIR") else None,
            "bridge": env.get("CORRAL_BRIDGE", "corral0"),
            "subnet": env.get("CORRAL_SUBNET", "10.88.0.0/16"),
            "nft_table": env.get("CORRAL_NFT_TABLE", "corral"),
            "link_prefix": env.get("CORRAL_LINK_PREFIX", "cv"),
            "netns_prefix": env.get("CORRAL_NETNS_PREFIX", "corral-"),
            "cgroup_parent": env.get("CORRAL_CGROUP_PARENT", "corral"),
            "sse_heartbeat_seconds": float(env.get("CORRAL_SSE_HEARTBEAT_SECONDS", "15")),
            "idle_check_seconds": float(env.get("CORRAL_IDLE_CHECK_SECONDS", "5")),
            "instance_launch_timeout": float(env.get("CORRAL_INSTANCE_LAUNCH_TIMEOUT", "15")),
            "sandbox_disk_gb": float(env.get("CORRAL_SANDBOX_DISK_GB", "10")),
            "computer_disk_gb": float(env["CORRAL_COMPUTER_DISK_GB"]) if env.get("CORRAL_COMPUTER_DISK_GB") else None,
            "database_disk_gb": float(env["CORRAL_DATABASE_DISK_GB"]) if env.get("CORRAL_DATABASE_DISK_GB") else None,
            "disk_reserve_gb": float(env.get("CORRAL_DISK_RESERVE_GB", "5")),
            "warm_pool": _env_int("CORRAL_WARM_POOL", default_warm_pool()),
            "memory_reserve_mb": _env_int("CORRAL_MEMORY_RESERVE_MB", None),
            "default_tenant_credits": int(env.get("CORRAL_DEFAULT_TENANT_CREDITS", "100")),
            "credit_low_threshold": int(env.get("CORRAL_CREDIT_LOW_THRESHOLD", "10")),
            "meter_interval": float(env.get("CORRAL_METER_INTERVAL", "10")),
            "meter_rate_scale": float(env.get("CORRAL_METER_RATE_SCALE", "1")),
            "regions": env.get("CORRAL_REGIONS", "local"),
            "computer_metrics_seconds": float(env.get("CORRAL_COMPUTER_METRICS_SECONDS", "30")),
            "preview_url_scheme": env.get("CORRAL_PREVIEW_URL_SCHEME", "http"),
            "preview_url_port": int(env["CORRAL_PREVIEW_URL_PORT"]) if env.get("CORRAL_PREVIEW_URL_PORT") else None,
            "preview_router_host": env.get("CORRAL_PREVIEW_ROUTER_HOST", ""),
            "dns_servers": env.get("CORRAL_DNS_SERVERS", ""),
            "preview_dns_recheck_seconds": float(env.get("CORRAL_PREVIEW_DNS_RECHECK_SECONDS", "60")),
            "prepare_templates": _env_flag("CORRAL_PREPARE_TEMPLATES", default=True),
            "egress_proxy": _env_flag("CORRAL_EGRESS_PROXY", default=True),
            "egress_port": int(env.get("CORRAL_EGRESS_PORT", "3128")),
            "oauth_providers": env.get("CORRAL_OAUTH_PROVIDERS") or None,
            "public_api_url": env.get("CORRAL_PUBLIC_API_URL") or None,
            "acme_ca": env.get("CORRAL_ACME_CA", ""),
            "acme_ca_roots": env.get("CORRAL_ACME_CA_ROOTS") or None,
            "acme_email": env.get("CORRAL_ACME_EMAIL") or None,
            "edge_https_port": int(env.get("CORRAL_EDGE_HTTPS_PORT", "443")),
            "edge_http_port": int(env.get("CORRAL_EDGE_HTTP_PORT", "80")),
            "edge_secret": env.get("CORRAL_EDGE_SECRET") or None,
            "database_dir": Path(env["CORRAL_DATABASE_DIR"]) if env.get("CORRAL_DATABASE_DIR") else None,
            "database_ports": env.get("CORRAL_DATABASE_PORTS", "15432-16431"),
            "database_host": env.get("CORRAL_DATABASE_HOST", ""),
            "database_check_seconds": float(env.get("CORRAL_DATABASE_CHECK_SECONDS", "1")),
            "metrics_port": _env_int("CORRAL_METRICS_PORT", None),
            "node_name": env.get("CORRAL_NODE_NAME", ""),
            "advertise_url": env.get("CORRAL_ADVERTISE_URL", ""),
            "node_region": env.get("CORRAL_NODE_REGION", ""),
            "advertise_preview_url": env.get("CORRAL_ADVERTISE_PREVIEW_URL", ""),
            "node_max_instances": int(env.get("CORRAL_NODE_MAX_INSTANCES", "0")),
            "node_max_memory_mb": int(env.get("CORRAL_NODE_MAX_MEMORY_MB", "0")),
            "egress_allowed_destinations": tuple(
                item.strip() for item in env.get("CORRAL_EGRESS_ALLOWED_DESTINATIONS", "").split(",") if item.strip()
            ),
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
            edge_https_port=getattr(args, "https_port", None),
            edge_http_port=getattr(args, "http_port", None),
            metrics_port=getattr(args, "metrics_port", None),
            node_name=getattr(args, "node_name", None),
            advertise_url=getattr(args, "advertise", None),
            advertise_preview_url=getattr(args, "advertise_preview", None),
        )

    def preview_origin(self, host: str, *, websocket: bool = False) -> str:
        """`scheme://host[:port]` of a host the preview router serves (ws/wss for a WebSocket)."""
        port = self.preview_url_port if self.preview_url_port is not None else self.preview_port
        default = 443 if self.preview_url_scheme == "https" else 80
        suffix = "" if port in (0, default) else f":{port}"
        scheme = {"http": "ws", "https": "wss"}[self.preview_url_scheme] if websocket else self.preview_url_scheme
        return f"{scheme}://{host}{suffix}"

    @property
    def uses_postgres(self) -> bool:
        return self.database_url.startswith(("postgresql://", "postgres://"))

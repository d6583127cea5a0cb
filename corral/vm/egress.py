"""What every instance gets from boot so that its HTTP(S) goes through the node's egress proxy.

The proxy itself lives in `corral.net.egress`; `vm` does not import `net`. The
composition root hands the driver an `EgressTrust` (the proxy's port and the
egress CA certificate), and each launch then carries the proxy variables in the
instance's environment and the CA for the launcher to install: as its own file
(which `update-ca-certificates` keeps) and appended to the system bundle, so
programs that read the system store, `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE` or
`NODE_EXTRA_CA_CERTS` all trust it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CA_FILE = "/usr/local/share/ca-certificates/corral-egress.crt"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
NO_PROXY = "localhost,127.0.0.1,::1"


@dataclass(frozen=True)
class EgressTrust:
    proxy_port: int
    ca_pem: str

    def env(self, gateway: str) -> dict[str, str]:
        """The variables every process of an instance whose gateway is `gateway` starts with."""
        proxy = f"http://{gateway}:{self.proxy_port}"
        return {
            "HTTP_PROXY": proxy,
            "HTTPS_PROXY": proxy,
            "http_proxy": proxy,
            "https_proxy": proxy,
            "NO_PROXY": NO_PROXY,
            "no_proxy": NO_PROXY,
            "SSL_CERT_FILE": SYSTEM_BUNDLE,
            "REQUESTS_CA_BUNDLE": SYSTEM_BUNDLE,
            "NODE_EXTRA_CA_CERTS": CA_FILE,
        }

    def launch_fields(self) -> dict[str, Any]:
        """The launch request's part: what the launcher writes into the root."""
        return {"trust_ca": {"pem": self.ca_pem, "file": CA_FILE, "bundle": SYSTEM_BUNDLE}}

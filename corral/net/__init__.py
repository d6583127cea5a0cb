"""net layer: instance networking on the host (bridge, veth, addresses, nftables)."""

from .addresses import AddressAllocator, gateway_address
from .dns_check import CnameCheck, NameServer, cname_points_to, parse_name_servers
from .dns_forwarder import DnsForwarder
from .errors import AddressExhausted, NetworkError
from .firewall import Firewall, FirewallConfig
from .links import Netlink
from .network import (
    HOST_NAME,
    Attachment,
    HostNetwork,
    NetworkConfig,
    host_dns_servers,
    instance_key,
)
from .policy import (
    MODES,
    PROTOCOLS,
    UNRESTRICTED,
    NetworkPolicy,
    PolicyError,
    PolicyRule,
    parse_rules,
)

__all__ = [
    "HOST_NAME",
    "MODES",
    "PROTOCOLS",
    "UNRESTRICTED",
    "AddressAllocator",
    "AddressExhausted",
    "Attachment",
    "CnameCheck",
    "DnsForwarder",
    "Firewall",
    "FirewallConfig",
    "HostNetwork",
    "NameServer",
    "Netlink",
    "NetworkConfig",
    "NetworkError",
    "NetworkPolicy",
    "PolicyError",
    "PolicyRule",
    "cname_points_to",
    "gateway_address",
    "host_dns_servers",
    "instance_key",
    "parse_name_servers",
    "parse_rules",
]

"""net layer: instance networking on the host (bridge, veth, addresses, nftables)."""

from .addresses import AddressAllocator
from .errors import AddressExhausted, NetworkError
from .firewall import Firewall, FirewallConfig
from .links import Netlink
from .network import Attachment, HostNetwork, NetworkConfig, host_dns_servers, instance_key

__all__ = [
    "AddressAllocator",
    "AddressExhausted",
    "Attachment",
    "Firewall",
    "FirewallConfig",
    "HostNetwork",
    "Netlink",
    "NetworkConfig",
    "NetworkError",
    "host_dns_servers",
    "instance_key",
]

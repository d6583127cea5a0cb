"""Network policy of instance-owning resources (contract §11): stored per resource,
applied by the net layer to the instance's own nftables chain."""

from . import store
from .messages import RULES_REQUIRED, PutNetworkPolicy, SetNetworkPolicy
from .service import get_policy, policy_public, reset_policy, set_policy
from .store import NetworkPolicyRecord

__all__ = [
    "RULES_REQUIRED",
    "NetworkPolicyRecord",
    "PutNetworkPolicy",
    "SetNetworkPolicy",
    "get_policy",
    "policy_public",
    "reset_policy",
    "set_policy",
    "store",
]

"""What every kind of instance-owning actor shares (DESIGN.md "Instances share one base")."""

from .sealed_env import MAX_VARS, SealedEnv, SealedEnvTable

__all__ = ["MAX_VARS", "SealedEnv", "SealedEnvTable"]

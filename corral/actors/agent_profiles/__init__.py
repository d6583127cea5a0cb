"""Agent runtime profiles (contract §14): records, the HTTP-facing operations, and how
profiles apply to computers (`ProfileResolver`) and to agent runs (`resolve_for_run`)."""

from .resolver import (
    ProfileResolver,
    ResolvedProfile,
    RunProfileResolver,
    bind_secrets,
    default_profile,
    env_name,
    resolve_for_run,
)
from .service import (
    KINDS,
    PROVIDERS,
    NewProfile,
    ProfileChange,
    create_profile,
    decrypt_env,
    delete_profile,
    find_profile,
    list_profiles,
    profile_not_found,
    profile_public,
    update_profile,
)
from .services import ProfileServices
from .store import ProfileRecord

__all__ = [
    "KINDS",
    "PROVIDERS",
    "NewProfile",
    "ProfileChange",
    "ProfileRecord",
    "ProfileResolver",
    "ProfileServices",
    "ResolvedProfile",
    "RunProfileResolver",
    "bind_secrets",
    "create_profile",
    "decrypt_env",
    "default_profile",
    "delete_profile",
    "env_name",
    "find_profile",
    "list_profiles",
    "profile_not_found",
    "profile_public",
    "resolve_for_run",
    "update_profile",
]

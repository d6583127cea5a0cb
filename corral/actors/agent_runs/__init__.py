"""Agent runs (contract §14): a prompt and a command dispatched to a sandbox or a
computer, with durable events, cancellation, output, artifacts and AI usage.

Modules: `actor` (one actor per run: launch, follow, finish, cancel), `store` (runs,
events, artifacts), `service` (what the API calls), `targets` (sandbox or computer),
`commands` (providers' command lines, the output-keeping wrapper), `artifacts`
(capture into the blob store), `signing` (run tokens, signed download URLs),
`profiles` (the runtime-profile interface the profiles part implements).
"""

from . import store
from .actor import AgentRunActor, Cancel, Exited, GetRun, Launch, Lost, TimedOut
from .artifacts import MAX_ARTIFACT_BYTES, MAX_ARTIFACTS
from .commands import BUILTIN_COMMANDS, OUTPUT_CAP, PROVIDERS
from .profiles import ResolvedProfile, RunProfiles, profile_not_found
from .service import (
    DEFAULT_TIMEOUT,
    FILTERS,
    MAX_LIMIT,
    MAX_TIMEOUT,
    USAGE_PATH,
    NewAgentRun,
    UsageReport,
    cancel_run,
    create_run,
    find_run,
    list_runs,
    record_usage,
    resume_runs,
    run_of_bearer,
    run_public,
    usage_url,
)
from .services import AgentRunServices
from .signing import SIGNED_URL_SECONDS, signature_valid, signed_query
from .store import TERMINAL_EVENTS, AgentRunRecord, ArtifactRecord, RunEvent

ACTORS = (AgentRunActor,)

__all__ = [
    "ACTORS",
    "BUILTIN_COMMANDS",
    "DEFAULT_TIMEOUT",
    "FILTERS",
    "MAX_ARTIFACTS",
    "MAX_ARTIFACT_BYTES",
    "MAX_LIMIT",
    "MAX_TIMEOUT",
    "OUTPUT_CAP",
    "PROVIDERS",
    "SIGNED_URL_SECONDS",
    "TERMINAL_EVENTS",
    "USAGE_PATH",
    "AgentRunActor",
    "AgentRunRecord",
    "AgentRunServices",
    "ArtifactRecord",
    "Cancel",
    "Exited",
    "GetRun",
    "Launch",
    "Lost",
    "NewAgentRun",
    "ResolvedProfile",
    "RunEvent",
    "RunProfiles",
    "TimedOut",
    "UsageReport",
    "cancel_run",
    "create_run",
    "find_run",
    "list_runs",
    "profile_not_found",
    "record_usage",
    "resume_runs",
    "run_of_bearer",
    "run_public",
    "signature_valid",
    "signed_query",
    "store",
    "usage_url",
]

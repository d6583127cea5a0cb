"""What every kind of instance-owning actor shares (DESIGN.md "Instances share one base")."""

from .activity import InstanceDraft, record_activity
from .actor import InstanceActor, RunningInstance, failure_summary
from .commands import (
    MAX_COMMAND_BYTES,
    Command,
    CommandEnv,
    commands_without_nul,
    values_without_nul,
)
from .exec_timeout import EXEC_DEFAULT_TIMEOUT, EXEC_MAX_TIMEOUT, ExecTimeout, clamp_timeout
from .files import InstanceFiles
from .idle import IdleWatch, stop_idle, watch_idle
from .messages import Boot, Booted, Connect, Get, MoveAway
from .moving import MovingInstance
from .refusals import Refusals, runtime_refusals
from .sealed_env import MAX_VARS, SealedEnv, SealedEnvTable

__all__ = [
    "EXEC_DEFAULT_TIMEOUT",
    "EXEC_MAX_TIMEOUT",
    "MAX_COMMAND_BYTES",
    "MAX_VARS",
    "Boot",
    "Booted",
    "Command",
    "CommandEnv",
    "Connect",
    "ExecTimeout",
    "Get",
    "IdleWatch",
    "InstanceActor",
    "InstanceDraft",
    "InstanceFiles",
    "MoveAway",
    "MovingInstance",
    "Refusals",
    "RunningInstance",
    "SealedEnv",
    "SealedEnvTable",
    "clamp_timeout",
    "commands_without_nul",
    "failure_summary",
    "record_activity",
    "runtime_refusals",
    "stop_idle",
    "values_without_nul",
    "watch_idle",
]

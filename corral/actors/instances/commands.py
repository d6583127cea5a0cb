"""The fields of a command to run in an instance (exec, a background process), as every
instance kind checks them before the agent is asked: what Linux cannot take is the
caller's mistake (422), said before anything runs, not a failed start."""

from __future__ import annotations

import re
from typing import Annotated

from corral.models import NO_NUL, Rule, anchored

MAX_COMMAND_BYTES = 128 * 1024 - 1
"""`/bin/sh -c` takes the command as one argument, and Linux takes at most 128 KiB
(`MAX_ARG_STRLEN`, its NUL included) for one: a longer script goes in a file."""
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
"""A name a shell can read back (`$name`)."""


def _command_problem(command: str) -> str | None:
    if "\0" in command:
        return "must not contain NUL characters"
    if len(command.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
        return f"must be at most {MAX_COMMAND_BYTES} bytes (a longer script goes in a file)"
    return None


def values_without_nul(env: dict[str, str] | None) -> str | None:
    """The problem of variables a process could not be given (a NUL in a value)."""
    for name, value in (env or {}).items():
        if "\0" in value:
            return f"{name}: a value must not contain NUL characters"
    return None


def commands_without_nul(commands: list[str] | None) -> str | None:
    """The problem of shell commands `/bin/sh -c` could not be given (a NUL)."""
    return "a command must not contain NUL characters" if any("\0" in command for command in commands or []) else None


def _env_problem(env: dict[str, str] | None) -> str | None:
    for name in env or {}:
        if not re.fullmatch(ENV_NAME, name):
            return f"{name!r}: a name is letters, digits and _, not starting with a digit"
    return values_without_nul(env)


Command = Annotated[
    str,
    Rule(
        strip=False,
        check=_command_problem,
        schema={"pattern": anchored(NO_NUL), "maxLength": MAX_COMMAND_BYTES},
        description=f"run as /bin/sh -c; no NUL, at most {MAX_COMMAND_BYTES} bytes",
    ),
]
"""A command line (`command`, `cmd`)."""

CommandEnv = Annotated[
    dict[str, str] | None,
    Rule(
        check=_env_problem,
        schema={"propertyNames": {"pattern": anchored(ENV_NAME)}, "additionalProperties": {"type": "string", "pattern": anchored(NO_NUL)}},
        description="after the instance's own variables; names as a shell reads them, values without NUL",
    ),
]
"""Variables for one command (`env`)."""

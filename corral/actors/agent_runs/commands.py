"""What a run executes: the provider's command line, and the limits of what it leaves.

The command runs under `/bin/sh -c` in the target (contract §14) as a process of the
target's agent, with the prompt on its standard input; the agent keeps the first
`OUTPUT_CAP` bytes of its stdout and of its stderr exactly (and counts the rest),
beside the line logs every process has, so a run's `output` and `stderr` are its
bytes, not lines cut at 16 KiB.
"""

from __future__ import annotations

import shlex

OUTPUT_CAP = 1024 * 1024
"""`output` and `stderr` keep the first 1 MiB (1,048,576 bytes) each."""
NOT_INSTALLED = 127
TIMED_OUT = 124

PROVIDERS = ("osa", "codex", "claude", "claude-code", "pi", "hermes", "custom")

BUILTIN_COMMANDS: dict[str, tuple[str, str]] = {
    "claude": ("claude", 'claude -p "$AGENT_PROMPT" ${AGENT_MODEL:+--model "$AGENT_MODEL"}'),
    "claude-code": ("claude", 'claude -p "$AGENT_PROMPT" ${AGENT_MODEL:+--model "$AGENT_MODEL"}'),
    "codex": ("codex", 'codex exec ${AGENT_MODEL:+--model "$AGENT_MODEL"} "$AGENT_PROMPT"'),
    "osa": ("osa", 'osa run ${AGENT_MODEL:+--model "$AGENT_MODEL"} "$AGENT_PROMPT"'),
    "pi": ("pi", 'pi -p ${AGENT_MODEL:+--model "$AGENT_MODEL"} "$AGENT_PROMPT"'),
    "hermes": ("hermes", 'hermes chat ${AGENT_MODEL:+--model "$AGENT_MODEL"} -q "$AGENT_PROMPT"'),
}
"""provider -> (the CLI it needs, the command line run when no profile gives one)."""


def builtin(provider: str) -> tuple[str, str] | None:
    """(CLI, command line) of a provider that has one."""
    return BUILTIN_COMMANDS.get(provider)


def check_installed(cli: str) -> str:
    """A command that exits 0 when `cli` is on the PATH."""
    return f"command -v {shlex.quote(cli)} >/dev/null 2>&1"

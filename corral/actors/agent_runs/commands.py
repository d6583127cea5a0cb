"""What a run executes: the provider's command line, wrapped so that its output is kept.

The command runs under `/bin/sh -c` in the target (contract §14). The wrapper around
it (itself the process the target's agent spawns) feeds the prompt on stdin and
copies stdout and stderr into files under the run's directory, each cut after
`OUTPUT_CAP + 1` bytes (the extra byte says the output was cut), while passing them
through to the process's own logs; the rest of a larger output is read and
dropped, so the command never blocks or dies of a closed pipe. The wrapper exits
with the command's status. Files rather than the agent's line logs, because those
keep lines (cut at 16 KiB) rather than bytes.
"""

from __future__ import annotations

import shlex

OUTPUT_CAP = 1024 * 1024
"""`output` and `stderr` keep the first 1 MiB each."""
RUN_DIR = "/tmp/.corral-runs"
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


def run_dir(run_id: str) -> str:
    return f"{RUN_DIR}/{run_id}"


def wrapper(run_id: str) -> str:
    """The shell program the target spawns for run `run_id`; the command is in
    `$CORRAL_RUN_COMMAND`, the prompt in `$AGENT_PROMPT`."""
    d = shlex.quote(run_dir(run_id))
    keep = OUTPUT_CAP + 1
    return (
        f"d={d}; mkdir -p \"$d\" || exit 1; "
        "c=$CORRAL_RUN_COMMAND; unset CORRAL_RUN_COMMAND; "
        "{ { printf '%s' \"$AGENT_PROMPT\" | /bin/sh -c \"$c\" 2>&1 1>&3 3>&-; echo $? > \"$d/exit\"; } "
        f"| {{ head -c {keep} | tee \"$d/stderr\" >&2; cat > /dev/null; }}; }} 3>&1 "
        f"| {{ head -c {keep} | tee \"$d/stdout\"; cat > /dev/null; }}; "
        "s=$(cat \"$d/exit\" 2>/dev/null); exit \"${s:-1}\""
    )


def builtin(provider: str) -> tuple[str, str] | None:
    """(CLI, command line) of a provider that has one."""
    return BUILTIN_COMMANDS.get(provider)


def check_installed(cli: str) -> str:
    """A command that exits 0 when `cli` is on the PATH."""
    return f"command -v {shlex.quote(cli)} >/dev/null 2>&1"

"""The `corral` commands that talk to a server through `corral.client`: login,
sandboxes, exec, files, processes, logs, previews, computers, deployments,
databases, agent runs, and shell completion.

`corral.cli` adds them beside `serve` and `templates`; `run` executes one with the
CLI's rules: tables or `--json`, every error as one line
`error: CODE: message (request req_...)` and exit status 1, never a traceback."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from corral.client import CorralError

from . import admin, completion, computers, core, platform, sandboxes, templates
from .context import Context
from .output import Console

__all__ = ["CLIENT_COMMANDS", "Console", "parse", "register", "run"]

CLIENT_COMMANDS = frozenset(
    {
        "login", "logout", "whoami", "sandboxes", "exec", "files", "processes", "logs", "previews",
        "computers", "deployments", "databases", "agent-runs", "sandbox-templates", "completion", "admin",
    }
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    core.register(sub)
    sandboxes.register(sub)
    computers.register(sub)
    platform.register(sub)
    templates.register(sub)
    admin.register(sub)
    completion.register(sub, root)


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse `argv`; everything after the first `--` is the command of `exec` and its
    kin, taken verbatim (argparse's own `--` handling under subcommands is unreliable)."""
    if "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        if hasattr(args, "argv"):
            args.argv = [*(args.argv or []), *argv[cut + 1 :]]
            return args
        return parser.parse_args(argv)
    return parser.parse_args(argv)


def run(args: argparse.Namespace, console: Console | None = None, env: Mapping[str, str] | None = None) -> int:
    console = console or Console()
    console.as_json = bool(getattr(args, "json", False))
    ctx = Context(args, console, os.environ if env is None else env)
    try:
        return int(args.handler(ctx))
    except CorralError as error:
        console.error(error.one_line())
        return 1
    except KeyboardInterrupt:
        console.error("interrupted")
        return 130
    except (OSError, ValueError, TimeoutError) as error:
        console.error(str(error) or type(error).__name__)
        return 1
    except Exception as error:  # anything else is still one line; CORRAL_DEBUG=1 shows where
        if ctx.env.get("CORRAL_DEBUG"):
            raise
        console.error(f"{type(error).__name__}: {error}")
        return 1
    finally:
        ctx.close()

"""What a command handler gets: its arguments, the console, the environment, and a
client made on first use (so `corral completion` needs no server)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.client import Client

from .output import Console
from .session import client_for

__all__ = ["Context", "Handler", "key_values", "leaf"]


@dataclass
class Context:
    args: argparse.Namespace
    console: Console
    env: Mapping[str, str]
    _client: Client | None = field(default=None, repr=False)

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = client_for(self.args, self.env)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


Handler = Callable[[Context], int]


def common_options() -> argparse.ArgumentParser:
    """Options every client command takes, after its own arguments."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the server's JSON instead of a table")
    common.add_argument("--url", default=None, help="API URL (CORRAL_API_URL, else `corral login`'s, else http://127.0.0.1:8080)")
    common.add_argument("--api-key", default=None, help="API key (CORRAL_API_KEY, else `corral login`'s)")
    return common


COMMON = common_options()


def leaf(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, handler: Handler, help: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """A command parser with the common options, that runs `handler`."""
    parser = actions.add_parser(name, help=help, description=help, parents=[COMMON], **kwargs)
    parser.set_defaults(handler=handler)
    return parser


def key_values(pairs: list[str] | None, what: str = "KEY=VALUE") -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected {what}, got {pair!r}")
        out[key] = value
    return out

"""The client a command uses: `--url` and `--api-key`, else the environment, else
what `corral login` stored."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from corral.client import Client, load_credentials

__all__ = ["client_for"]


def client_for(args: argparse.Namespace, env: Mapping[str, str]) -> Client:
    credentials = load_credentials(getattr(args, "url", None), getattr(args, "api_key", None), env)
    # Shorter backoff than a library's: a person is waiting for the answer (3 retries in about 2 s).
    return Client(credentials.url, credentials.api_key, timeout=60.0, backoff=0.25)

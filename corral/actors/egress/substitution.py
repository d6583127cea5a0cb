"""Placeholders in, values out: pure functions the egress proxy applies to one request.

An instance holds only `svc-tok-...` placeholders. On the way out, a placeholder in
any request header becomes its secret's value, but only when the destination matches
the secret's `allowed_hosts` (any host when the list is empty) and the secret is bound
to the requesting resource (the caller passes only those: a placeholder of another
binding, resource or tenant is not in `bound` and is left as it is). On the way back,
`Scrubber` turns every value that was substituted into its placeholder again, so a
response echoing the secret reaches the instance without it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .decision import host_matches

PLACEHOLDER_PREFIX = "svc-tok-"
PLACEHOLDER_PATTERN = re.compile(r"svc-tok-[A-Za-z0-9]{32}")


@dataclass(frozen=True)
class BoundSecret:
    """One secret a resource may use, with its placeholder and plaintext value."""

    secret_id: str
    placeholder: str
    value: str = field(repr=False)
    allowed_hosts: tuple[str, ...] = ()

    def allows(self, host: str) -> bool:
        if not self.allowed_hosts:
            return True
        return any(
            host_matches(pattern, "wildcard" if pattern.startswith("*.") else "exact", host)
            for pattern in self.allowed_hosts
        )


@dataclass(frozen=True)
class Substitution:
    headers: list[tuple[str, str]]
    """The request's headers as they go upstream."""
    request_transforms: list[dict[str, Any]]
    """`{type: "placeholder", header, secret_id}` per replaced header (never a value)."""
    refused: tuple[str, ...] = ()
    """Secret ids whose placeholder was left because the host is outside `allowed_hosts`."""
    used: tuple[BoundSecret, ...] = ()
    """The secrets whose values went upstream: what the response scrubber hides."""


def substitute(headers: Sequence[tuple[str, str]], bound: Iterable[BoundSecret], host: str) -> Substitution:
    """Replace the placeholders of `bound` secrets in `headers` towards `host`."""
    by_placeholder = {secret.placeholder: secret for secret in bound}
    out: list[tuple[str, str]] = []
    transforms: list[dict[str, Any]] = []
    refused: dict[str, None] = {}
    used: dict[str, BoundSecret] = {}
    for name, value in headers:
        def replace(match: re.Match[str], header: str = name) -> str:
            secret = by_placeholder.get(match.group(0))
            if secret is None:
                return match.group(0)
            if not secret.allows(host):
                refused[secret.secret_id] = None
                return match.group(0)
            used[secret.secret_id] = secret
            transforms.append({"type": "placeholder", "header": header.lower(), "secret_id": secret.secret_id})
            return secret.value

        out.append((name, PLACEHOLDER_PATTERN.sub(replace, value) if PLACEHOLDER_PREFIX in value else value))
    return Substitution(out, transforms, tuple(refused), tuple(used.values()))


class Scrubber:
    """Replaces secret values with their placeholders in a response, chunk by chunk.

    It holds back the last `longest value - 1` bytes of each chunk, so a value split
    across two chunks is still found; `flush` gives the rest at the end of the body.
    """

    def __init__(self, secrets: Iterable[BoundSecret]) -> None:
        self._pairs = sorted(
            ((secret.value.encode(), secret.placeholder.encode()) for secret in secrets if secret.value),
            key=lambda pair: -len(pair[0]),
        )
        self._keep = max((len(value) for value, _ in self._pairs), default=1) - 1
        self._pending = b""
        self.replaced = 0

    @property
    def active(self) -> bool:
        return bool(self._pairs)

    def _scrub(self, data: bytes) -> bytes:
        for value, placeholder in self._pairs:
            count = data.count(value)
            if count:
                self.replaced += count
                data = data.replace(value, placeholder)
        return data

    def feed(self, chunk: bytes) -> bytes:
        """The scrubbed bytes that can be sent now."""
        if not self._pairs:
            return chunk
        data = self._scrub(self._pending + chunk)
        if self._keep <= 0:
            self._pending = b""
            return data
        self._pending = data[-self._keep :]
        return data[: -self._keep]

    def flush(self) -> bytes:
        data, self._pending = self._scrub(self._pending), b""
        return data

    def text(self, value: str) -> str:
        """A whole value at once (a response header)."""
        return self._scrub(value.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

    def headers(self, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(name, self.text(value)) for name, value in headers]

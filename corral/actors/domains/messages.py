"""Messages of the custom-domain actor, and the draft a new domain is made from."""

from __future__ import annotations

from dataclasses import dataclass

from corral.actors.messages import Message

from .targets import DomainTarget


@dataclass(frozen=True)
class DomainDraft:
    fqdn: str
    target: DomainTarget
    verification_target: str


@dataclass(frozen=True)
class Verify(Message):
    """Ask DNS for the CNAME now: `verified`, or 422 `CNAME not found`."""


@dataclass(frozen=True)
class MarkIssued(Message):
    """The first HTTPS request reached the router through the edge: `active`."""

    at: str


@dataclass(frozen=True)
class Remove(Message):
    """Stop routing it (DELETE, or its computer or deployment is gone)."""

"""Network exceptions: plain; the actor layer's one table says which API answer each is."""

from __future__ import annotations


class NetworkError(Exception):
    """A link, namespace or firewall operation failed."""


class AddressExhausted(NetworkError):
    """No free address is left in the instances' range."""

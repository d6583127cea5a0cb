"""Network exceptions, with the API code the actor layer maps them to."""

from __future__ import annotations

from corral.errors import CorralError


class NetworkError(CorralError):
    """A link, namespace or firewall operation failed."""

    code = "INTERNAL_ERROR"
    status = 500


class AddressExhausted(NetworkError):
    """No free address is left in the instances' range."""

    code = "SERVICE_UNAVAILABLE"
    status = 503

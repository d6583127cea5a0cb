"""Browser tokens (`mbt_`, contract §16): bearer credentials scoped to one sandbox."""

from .service import (
    DEFAULT_TTL,
    MAX_TTL,
    PREFIX,
    TICKET_PURPOSE,
    BrowserGrant,
    NewBrowserToken,
    authenticate,
    check_route,
    mint,
    ticket_purpose,
)
from .store import BrowserTokenRecord

__all__ = [
    "DEFAULT_TTL",
    "MAX_TTL",
    "PREFIX",
    "TICKET_PURPOSE",
    "BrowserGrant",
    "BrowserTokenRecord",
    "NewBrowserToken",
    "authenticate",
    "check_route",
    "mint",
    "ticket_purpose",
]

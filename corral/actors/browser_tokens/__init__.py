"""Browser tokens (`mbt_`, contract §16): bearer credentials scoped to one sandbox."""

from .service import (
    DEFAULT_TTL,
    MAX_TTL,
    PREFIX,
    BrowserGrant,
    NewBrowserToken,
    authenticate,
    check_route,
    mint,
)
from .store import BrowserTokenRecord

__all__ = [
    "DEFAULT_TTL",
    "MAX_TTL",
    "PREFIX",
    "BrowserGrant",
    "BrowserTokenRecord",
    "NewBrowserToken",
    "authenticate",
    "check_route",
    "mint",
]

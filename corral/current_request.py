"""The API request being served, for whatever runs on its behalf.

Set by the HTTP layer for the whole handling of a request (`corral.http.observe`), read
by the log formatter and the span processor, and carried by every actor message sent
while it is set (`corral.actors.messages.Envelope`), so that the actor's handler, which
runs in the actor's own task, logs and traces as part of the request too. Here, below
every layer, because the layers below HTTP may carry it but not import HTTP.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("corral_request", default=None)


def current() -> Any:
    """The request's record (`corral.http.observe.RequestRecord`), or None outside one."""
    return _current.get()


def enter(record: Any) -> contextvars.Token[Any]:
    """`record` is the current request until `leave` with the token."""
    return _current.set(record)


def leave(token: contextvars.Token[Any]) -> None:
    _current.reset(token)


@contextlib.contextmanager
def serving(record: Any) -> Iterator[None]:
    """`record` is the current request within the block (None: no request)."""
    token = enter(record)
    try:
        yield
    finally:
        leave(token)

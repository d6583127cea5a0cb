"""Runtime errors as API answers: the one table every instance kind maps through.

A runtime error inside a handler is the caller's answer (a 409 for a state the
runtime refuses, a 502 for an agent that does not answer), not a crash of the actor.
The runtime speaks of instances; each kind words "not running" and "gone" its own
way, so those two are the kind's; every other error gets the answer of the one
table, `corral.actors.runtime_errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from corral.actors.runtime_errors import api_error_for
from corral.errors import ApiError
from corral.vm import InstanceNotFound, InstanceNotRunning, RuntimeErrorBase, RuntimeUnavailable


@dataclass(frozen=True)
class Refusals:
    """How one kind words the runtime's refusals; None keeps the runtime's own words."""

    not_running: ApiError | None = None
    """For an instance that is not running or has no address yet."""
    instance_gone: ApiError | None = None
    """For an instance the runtime no longer has."""

    def not_running_error(self) -> ApiError | None:
        """A fresh `not_running` to raise, or None when the kind keeps the runtime's words."""
        return None if self.not_running is None else _copy(self.not_running)


@contextlib.contextmanager
def runtime_refusals(refusals: Refusals) -> Iterator[None]:
    try:
        yield
    except RuntimeErrorBase as exc:
        if isinstance(exc, InstanceNotFound) and refusals.instance_gone is not None:
            raise _copy(refusals.instance_gone) from exc
        if isinstance(exc, (InstanceNotRunning, RuntimeUnavailable)) and refusals.not_running is not None:
            raise _copy(refusals.not_running) from exc
        raise api_error_for(exc) from exc


def _copy(error: ApiError) -> ApiError:
    """A fresh exception each time: one raised object must not collect tracebacks across requests."""
    return ApiError(error.status, error.code, error.message, details=error.details)

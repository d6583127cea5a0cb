"""Transition tables: (state, message type) -> next state, as the spec's tables read.

Anything not in the table is refused with a 409 `ApiError`, with the spec's code and
message for that message type (e.g. `INVALID_STATE` / `computer cannot be started
from its current status`) or the table's default refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from corral.errors import ApiError, conflict

#: A refusal: `(code, message)` for a 409, or a function building the error.
Refusal = tuple[str, str] | Callable[[str, Any], ApiError]
#: A row key: one state or several states (any iterable of them), and a message type.
StateKey = str | Iterable[str]

ANY_STATE = "*"


def _default_refusal(state: str, message: Any) -> ApiError:
    return conflict("INVALID_STATE", f"{type(message).__name__} is not allowed in state {state}")


class TransitionTable:
    """A state machine declared as data::

        TransitionTable(
            {
                ("stopped", Start): "running",
                (("running", "starting"), Stop): "stopped",
                ("*", Delete): "deleted",           # "*": from any state
            },
            refusals={
                Start: ("INVALID_STATE", "computer cannot be started from its current status"),
                Stop: ("INVALID_STATE", "computer cannot be stopped from its current status"),
            },
        )

    `next_state(state, message)` returns the next state or raises the refusal.
    """

    def __init__(
        self,
        rows: Mapping[tuple[StateKey, type], str],
        *,
        refusals: Mapping[type, Refusal] | None = None,
        default: Callable[[str, Any], ApiError] = _default_refusal,
    ) -> None:
        self._rows: dict[tuple[str, type], str] = {}
        for (states, message_type), target in rows.items():
            for state in [states] if isinstance(states, str) else states:
                self._rows[(state, message_type)] = target
        self._refusals = dict(refusals or {})
        self._default = default

    def _lookup(self, state: str, message_type: type) -> str | None:
        for klass in message_type.__mro__:
            for key in ((state, klass), (ANY_STATE, klass)):
                if key in self._rows:
                    return self._rows[key]
        return None

    def allows(self, state: str, message_type: type) -> bool:
        return self._lookup(state, message_type) is not None

    def next_state(self, state: str, message: Any) -> str:
        target = self._lookup(state, type(message))
        if target is not None:
            return target
        raise self.refusal(state, message)

    def refusal(self, state: str, message: Any) -> ApiError:
        for klass in type(message).__mro__:
            refusal = self._refusals.get(klass)
            if refusal is None:
                continue
            if isinstance(refusal, tuple):
                code, text = refusal
                return conflict(code, text)
            return refusal(state, message)
        return self._default(state, message)

    def allowed_messages(self, state: str) -> list[type]:
        """Message types accepted in `state` (for introspection and docs)."""
        return [m for (s, m) in self._rows if s in (state, ANY_STATE)]

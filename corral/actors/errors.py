"""Errors the actor kernel raises to callers.

They are `ApiError`s so the HTTP layer renders them with its ordinary envelope and
so that an actor which asks another actor and gets one of these treats it as a
refusal, not as its own crash: one resource's crash never cascades into another's.
"""

from __future__ import annotations

from corral.errors import ApiError


class ActorError(ApiError):
    """Base class of the kernel's own errors; `kind` and `actor_id` name the actor."""

    def __init__(self, status: int, code: str, message: str, kind: str, actor_id: str) -> None:
        super().__init__(status, code, message)
        self.kind = kind
        self.actor_id = actor_id


class ActorCrashed(ActorError):
    """The actor crashed while this message was handled or waited in its mailbox.

    `__cause__` is the unexpected exception (when this caller's message caused it).
    """

    def __init__(self, kind: str, actor_id: str, error: BaseException | None = None) -> None:
        detail = f": {type(error).__name__}" if error is not None else ""
        super().__init__(500, "INTERNAL_ERROR", f"the {kind} actor crashed{detail}", kind, actor_id)
        self.error = error


RETIRED = "now on another node; send the request again"
"""Why a retired actor (what it owned lives on another node now) refuses its queued
messages: the same request, sent again, is forwarded to the new home."""


class ActorStopped(ActorError):
    """The actor (or the whole system) is shutting down and refuses new work."""

    def __init__(self, kind: str, actor_id: str, reason: str = "shutting down") -> None:
        super().__init__(
            503, "SERVICE_UNAVAILABLE", f"the {kind} actor is {reason}", kind, actor_id
        )


class MailboxFull(ActorError):
    """`tell` found the mailbox full: the message was not delivered."""

    def __init__(self, kind: str, actor_id: str) -> None:
        super().__init__(503, "ACTOR_BUSY", f"the {kind} actor is busy; try again", kind, actor_id)
        self.headers = {"Retry-After": "1"}


class AskTimeout(ActorError):
    """`ask` gave up after its timeout; a message not yet started is then skipped."""

    def __init__(self, kind: str, actor_id: str, timeout: float) -> None:
        super().__init__(
            504, "TIMEOUT", f"the {kind} actor did not answer within {timeout:g} s", kind, actor_id
        )

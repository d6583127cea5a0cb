"""The actor kernel: one actor per resource, a bounded mailbox, one message at a time.

Public surface (see DESIGN.md "Actors" and each module's docstring):

- `ActorSystem`, `open_actor_system`, `ActorConfig`: registry, activation on demand,
  passivation, graceful-then-hard shutdown, introspection;
- `Actor`, `RecordActor`, `handles`, `NEVER`: what resource actors subclass;
- `Message`, `TransitionTable`: messages and declared state machines;
- `ActorRef`: `ask` / `tell`;
- `EventBus`, `Subscription`, `SubscriberLagged`, `event_filter`: persisted events
  fanned out to SSE streams and the webhook dispatcher;
- errors: `ActorError`, `ActorCrashed` (500), `ActorStopped` (503), `MailboxFull`
  (503), `AskTimeout` (504), all `ApiError`s.
"""

from corral.actors.actor import NEVER, Actor, handles
from corral.actors.bus import EventBus, SubscriberLagged, Subscription, event_filter
from corral.actors.errors import ActorCrashed, ActorError, ActorStopped, AskTimeout, MailboxFull
from corral.actors.messages import Message
from corral.actors.record import RecordActor
from corral.actors.ref import ActorRef
from corral.actors.supervisor import CellStatus, SupervisionPolicy
from corral.actors.system import ActorConfig, ActorSystem, open_actor_system
from corral.actors.transitions import ANY_STATE, TransitionTable

__all__ = [
    "ANY_STATE",
    "NEVER",
    "Actor",
    "ActorConfig",
    "ActorCrashed",
    "ActorError",
    "ActorRef",
    "ActorStopped",
    "ActorSystem",
    "AskTimeout",
    "CellStatus",
    "EventBus",
    "MailboxFull",
    "Message",
    "RecordActor",
    "SubscriberLagged",
    "Subscription",
    "SupervisionPolicy",
    "TransitionTable",
    "event_filter",
    "handles",
    "open_actor_system",
]

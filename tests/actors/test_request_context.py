"""An actor's handler runs as part of the request whose message it handles
(`corral.current_request`): its log lines carry the request, its spans join its trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from corral import current_request
from corral.actors import Actor, ActorSystem, Message, handles


@dataclass(frozen=True)
class WhoAsks(Message):
    pass


class Echo(Actor):
    kind = "echo-request"

    async def on_activate(self) -> None:
        self.state = "running"
        self.mark_persisted()

    @handles(WhoAsks)
    async def who(self, message: WhoAsks) -> tuple[Any, Any]:
        return current_request.current(), trace.get_current_span().get_span_context().trace_id


async def test_a_handler_sees_the_request_and_trace_of_its_sender(system: ActorSystem) -> None:
    ref = await system.get(Echo, "one")
    assert (await ref.ask(WhoAsks()))[0] is None  # outside a request: none
    record = object()
    tracer = TracerProvider().get_tracer(__name__)
    with current_request.serving(record), tracer.start_as_current_span("request") as span:
        seen, trace_id = await ref.ask(WhoAsks())
    assert seen is record and trace_id == span.get_span_context().trace_id
    assert (await ref.ask(WhoAsks()))[0] is None  # and the actor does not keep it

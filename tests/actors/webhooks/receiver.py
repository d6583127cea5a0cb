"""A real HTTPS webhook receiver on loopback, with a certificate from a `trustme` CA.

Each path can be scripted: a list of statuses answered in order (then 200), a
delay before answering, or a gate the answers wait behind until the test opens it. `verify_signatures` checks both signatures with hmac and
base64 directly, independently of `corral.actors.webhooks.signing`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trustme
from hypercorn.config import Config
from hypercorn.trio import serve

from tests.support import free_port


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: float
    """`trio.current_time()` when the request had arrived in full."""

    @property
    def json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.body)
        return value

    @property
    def event_id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class Receiver:
    port: int
    ca_path: Path
    requests: list[Received] = field(default_factory=list)
    scripts: dict[str, list[int]] = field(default_factory=dict)
    delays: dict[str, float] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    gates: dict[str, trio.Event] = field(default_factory=dict)
    arrivals: Counter[str] = field(default_factory=Counter)
    """Requests by path that arrived in full, answered or not yet."""
    _changed: trio.Event = field(default_factory=trio.Event)

    def url(self, path: str = "/hook", host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{path}"

    def script(self, path: str, statuses: list[int]) -> None:
        """Answer the next requests to `path` with `statuses`, in order, then 200."""
        self.scripts[path] = list(statuses)

    def hold(self, path: str) -> trio.Event:
        """Answer nothing on `path` until the returned event is set."""
        gate = self.gates[path] = trio.Event()
        return gate

    def to(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    def delivered(self, path: str | None = None) -> list[Received]:
        return [r for r in self.requests if 200 <= r.status < 300 and (path is None or r.path == path)]

    async def wait_for(self, predicate: Any, timeout: float = 20.0) -> None:
        with trio.fail_after(timeout):
            while not predicate():
                await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        arrived = trio.current_time()
        self.arrivals[path] += 1
        self._notify()
        await trio.sleep(self.delays.get(path, 0.0))
        if path in self.gates:
            await self.gates[path].wait()
        script = self.scripts.get(path)
        status = script.pop(0) if script else 200
        headers = [(b"content-type", b"text/plain")]
        if path in self.redirects:
            status = 307
            headers.append((b"location", self.redirects[path].encode()))
        received = Received(
            path=path,
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            body=body,
            status=status,
            at=arrived,
        )
        self.requests.append(received)
        self._notify()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})


def make_ca(directory: Path) -> tuple[trustme.CA, Path]:
    ca = trustme.CA()
    ca_path = directory / "receiver-ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    return ca, ca_path


@contextlib.asynccontextmanager
async def https_receiver(directory: Path, ca: trustme.CA | None = None) -> AsyncIterator[Receiver]:
    """A receiver for `localhost`, `127.0.0.1` and `::1`; its CA is in `receiver.ca_path`."""
    directory.mkdir(parents=True, exist_ok=True)
    if ca is None:
        ca, ca_path = make_ca(directory)
    else:
        ca_path = directory / "receiver-ca.pem"
        ca.cert_pem.write_to_path(str(ca_path))
    cert = ca.issue_cert("localhost", "127.0.0.1", "::1")
    cert_path, key_path = directory / "receiver-cert.pem", directory / "receiver-key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(cert_path), append=True)
    cert.private_key_pem.write_to_path(str(key_path))
    receiver = Receiver(port=free_port(), ca_path=ca_path)
    config = Config()
    config.bind = [f"127.0.0.1:{receiver.port}"]
    config.certfile = str(cert_path)
    config.keyfile = str(key_path)
    config.accesslog = None
    config.graceful_timeout = 0.5
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(serve, receiver.app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
        try:
            yield receiver
        finally:
            stop.set()


def verify_signatures(secret: str, received: Received, *, tolerance: float = 300.0) -> None:
    """Both signatures of contract §5, recomputed from the secret with hmac and base64 only."""
    body = received.body
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(received.headers["x-service-signature"], expected), "X-Service-Signature mismatch"

    message_id = received.headers["webhook-id"]
    timestamp = received.headers["webhook-timestamp"]
    assert abs(int(timestamp) - time.time()) < tolerance, "webhook-timestamp too far from now"
    assert secret.startswith("whsec_")
    key = base64.b64decode(secret[len("whsec_"):])
    signed = message_id.encode() + b"." + timestamp.encode() + b"." + body
    wanted = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = [part.split(",", 1)[1] for part in received.headers["webhook-signature"].split() if part.startswith("v1,")]
    assert any(hmac.compare_digest(candidate, wanted) for candidate in offered), "webhook-signature mismatch"

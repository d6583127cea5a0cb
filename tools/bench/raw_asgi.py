"""The baselines: a raw ASGI hello world, on hypercorn's trio worker (the issue's
baseline: `hypercorn --worker-class trio tools.bench.raw_asgi:app`) and on Corral's
own HTTP/1.1 server (`python -m tools.bench.raw_asgi PORT`), so that a run shows
what the server costs apart from what Corral's handling costs."""

from __future__ import annotations

import sys
from typing import Any

BODY = b'{"status":"ok"}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": BODY})


def main() -> None:
    import trio

    from corral.asgi_server import ServerConfig, serve

    port = int(sys.argv[1])
    trio.run(lambda: serve(app, ServerConfig("127.0.0.1", port), shutdown_trigger=trio.sleep_forever))


if __name__ == "__main__":
    main()

"""Reports which of the modules a plain HTTP server should never need are loaded.

``GET /`` and a WebSocket (its one message, then a close) both answer with the JSON list
of the names in `WATCHED` found in ``sys.modules`` of the serving process.
"""

import json
import sys

# zigcorn's own modules that only some servers use, and what only the CLI's parsing or
# TLS would import.
WATCHED = (
    "zigcorn.protocols.websocket", "zigcorn.tls", "zigcorn.protocols.wsgi", "zigcorn.supervisors.multiprocess",
    "zigcorn.supervisors.reload", "zigcorn.warmup", "zigcorn.workers", "argparse", "gettext", "tomllib", "ssl", "_ssl",
)


def loaded() -> bytes:
    return json.dumps([name for name in WATCHED if name in sys.modules]).encode()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "bytes": loaded()})
        await send({"type": "websocket.close", "code": 1000})
        return
    body = loaded()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

"""Keeps the request-id header of every request: the (name, value) tuple itself on `/tuple`,
the value alone on `/value`; answers with the kept values, oldest first. The engine reuses
these objects when nothing else holds them, so an app that keeps one must see it unchanged."""

import json

KEPT_TUPLES = []
KEPT_VALUES = []


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    pair = next(p for p in scope["headers"] if p[0] == b"x-request-id")
    if scope["path"] == "/tuple":
        KEPT_TUPLES.append(pair)
        kept = [p[1].decode() for p in KEPT_TUPLES]
    else:
        KEPT_VALUES.append(pair[1])
        kept = [v.decode() for v in KEPT_VALUES]
    body = json.dumps(kept).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

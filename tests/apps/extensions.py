"""A raw ASGI app for the response extensions: early hints and trailers, used well and badly.

Paths:
  /hints              two 103s (two links, then one), then 200 "done"
  /hint-late          start, then an early hint: the engine refuses it (reported in the body)
  /trailers           chunked body in two parts, then trailers in two messages
  /trailers-short     a one-message body, then one trailers message
  /trailers-forbidden body, then a trailer named content-length (an app error)
  /trailers-early     trailers before the body ended (an app error)
  /trailers-undeclared trailers without "trailers": True (an app error)
  /trailers-missing   trailers declared, the app returns without sending them
  /scope              the scope's extension names
"""

import json

from tests.apps import hello


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await hello.app(scope, receive, send)
    path = scope["path"]
    if path == "/hints":
        await send({"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload; as=style", b"</b.js>; rel=preload; as=script"]})
        await send({"type": "http.response.early_hint", "links": ["</c.png>; rel=preload; as=image"]})
        await _plain(send, b"done")
    elif path == "/hint-late":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        try:
            await send({"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload"]})
            outcome = b"sent"
        except RuntimeError as exc:
            outcome = str(exc).encode()
        await send({"type": "http.response.body", "body": outcome})
    elif path.startswith("/trailers"):
        await _trailers(path, send)
    elif path == "/scope":
        await _plain(send, json.dumps(sorted(scope.get("extensions", {}))).encode())
    else:
        await _plain(send, b"not found", 404)


async def _plain(send, body: bytes, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


async def _trailers(path: str, send) -> None:
    declared = path != "/trailers-undeclared"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")],
                "trailers": declared})
    if path == "/trailers-early":
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"1")]})
        return
    if path == "/trailers":
        await send({"type": "http.response.body", "body": b"hello ", "more_body": True})
        await send({"type": "http.response.body", "body": b"world"})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")], "more_trailers": True})
        await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0"), (b"grpc-message", b"ok")]})
        return
    await send({"type": "http.response.body", "body": b"short"})
    if path == "/trailers-missing":
        return
    name = b"content-length" if path == "/trailers-forbidden" else b"x-checksum"
    await send({"type": "http.response.trailers", "headers": [(name, b"5")]})

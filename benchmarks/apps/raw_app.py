"""Raw ASGI app, no framework: the same routes and bodies as ``fastapi_app``.

``GET /``                  -> ``{"message": "Hello, world!"}``
``GET /items/{id}?q=...``  -> ``{"item_id": id, "q": q}``  (``q`` is ``null`` when absent)
"""

import json
from urllib.parse import parse_qs

HELLO = b'{"message":"Hello, world!"}'
JSON_HEADERS = [(b"content-type", b"application/json")]


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _respond(send, status: int, body: bytes) -> None:
    headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _item(path: str, query_string: bytes) -> bytes | None:
    item_id = path[len("/items/"):]
    if not item_id.isdigit():
        return None
    q = parse_qs(query_string.decode("latin-1")).get("q", [None])[0]
    return json.dumps({"item_id": int(item_id), "q": q}, separators=(",", ":")).encode()


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    path = scope["path"]
    if path == "/" and scope["method"] == "GET":
        await _respond(send, 200, HELLO)
        return
    if path.startswith("/items/") and scope["method"] == "GET":
        body = _item(path, scope["query_string"])
        if body is not None:
            await _respond(send, 200, body)
            return
    await _respond(send, 404, b'{"detail":"Not Found"}')

"""Responses for tests/content/test_compression.py: the query string picks the body, type and headers."""

import json
from urllib.parse import parse_qs

DOC = json.dumps([{"id": i, "name": f"item {i}", "tags": ["a", "b", "c"]} for i in range(600)]).encode()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    q = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    size = int(q.get("size", len(DOC)))
    body = (DOC * (size // len(DOC) + 1))[:size]
    headers = [(b"content-type", q.get("type", "application/json").encode())]
    for name in ("etag", "vary", "cache-control", "content-encoding"):
        if name in q:
            headers.append((name.encode(), q[name].encode()))
    if "length" in q:
        headers.append((b"content-length", str(len(body)).encode()))
    status = int(q.get("status", 200))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if "raise" in q:
        raise RuntimeError("failed after the response started")
    if "nobody" in q:
        return
    if "chunks" in q:
        n = int(q["chunks"])
        step = len(body) // n + 1
        for i in range(0, len(body), step):
            await send({"type": "http.response.body", "body": body[i:i + step], "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    else:
        await send({"type": "http.response.body", "body": body})

"""An app for the HTTP/2 tests: concurrency, bodies both ways, resets, trailers.

Paths:
  /                  "hello"
  /scope             the scope's http_version, scheme, path, query and headers as JSON
  /echo              reads the whole body; answers its length and sha256 as JSON
  /download?size=N   N bytes (a repeating pattern) in 64 KiB messages
  /barrier?n=N&key=K waits until N requests (of key K) are inside at once (10 s at most): 200 "met" or 504
  /slow?ms=N         sleeps N ms, then "slept"
  /forever           streams 16 KiB messages until the client goes (counts disconnects)
  /wait-disconnect   waits for http.disconnect (counts it)
  /stats             counters as JSON
  /trailers          a body in two parts, then trailers
  /hints             a 103 early hint, then "done"
  /big-head?n=N      "big" under a response header x-big of N bytes (a head larger than the output's pause mark)
"""

import asyncio
import hashlib
import json
from urllib.parse import parse_qs

from tests.apps import hello

PATTERN = bytes(range(256)) * 256  # 64 KiB
stats = {"disconnects": 0}
_inside: dict[str, int] = {}
_arrived = asyncio.Condition()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await hello.app(scope, receive, send)
    path = scope["path"]
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    if path == "/":
        await _plain(send, b"hello")
    elif path == "/scope":
        info = {
            "http_version": scope["http_version"],
            "scheme": scope["scheme"],
            "path": scope["path"],
            "query_string": scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            "extensions": sorted(scope.get("extensions", {})),
        }
        await _plain(send, json.dumps(info).encode(), b"application/json")
    elif path == "/echo":
        digest = hashlib.sha256()
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            digest.update(message.get("body", b""))
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await _plain(send, json.dumps({"size": size, "sha256": digest.hexdigest()}).encode(), b"application/json")
    elif path == "/download":
        size = int(query.get("size", "0"))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", str(size).encode())]})
        sent = 0
        while sent < size:
            chunk = PATTERN[: min(len(PATTERN), size - sent)]
            sent += len(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": sent < size})
        if size == 0:
            await send({"type": "http.response.body", "body": b""})
    elif path == "/barrier":
        n, key = int(query.get("n", "1")), query.get("key", "")
        async with _arrived:
            _inside[key] = _inside.get(key, 0) + 1
            _arrived.notify_all()
            try:
                await asyncio.wait_for(_arrived.wait_for(lambda: _inside[key] >= n), 10)
                met = True
            except asyncio.TimeoutError:
                met = False
        await _plain(send, b"met" if met else b"timed out", status=200 if met else 504)
    elif path == "/slow":
        await asyncio.sleep(int(query.get("ms", "100")) / 1000)
        await _plain(send, b"slept")
    elif path == "/forever":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        chunk = b"x" * 16384
        while True:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if await _gone(receive):
                stats["disconnects"] += 1
                return
    elif path == "/wait-disconnect":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"waiting", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        stats["disconnects"] += 1
    elif path == "/stats":
        await _plain(send, json.dumps(stats).encode(), b"application/json")
    elif path == "/trailers":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")],
                    "trailers": True})
        await send({"type": "http.response.body", "body": b"hello ", "more_body": True})
        await send({"type": "http.response.body", "body": b"world"})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")], "more_trailers": True})
        await send({"type": "http.response.trailers", "headers": [(b"x-count", b"2")]})
    elif path == "/big-head":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"x-big", b"a" * int(query.get("n", "0")))]})
        await send({"type": "http.response.body", "body": b"big"})
    elif path == "/hints":
        await send({"type": "http.response.early_hint", "links": [b"</a.css>; rel=preload; as=style"]})
        await _plain(send, b"done")
    else:
        await _plain(send, b"not found", status=404)


async def _gone(receive) -> bool:
    """Whether the client went away, without waiting (the body was read: receive() only
    returns once the stream is over)."""
    task = asyncio.ensure_future(receive())
    await asyncio.sleep(0)
    if task.done():
        return task.result()["type"] == "http.disconnect"
    task.cancel()
    return False


async def _plain(send, body: bytes, content_type: bytes = b"text/plain", status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body})

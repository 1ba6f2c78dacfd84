"""The app HTTP/3's real-client tests talk to (tests/http3/test_http3.py, the quic-go client
in tests/interop/go/h3, benchmarks/h3.py). Every answer is JSON or bytes a client can check:

- ``/info``: the scope's ``http_version``, ``scheme`` and ``client``, this process's pid,
  and the alt-svc the app saw nothing of (HTTP/3 requests have none);
- ``/echo`` (POST): the body's length and SHA-256; a request's trailers are never seen;
- ``/stream?chunks=N&size=B``: N bodies of B bytes each, every one with ``more_body``;
- ``/large?bytes=N``: N bytes of ``i % 251`` in one body (flow control is the server's);
- ``/wait``: waits for ``http.disconnect`` (a client's stream reset) and counts it in
  this process; ``/disconnects`` answers that count;
- ``/own-alt-svc``: a response carrying its own alt-svc header, which must win;
  ``/own-hsts`` the same with its own strict-transport-security (max-age=5).
- ``/tls``: ``scope["extensions"]["tls"]`` (null when absent), the ``http_version`` and the
  pid;
- ``/slow?ms=N``: prints ``SLOW-START`` (flushed), sleeps N ms, then answers (a request
  in flight while a drain begins);
- ``/cl-over`` and ``/cl-under``: a content-length of 10 with 20 body bytes, or with 4 and
  then the end; each prints what ``send`` raised (``CL-ERROR <message>``).
"""

import asyncio
import json
import os
from urllib.parse import parse_qs

PATTERN = bytes(i % 251 for i in range(251))
DISCONNECTS = {"count": 0, "waiting": 0}


def pattern(size: int) -> bytes:
    whole, rest = divmod(size, len(PATTERN))
    return PATTERN * whole + PATTERN[:rest]


async def _json(send, value, headers=()) -> None:
    body = json.dumps(value).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive) -> tuple[int, str]:
    import hashlib

    digest, size = hashlib.sha256(), 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        digest.update(chunk)
        size += len(chunk)
        if not message.get("more_body"):
            break
    return size, digest.hexdigest()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    path, query = scope["path"], parse_qs(scope["query_string"].decode())
    number = lambda name, default: int(query.get(name, [default])[0])  # noqa: E731
    if path == "/echo":
        size, sha = await _read_body(receive)
        await _json(send, {"bytes": size, "sha256": sha, "pid": os.getpid(), "http_version": scope["http_version"]})
    elif path == "/stream":
        chunks, size = number("chunks", 100), number("size", 1000)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/octet-stream")]})
        for i in range(chunks):
            await send({"type": "http.response.body", "body": bytes([i % 256]) * size, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/large":
        body = pattern(number("bytes", 1 << 20))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
    elif path == "/wait":
        DISCONNECTS["waiting"] += 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"waiting\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        DISCONNECTS["waiting"] -= 1
        DISCONNECTS["count"] += 1
    elif path == "/disconnects":
        await _json(send, {**DISCONNECTS, "pid": os.getpid()})
    elif path == "/slow":
        print("SLOW-START", flush=True)
        await asyncio.sleep(number("ms", 1000) / 1000)
        await _json(send, {"slept_ms": number("ms", 1000), "pid": os.getpid()})
    elif path in ("/cl-over", "/cl-under"):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
        try:
            if path == "/cl-over":
                await send({"type": "http.response.body", "body": b"x" * 20})
            else:
                await send({"type": "http.response.body", "body": b"x" * 4, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except RuntimeError as e:
            print(f"CL-ERROR {e}", flush=True)
            raise
    elif path == "/tls":
        tls = scope.get("extensions", {}).get("tls")
        await _json(send, {"tls": tls, "http_version": scope["http_version"], "pid": os.getpid()})
    elif path == "/own-alt-svc":
        await _json(send, {"pid": os.getpid()}, headers=[(b"alt-svc", b"clear")])
    elif path == "/own-hsts":
        await _json(send, {"pid": os.getpid()}, headers=[(b"strict-transport-security", b"max-age=5")])
    else:
        await _read_body(receive)
        client = scope.get("client")
        await _json(send, {"http_version": scope["http_version"], "scheme": scope["scheme"], "pid": os.getpid(),
                           "path": path, "client": list(client) if client else None})

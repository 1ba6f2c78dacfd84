"""The app the interop matrix's clients (Go, Node, Java, curl, nghttp, browsers) talk to.

Routes:
  GET  /hello           b"hello"; header x-http-version is the scope's http_version
  POST /echo            the request body back, streamed as it arrives (any size);
                        header x-http-version as above
  GET  /download?n=N    N bytes (at most 1 GiB) of the pattern bytes(i % 251), sent in
                        64 KiB body messages
  GET  /sse?n=N         N server-sent events "data: i", one body message each
  /test.Echo/*          the gRPC echo service of tests/apps/grpc_echo.py
  websocket (any path)  echo: text back as text, bytes back as bytes, until the client closes
"""

from tests.apps import grpc_echo, ws

CHUNK = 64 * 1024
DOWNLOAD_MAX = 1 << 30
PATTERN = bytes(i % 251 for i in range(251 * ((CHUNK // 251) + 2)))


def pattern(offset: int, n: int) -> bytes:
    """n bytes of the download pattern starting at byte `offset`."""
    start = offset % 251
    if n + start <= len(PATTERN):
        return PATTERN[start:start + n]
    return bytes((offset + i) % 251 for i in range(n))


def query_int(scope, name: str, default: int) -> int:
    for part in scope["query_string"].decode().split("&"):
        key, _, value = part.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return default


async def websocket(scope, receive, send):
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await ws.echo(receive, send)


async def http(scope, receive, send):
    path = scope["path"]
    version = [(b"x-http-version", scope["http_version"].encode())]
    if path.startswith("/test.Echo/"):
        return await grpc_echo.app(scope, receive, send)
    if path == "/echo":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream"), *version]})
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            more = message.get("more_body", False)
            body = message.get("body", b"")
            if body or not more:
                await send({"type": "http.response.body", "body": body, "more_body": more})
            if not more:
                return
    if path == "/download":
        n = min(query_int(scope, "n", 0), DOWNLOAD_MAX)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream"),
                                (b"content-length", str(n).encode()), *version]})
        sent = 0
        while sent < n:
            size = min(CHUNK, n - sent)
            await send({"type": "http.response.body", "body": pattern(sent, size), "more_body": sent + size < n})
            sent += size
        if n == 0:
            await send({"type": "http.response.body", "body": b""})
        return
    if path == "/sse":
        n = query_int(scope, "n", 3)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        for i in range(n):
            await send({"type": "http.response.body", "body": f"data: {i}\n\n".encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/hello":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), *version]})
        await send({"type": "http.response.body", "body": b"hello"})
        return
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"not found"})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await grpc_echo.app(scope, receive, send)
    if scope["type"] == "websocket":
        return await websocket(scope, receive, send)
    return await http(scope, receive, send)

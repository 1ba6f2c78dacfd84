"""Apps that break the ASGI contract in various ways; ``/ok`` works."""


async def start(send, headers=()):
    await send({"type": "http.response.start", "status": 200, "headers": list(headers)})


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/raise-before":
        raise RuntimeError("boom-before-start")
    elif path == "/raise-after":  # promises 100 bytes, sends 10, then fails
        await start(send, [(b"content-length", b"100")])
        await send({"type": "http.response.body", "body": b"0123456789", "more_body": True})
        raise RuntimeError("boom-after-start")
    elif path == "/raise-after-chunked":
        await start(send)
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError("boom-after-start")
    elif path == "/no-response":
        return
    elif path == "/body-before-start":
        await send({"type": "http.response.body", "body": b"too early"})
    elif path == "/double-start":
        await start(send)
        await start(send)
        await send({"type": "http.response.body", "body": b"should not be sent"})
    else:
        await start(send, [(b"content-length", b"2")])
        await send({"type": "http.response.body", "body": b"ok"})

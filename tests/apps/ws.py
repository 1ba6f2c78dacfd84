"""A raw ASGI WebSocket app with one behaviour per path; plain HTTP requests get the scope as JSON."""

import asyncio
import json


async def app(scope, receive, send):
    if scope["type"] == "http":
        body = json.dumps({"type": scope["type"], "path": scope["path"]}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return
    if scope["type"] != "websocket":
        return
    path = scope["path"]
    assert (await receive())["type"] == "websocket.connect"
    if path == "/echo":
        await send({"type": "websocket.accept"})
        await echo(receive, send)
    elif path == "/scope":
        await send({"type": "websocket.accept", "subprotocol": (scope["subprotocols"] or [None])[-1],
                    "headers": [(b"x-custom", b"yes")]})
        shown = {k: v for k, v in scope.items() if k not in ("headers", "state", "raw_path", "query_string")}
        shown["client"] = list(scope["client"])
        shown["server"] = list(scope["server"])
        shown["query_string"] = scope["query_string"].decode()
        shown["header_names"] = sorted({k.decode() for k, _ in scope["headers"]})
        await send({"type": "websocket.send", "text": json.dumps(shown)})
        await receive()
    elif path == "/close-code":
        # The server closes with the code and reason the client asks for in the query.
        await send({"type": "websocket.accept"})
        code, _, reason = scope["query_string"].decode().partition("&")
        await send({"type": "websocket.close", "code": int(code), "reason": reason})
    elif path == "/disconnect-report":
        # Reports the disconnect event it saw through a second connection's /events.
        await send({"type": "websocket.accept"})
        message = await receive()
        EVENTS.append(message)
    elif path == "/events":
        await send({"type": "websocket.accept"})
        for _ in range(100):
            if EVENTS:
                break
            await asyncio.sleep(0.02)
        await send({"type": "websocket.send", "text": json.dumps(EVENTS)})
        EVENTS.clear()
        await send({"type": "websocket.close"})
    elif path == "/reject":
        await send({"type": "websocket.close"})
    elif path == "/deny":
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"x-denied", b"1")]})
        await send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"entry"})
    elif path == "/flood":
        # Sends 64 KiB messages as fast as send() lets it; reports how many through /events.
        await send({"type": "websocket.accept"})
        chunk = b"x" * 65536
        sent = 0
        try:
            while sent < 100_000:
                await send({"type": "websocket.send", "bytes": chunk})
                sent += 1
        except OSError:
            pass
        EVENTS.append({"sent": sent})
    elif path == "/send-after-disconnect":
        # Sends once the client has gone and lets what send() raises propagate, as an echo
        # loop racing a client's close does; /events reports the exception's name.
        await send({"type": "websocket.accept"})
        await receive()
        try:
            await send({"type": "websocket.send", "text": "too late"})
        except BaseException as exc:
            EVENTS.append({"raised": type(exc).__name__, "oserror": isinstance(exc, OSError)})
            raise
    elif path == "/slow-echo":
        # Reads nothing for a second (the client's messages queue up), then echoes them all.
        await send({"type": "websocket.accept"})
        await asyncio.sleep(1)
        await echo(receive, send)
    elif path == "/close-then-wait":
        # Closes first, then waits for the end; /events reports what it saw.
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4000})
        EVENTS.append(await receive())
    elif path == "/idle":
        await send({"type": "websocket.accept"})
        await receive()
    elif path == "/raise":
        await send({"type": "websocket.accept"})
        raise RuntimeError("boom")
    elif path == "/raise-early":
        raise RuntimeError("boom before accept")
    elif path == "/return":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "bye"})


EVENTS = []


async def echo(receive, send) -> None:
    """Sends every message back as it came (text as text, bytes as bytes) until the client goes."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})

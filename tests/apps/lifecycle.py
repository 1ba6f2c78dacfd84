"""Apps for the server's lifecycle tests (tests/operations/test_lifecycle.py): a startup
that lasts until the test opens a gate, a streaming response and a WebSocket that say
on stdout when they see their disconnect.

The gate is the file named by $ZIGCORN_TEST_GATE: startup (lifespan for ASGI, the
warm-up request for WSGI) waits until it exists, at most 30 s.
"""

import asyncio
import os
import time

GATE_WAIT_SECONDS = 30.0


def say(text: str) -> None:
    print(text, flush=True)


def gate_open() -> bool:
    gate = os.environ.get("ZIGCORN_TEST_GATE")
    return gate is None or os.path.exists(gate)


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                say("STARTUP-BEGIN")
                deadline = time.monotonic() + GATE_WAIT_SECONDS
                while not gate_open() and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                say("STARTUP-END")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        say("WS-OPEN")
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                say(f"WS-DISCONNECT {message.get('code')}")
                return
            await send({"type": "websocket.send", "text": message.get("text") or ""})
    if scope["path"] == "/stream":
        # One chunk every 0.1 s until the client (or the server's deadline) ends it.
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        say("STREAM-OPEN")
        while True:
            try:
                message = await asyncio.wait_for(receive(), 0.1)
            except asyncio.TimeoutError:
                message = None
            if message is not None and message["type"] == "http.disconnect":
                say("STREAM-DISCONNECT")
                return
            await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
    if scope["path"] == "/sleep":
        say("SLEEP-START")
        await asyncio.sleep(float(scope["query_string"].decode().partition("=")[2] or 1))
    body = b"hello"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": body})


def wsgi(environ, start_response):
    """WSGI: the warm-up request (user-agent zigcorn-warmup) waits for the gate."""
    if environ.get("HTTP_USER_AGENT") == "zigcorn-warmup":
        say("STARTUP-BEGIN")
        deadline = time.monotonic() + GATE_WAIT_SECONDS
        while not gate_open() and time.monotonic() < deadline:
            time.sleep(0.02)
        say("STARTUP-END")
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]

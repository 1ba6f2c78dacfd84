"""Lifespan apps. Markers go to the file named by $ZIGCORN_TEST_MARKERS, one per line."""

import os


def mark(text: str) -> None:
    with open(os.environ["ZIGCORN_TEST_MARKERS"], "a") as f:
        f.write(text + "\n")


async def respond(send, body: bytes):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    """Marks startup/shutdown, puts a value in the lifespan state, serves it back."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"]["greeting"] = "hello from startup"
                mark("startup")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                mark("shutdown")
                await send({"type": "lifespan.shutdown.complete"})
                return
    await respond(send, scope["state"].get("greeting", "no state").encode())


async def startup_failed(scope, receive, send):
    if scope["type"] == "lifespan":
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "boom-startup-failed"})
        return
    await respond(send, b"should not serve")


async def raising(scope, receive, send):
    if scope["type"] == "lifespan":
        raise RuntimeError("boom-lifespan-raised")
    await respond(send, b"served")


async def scope_types(scope, receive, send):
    """Marks the type of every scope it is called with."""
    mark(scope["type"])
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await respond(send, b"ok")

"""A background task ticking every 10 ms from startup; ``/ticks`` reports how often it ran.

For the busy-poll tests: a loop that spins between requests must still run its timers.
"""

import asyncio

TICKS = [0]


async def _tick() -> None:
    while True:
        await asyncio.sleep(0.01)
        TICKS[0] += 1


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        task = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                task = asyncio.get_running_loop().create_task(_tick())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                task.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = str(TICKS[0]).encode() if scope["path"] == "/ticks" else b"ok"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

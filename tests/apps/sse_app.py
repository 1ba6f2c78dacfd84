"""Server-sent events with Starlette: each event is written before the next one exists.

`/events` sends event N, then waits until the client confirms it through `/ack?n=N`
before producing N+1: a server that held the first event back would never be told to
go on, so the client's reading events one by one proves they arrive as they are sent.
"""

import asyncio

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

acked = {"n": -1}
changed = asyncio.Event()


async def events(request):
    async def stream():
        for n in range(3):
            yield f"id: {n}\ndata: event {n}\n\n"
            while acked["n"] < n:
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), 10)
                except asyncio.TimeoutError:
                    yield "event: error\ndata: no ack\n\n"
                    return

    acked["n"] = -1
    return StreamingResponse(stream(), media_type="text/event-stream")


async def ack(request):
    acked["n"] = int(request.query_params["n"])
    changed.set()
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/events", events), Route("/ack", ack)])

"""A Litestar 2 app: JSON, a request body, a streamed response, and a WebSocket echo."""

from litestar import Litestar, Request, get, post, websocket_listener
from litestar.response import Stream


@get("/hello")
async def hello(q: str | None = None) -> dict:
    return {"framework": "litestar", "q": q}


@post("/echo")
async def echo(request: Request) -> bytes:
    return await request.body()


@get("/stream")
async def stream() -> Stream:
    async def parts():
        for i in range(5):
            yield f"chunk{i};"

    return Stream(parts(), media_type="text/plain")


@websocket_listener("/ws")
async def ws_echo(data: str) -> str:
    return f"echo: {data}"


app = Litestar(route_handlers=[hello, echo, stream, ws_echo])

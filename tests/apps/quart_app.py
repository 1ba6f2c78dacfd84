"""A Quart app: HTTP (JSON, body, streaming) and a WebSocket echo."""

from quart import Quart, request, websocket

app = Quart(__name__)


@app.get("/hello")
async def hello():
    return {"framework": "quart", "q": request.args.get("q")}


@app.post("/echo")
async def echo():
    return await request.get_data(), 200, {"content-type": "application/octet-stream"}


@app.get("/stream")
async def stream():
    async def parts():
        for i in range(5):
            yield f"chunk{i};".encode()

    return parts(), 200, {"content-type": "text/plain"}


@app.websocket("/ws")
async def ws():
    while True:
        message = await websocket.receive()
        await websocket.send(f"echo: {message}")

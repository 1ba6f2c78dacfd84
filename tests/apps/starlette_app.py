from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


async def home(request: Request):
    return PlainTextResponse("starlette home")


async def user(request: Request):
    return JSONResponse({"user": request.path_params["name"], "q": request.query_params.get("q")})


async def echo(request: Request):
    body = await request.body()
    return JSONResponse({"length": len(body), "reversed": body[::-1].decode()})


async def stream(request: Request):
    async def numbers():
        for i in range(5):
            yield f"{i}\n"

    return StreamingResponse(numbers(), media_type="text/plain")


async def ws_upper(websocket: WebSocket):
    await websocket.accept(subprotocol="upper" if "upper" in websocket.scope["subprotocols"] else None)
    try:
        while True:
            text = await websocket.receive_text()
            await websocket.send_text(text.upper())
    except WebSocketDisconnect as exc:
        DISCONNECTS.append(exc.code)


async def ws_disconnects(websocket: WebSocket):
    await websocket.accept()
    await websocket.send_json(DISCONNECTS)
    await websocket.close()


async def ws_denied(websocket: WebSocket):
    await websocket.send_denial_response(PlainTextResponse("members only", status_code=401))


DISCONNECTS = []

async def early_hints(request: Request):
    await request.send_early_hints("</style.css>; rel=preload; as=style")
    return PlainTextResponse("hinted")


app = Starlette(routes=[
    Route("/early-hints", early_hints),
    WebSocketRoute("/ws", ws_upper),
    WebSocketRoute("/ws/disconnects", ws_disconnects),
    WebSocketRoute("/ws/denied", ws_denied),
    Route("/", home),
    Route("/users/{name}", user),
    Route("/echo", echo, methods=["POST"]),
    Route("/stream", stream),
])

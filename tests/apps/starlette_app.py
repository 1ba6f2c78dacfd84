from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route


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


app = Starlette(routes=[
    Route("/", home),
    Route("/users/{name}", user),
    Route("/echo", echo, methods=["POST"]),
    Route("/stream", stream),
])

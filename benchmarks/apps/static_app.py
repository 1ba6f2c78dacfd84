"""Static files through Starlette, as FastAPI and Starlette apps serve them.

`GET /` answers the raw app's JSON (the harness's readiness check); `/files/NAME` is a
`FileResponse` of a file in $BENCH_STATIC_DIR. Starlette sends `http.response.pathsend`
where the server advertises it (zigcorn; granian), and reads the file in chunks
through Python where not (uvicorn).
"""

import os

from starlette.applications import Starlette
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

ROOT = os.environ.get("BENCH_STATIC_DIR", ".")


async def index(request):
    return JSONResponse({"message": "Hello, world!"})


async def files(request):
    return FileResponse(os.path.join(ROOT, request.path_params["name"]))


app = Starlette(routes=[Route("/", index), Route("/files/{name}", files)])

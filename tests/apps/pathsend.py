"""The `http.response.pathsend` extension, used well and badly, and through Starlette.

The files live in $ZIGCORN_TEST_FILES. Paths:
  /raw/NAME             start (no content-length), then pathsend of NAME
  /declared/NAME?cl=N   start with content-length N, then pathsend of NAME
  /after-body/NAME      a body message, then pathsend (an app error)
  /trailers/NAME        start declaring trailers, then pathsend (an app error)
  /outcome              what the last app error was, as text
  /scope                the scope's extension names
  /file/NAME            Starlette FileResponse
  /static/NAME          Starlette StaticFiles
"""

import os

from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

ROOT = os.environ.get("ZIGCORN_TEST_FILES", "/nonexistent")
outcome = {"last": ""}


async def file_response(request):
    return FileResponse(os.path.join(ROOT, request.path_params["name"]))


starlette_app = Starlette(routes=[
    Route("/file/{name}", file_response),
    Mount("/static", StaticFiles(directory=ROOT, check_dir=False)),
])


async def app(scope, receive, send):
    if scope["type"] != "http":
        return await starlette_app(scope, receive, send)
    kind, _, name = scope["path"].lstrip("/").partition("/")
    path = os.path.join(ROOT, name)
    if kind == "raw":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/octet-stream")]})
        await send({"type": "http.response.pathsend", "path": path})
    elif kind == "declared":
        cl = scope["query_string"].decode().partition("=")[2]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", cl.encode())]})
        await send({"type": "http.response.pathsend", "path": path})
    elif kind in ("after-body", "trailers"):
        await send({"type": "http.response.start", "status": 200, "headers": [], "trailers": kind == "trailers"})
        if kind == "after-body":
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
        try:
            await send({"type": "http.response.pathsend", "path": path})
            outcome["last"] = "sent"
        except RuntimeError as exc:
            outcome["last"] = str(exc)
            raise
    elif kind == "scope":
        body = ",".join(sorted(scope.get("extensions", {}))).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})
    elif kind == "outcome":
        body = outcome["last"].encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})
    else:
        await starlette_app(scope, receive, send)

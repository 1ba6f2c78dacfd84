"""FastAPI returning a 20 KiB JSON document, for benchmarks/compression.py.

`app` is bare (the server compresses); `gzip_app` wraps it in Starlette's GZipMiddleware
at level 6 (compression in Python, on the event loop's thread), the level zigcorn uses by
default; `gzip_default_app` in the middleware as `add_middleware(GZipMiddleware)` gives it
(level 9, 500 bytes minimum)."""

import json

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.middleware.gzip import GZipMiddleware

ITEMS = [{"id": i, "name": f"item {i}", "price": i * 1.25, "tags": ["alpha", "beta"]} for i in range(400)]
DOC = json.dumps(ITEMS).encode()[: 20 * 1024 - 2] + b"  "

app = FastAPI()


@app.get("/doc")
async def doc() -> Response:
    return Response(DOC, media_type="application/json")


gzip_app = GZipMiddleware(app, minimum_size=1024, compresslevel=6)
gzip_default_app = GZipMiddleware(app)
